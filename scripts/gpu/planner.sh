#!/usr/bin/env bash
# On a CUDA machine: measure the planner's profile of the MegaGraph paper's model (16 layers,
# 8 heads, hidden = FFN = 64) on the GPU (CubeCL kernels, memory from the CubeCL runtime's
# statistics), then plan one H200 at S = 16K and 64K and validate the top plans by running them,
# printing predicted against measured step time and peak memory.
#
#   scripts/gpu/planner.sh [OUT_DIR]        (SEQ_LENS, TOP override the defaults)
#
# Results: OUT_DIR/profile.json, OUT_DIR/plan_S.json (+ .svg); default OUT_DIR: gpu-out.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-gpu-out}"
mkdir -p "$out"
seq_lens="${SEQ_LENS:-16384 65536}"
top="${TOP:-4}"
cluster=configs/clusters/h200-1x.toml

# without Burn's autotuner, which took 15-40 s per new matrix-product shape on the H200
cargo build --release --features cuda-untuned --bin megagraph
bin="${CARGO_TARGET_DIR:-target}/release/megagraph"
"$bin" profile --backend cuda --cluster "$cluster" --preset paper --json "$out/profile.json" \
    --cache-dir "$out/cache"
for s in $seq_lens; do
    "$bin" plan --backend cuda --profile measured --cluster "$cluster" --preset paper \
        --seq-len "$s" --sequences-per-step 8 --validate --validate-top "$top" \
        --cache-dir "$out/cache" --json "$out/plan_$s.json" | tail -n $((top + 4))
done

#!/usr/bin/env bash
# On a CUDA machine: build the CubeCL kernels with `--features cuda`, check them against the
# reference on Flex (outputs, lse, gradients; fails above 1e-4 relative), time forward + backward,
# then time PyTorch's SDPA (dense float mask) and FlexAttention (score_mod over the same table)
# on the same problems when PyTorch is installed, and print one table of ratios.
#
#   scripts/gpu/attention.sh [OUT_DIR]        (SIZES, HEAD_DIMS, ITERATIONS override the defaults)
#
# Results: OUT_DIR/megagraph.jsonl, OUT_DIR/torch.jsonl, OUT_DIR/table.md (default OUT_DIR: gpu-out).
# The table gives the median forward + backward time, TFLOP/s (14·N²·head_dim·heads per step,
# FlashAttention's convention) and the fraction of the H200's dense FP32 peak (67 TFLOP/s).
#
# Without a usable NVIDIA GPU the script still builds the example (`--features cuda` compiles
# without a CUDA toolkit), then says plainly that nothing was run and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-gpu-out}"
mkdir -p "$out"
sizes="${SIZES:-4096,16384,65536}"
head_dims="${HEAD_DIMS:-8,64}"
iterations="${ITERATIONS:-10}"

cargo build --release -p megagraph-kernels --features cuda --example gpu_attention
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "NOT RUN: no NVIDIA GPU found (nvidia-smi missing or lists no GPU). The example was built" \
        "with --features cuda; no correctness check and no timing were run." | tee "$out/NOT-RUN.txt"
    exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cargo run --release -p megagraph-kernels --features cuda --example gpu_attention -- \
    --sizes "$sizes" --head-dims "$head_dims" --iterations "$iterations" | tee "$out/megagraph.jsonl"
python3 scripts/gpu/torch_attention.py --sizes "$sizes" --head-dims "$head_dims" \
    --iterations "$iterations" | tee "$out/torch.jsonl" || echo "PyTorch baselines failed" >&2

python3 scripts/gpu/attention_table.py "$out"

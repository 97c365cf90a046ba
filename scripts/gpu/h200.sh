#!/usr/bin/env bash
# Every GPU check of megagraph in one run on one H200, within 10 minutes (issue 22):
#   env      the GPU, the driver and the CUDA compiler;
#   kernels  the CubeCL kernels against the reference on Flex (outputs, lse, every gradient), an
#            index past 2^32 entries against float64, then forward + backward timed for
#            N in {4096, 16384, 65536} and head_dim in {8, 64} (scripts/gpu/attention.sh's table);
#   torch    the same problems in PyTorch: SDPA with a dense float mask, FlexAttention with a
#            score_mod reading the table through the index;
#   train    the paper model (16 layers, 8 heads, hidden = FFN = 64), `--backend cuda`, sequences
#            of TRAIN_SEQ_LEN nodes: layouts (1,1,1), (1,2,1) and (2,1,1) even and uneven on the
#            one GPU on a 131,072-node graph (configs/train/paper-131k.toml), then (1,1,1) on a
#            1M-node graph: seconds per step and per-rank peak memory from the CubeCL meter;
#   planner  `megagraph profile --backend cuda`, then `plan --validate` on configs/clusters/h200-1x.toml;
#   temporal issue 21's speed grid on the machine's 16 cores (scripts/gpu/temporal.sh: mini-batch
#            against DepBloom at 1, 2, 4 and 8 workers, CPU only), from the event streams in
#            TEMPORAL_DATA (default: BIN_DIR/temporal, else ../shared/datasets/temporal).
# Each phase has its own time limit, cut to what is left of DEADLINE_S (default 540 s) for the
# whole run, and writes under OUT_DIR/work; a failing phase does not stop the others. At the end
# everything is packed into OUT_DIR/results.tgz (a device call brings back at most 8 files), and
# the tables and the summary, which says which phases ran, are printed.
#
#   scripts/gpu/h200.sh [OUT_DIR]    (PHASES, DEADLINE_S, SIZES, HEAD_DIMS, TRAIN_SEQ_LEN,
#                                     TRAIN_STEPS, PLAN_SEQ_LEN override the defaults;
#                                     TEMPORAL_CPUS=8-15 MAIN_CPUS=0-7 run the temporal grid
#                                     beside the other phases, each on its own cores)
#
# The device machine has no Rust: build here and carry the binaries (paths under .device/ are
# ignored through .git/info/exclude):
#
#   export CUDARC_CUDA_VERSION=13000   # the device's driver and nvcc are CUDA 13.0
#   cargo build --release --features cuda-untuned --bin megagraph
#   (without Burn's autotuner: with it, each new matrix-product shape took 15-40 s to tune on the
#   H200 and no training phase ended its first step within its limit)
#   cargo build --release -p megagraph-kernels --features cuda --example gpu_attention
#   mkdir -p .device && strip -o .device/megagraph "$CARGO_TARGET_DIR/release/megagraph" \
#       && strip -o .device/gpu_attention "$CARGO_TARGET_DIR/release/examples/gpu_attention" \
#       && gzip -6 .device/megagraph .device/gpu_attention \
#       && cp -r ../shared/datasets/temporal .device/
#   (gzipped, both binaries fit in the 64 MiB a call carries)
#   run: BIN_DIR=.device scripts/gpu/h200.sh $OUT    carry: [".device"], timeout_s: 540
#
# Without BIN_DIR the script builds both with cargo (a machine with Rust and a GPU).
set -uo pipefail
cd "$(dirname "$0")/../.."
top="${1:-gpu-out}"
out="$top/work"
mkdir -p "$out"
deadline="${DEADLINE_S:-540}"
phases="${PHASES:-env kernels torch train planner temporal}"
sizes="${SIZES:-4096,16384,65536}"
head_dims="${HEAD_DIMS:-8,64}"
train_seq_len="${TRAIN_SEQ_LEN:-16384}"
train_steps="${TRAIN_STEPS:-4}"
plan_seq_len="${PLAN_SEQ_LEN:-16384}"
cluster=configs/clusters/h200-1x.toml

bin_dir="${BIN_DIR:-}"
temporal_data="${TEMPORAL_DATA:-${BIN_DIR:+$BIN_DIR/temporal}}"
temporal_data="${temporal_data:-../shared/datasets/temporal}"
if [ -z "$bin_dir" ]; then
    cargo build --release --features cuda-untuned --bin megagraph || exit 1
    cargo build --release -p megagraph-kernels --features cuda --example gpu_attention || exit 1
    bin_dir="${CARGO_TARGET_DIR:-target}/release"
    cp "$bin_dir/examples/gpu_attention" "$bin_dir/gpu_attention"
fi
if compgen -G "$bin_dir/*.gz" >/dev/null; then
    # carried compressed (the working tree travels in at most 64 MiB)
    mkdir -p /tmp/megagraph-bin
    for f in "$bin_dir"/*.gz; do
        gunzip -c "$f" >"/tmp/megagraph-bin/$(basename "$f" .gz)" && chmod +x "/tmp/megagraph-bin/$(basename "$f" .gz)"
    done
    bin_dir=/tmp/megagraph-bin
fi
megagraph="$bin_dir/megagraph"
# CubeCL loads NVRTC (libnvrtc) at run time; the driver's libcuda is already on the path. Never
# put CUDA's `compat/` folder first: its libcuda does not match the machine's driver (error 803,
# "unsupported display driver / cuda driver combination", seen on the H200 on 2026-12-04).
nvrtc=$(find /usr/local /usr/lib /usr/lib64 /opt -name 'libnvrtc.so.13*' -not -path '*/compat/*' 2>/dev/null | head -1)
[ -n "$nvrtc" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$nvrtc")"
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
# Burn's matrix-product autotune compiles and times every variant for each new shape: about 25 s
# per shape on the H200 (2026-12-04), so the paper model's first step did not end within 75 s.
# `minimal` tunes fewer variants (on wgpu/llvmpipe it cut a small model's first step from 77 s
# to 34 s, and a run with the tuner's results cached starts in 1 s); the op's kernels are not
# autotuned. The results are kept in target/autotune (the repository's, where CubeCL looks):
# a carried BIN_DIR/autotune is put there first, and the run's results come back in
# results.tgz (./autotune) to carry next time.
export CUBECL_AUTOTUNE_LEVEL="${CUBECL_AUTOTUNE_LEVEL:-minimal}"
if [ -n "${BIN_DIR:-}" ] && [ -d "$BIN_DIR/autotune" ]; then
    mkdir -p target && cp -r "$BIN_DIR/autotune" target/
fi
cache=/tmp/megagraph-cache
export MEGAGRAPH_CACHE="$cache" RUST_LOG="${RUST_LOG:-warn,megagraph_train=debug,cubecl_runtime::tune=info}"
summary=()
# phase NAME SECONDS COMMAND...: runs COMMAND under a time limit (cut to what is left before the
# deadline, keeping 15 s to pack the results), its output into OUT_DIR/work/NAME.log
phase() {
    local name="$1" limit="$2"
    shift 2
    local left=$((deadline - SECONDS - 15))
    if [ "$left" -lt 10 ]; then
        summary+=("$name: skipped, ${left} s left before the deadline")
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local started=$SECONDS
    echo "=== $name (limit ${limit}s) ==="
    timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    summary+=("$name: exit $rc after $((SECONDS - started)) s")
}
wants() { [[ " $phases " == *" $1 "* ]]; }

# TEMPORAL_CPUS (say 8-15): the temporal grid, which runs on the CPU alone, starts at once on those
# cores, beside the GPU phases, which keep to MAIN_CPUS (say 0-7); both sets are pinned with
# taskset, so neither takes the other's cores (memory bandwidth is still shared)
temporal_cpus="${TEMPORAL_CPUS:-}" pin=() temporal_pid="" temporal_started=$SECONDS
if [ -n "$temporal_cpus" ] && wants temporal && command -v taskset >/dev/null; then
    pin=(taskset -c "${MAIN_CPUS:?MAIN_CPUS names the cores of the GPU phases}")
    mkdir -p "$out/temporal"
    echo "=== temporal (CPUs $temporal_cpus, in the background) ==="
    timeout --kill-after=5 $((deadline - 20)) taskset -c "$temporal_cpus" env MEGAGRAPH_BIN="$megagraph" \
        DATA="$temporal_data" bash scripts/gpu/temporal.sh "$out/temporal" >"$out/temporal.log" 2>&1 &
    temporal_pid=$!
fi

if wants env; then
    phase env 20 bash -c 'nvidia-smi; nvcc --version | tail -2; nproc; free -g | head -2'
fi

if wants kernels; then
    phase kernels 140 "$bin_dir/gpu_attention" --check-sizes 200,640 --wide-check 46400 \
        --sizes "$sizes" --head-dims "$head_dims" --iterations 10 --budget-seconds 70
    grep '^{' "$out/kernels.log" >"$out/megagraph.jsonl"
fi

if wants torch; then
    phase torch 120 env PYTHONUNBUFFERED=1 python3 scripts/gpu/torch_attention.py --sizes "$sizes" \
        --head-dims "$head_dims" --iterations 10 --budget-seconds 70
    grep '^{' "$out/torch.log" >"$out/torch.jsonl"
    python3 scripts/gpu/attention_table.py "$out"
fi

if wants train; then
    # the paper model, one sequence of TRAIN_SEQ_LEN nodes per step: the layouts on a 131,072-node
    # CSBM graph (configs/train/paper-131k.toml: 8 sequences, so each run's evaluation is short),
    # then (1,1,1) on the 1M-node graph (configs/train/scale-1m.toml's, 62 sequences evaluated)
    steps=(--seq-len "$train_seq_len" --backend cuda --devices 1 --epochs 1 --max-steps "$train_steps")
    train=(--config configs/train/paper-131k.toml "${steps[@]}")
    phase train-111 75 "${pin[@]}" "$megagraph" train "${train[@]}" --metrics-out "$out/train-111.json"
    phase train-121 55 "${pin[@]}" "$megagraph" train "${train[@]}" --cp 2 --metrics-out "$out/train-121.json"
    phase train-211-even 45 "${pin[@]}" "$megagraph" train "${train[@]}" --pp 2 --stage-layers 8,8 \
        --metrics-out "$out/train-211-even.json"
    phase train-211-uneven 45 "${pin[@]}" "$megagraph" train "${train[@]}" --pp 2 --stage-layers 7,9 \
        --metrics-out "$out/train-211-uneven.json"
    phase train-1m-111 75 "${pin[@]}" "$megagraph" train --config configs/train/scale-1m.toml --preset paper \
        --layers 16 "${steps[@]}" --metrics-out "$out/train-1m-111.json"
    python3 - "$out" <<'EOF'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
rows = ["| layout | steps | median s/step (after the first) | per-rank peak GB (CubeCL meter) | index MB per rank |",
        "|---|---:|---:|---|---|"]
for name in ["train-111", "train-121", "train-211-even", "train-211-uneven", "train-1m-111"]:
    path = out / f"{name}.json"
    if not path.exists():
        rows.append(f"| {name} | - | - | - | - |")
        continue
    r = json.loads(path.read_text())
    steps = r.get("step_seconds", [])
    median = statistics.median(steps[1:] or steps) if steps else float("nan")
    peaks = ", ".join("-" if p is None else f"{p / 1e9:.2f}" for p in r.get("rank_peak_bytes", []))
    index = ", ".join(f"{b / 1e6:.1f}" for b in r.get("index_bytes_per_rank", []))
    rows.append(f"| {name} | {len(steps)} | {median:.3f} | {peaks} | {index} |")
table = "\n".join(rows)
(out / "train.md").write_text(table + "\n")
print(table)
EOF
fi

if wants planner; then
    phase profile 100 "${pin[@]}" "$megagraph" profile --backend cuda --cluster "$cluster" --preset paper \
        --rows 1024,4096,16384 --blocks 256,1024,4096,16384 --repeats 3 \
        --json "$out/profile.json" --cache-dir "$cache"
    phase plan 100 "${pin[@]}" "$megagraph" plan --backend cuda --profile measured --cluster "$cluster" --preset paper \
        --rows 1024,4096,16384 --blocks 256,1024,4096,16384 --repeats 3 \
        --seq-len "$plan_seq_len" --sequences-per-step 8 --validate --validate-top 3 --validate-steps 3 \
        --validate-seconds 2 --cache-dir "$cache" --json "$out/plan.json"
fi

if wants temporal && [ -z "$temporal_pid" ]; then
    phase temporal 150 env MEGAGRAPH_BIN="$megagraph" DATA="$temporal_data" \
        bash scripts/gpu/temporal.sh "$out/temporal"
fi
if [ -n "$temporal_pid" ]; then
    wait "$temporal_pid"
    summary+=("temporal (on CPUs $temporal_cpus, beside the other phases): exit $? after $((SECONDS - temporal_started)) s")
fi

echo "=== summary ==="
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
cat "$out/table.md" "$out/train.md" "$out/temporal/table.md" 2>/dev/null
[ -d target/autotune ] && cp -r target/autotune "$out/autotune"
tar czf "$top/results.tgz" -C "$out" . && rm -rf "$out" && echo "packed: $top/results.tgz"
exit 0

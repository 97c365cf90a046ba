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

python3 - "$out" <<'EOF'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = {}
for name in ("megagraph.jsonl", "torch.jsonl"):
    path = out / name
    if not path.exists():
        continue
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("kind") == "time":
            rows.setdefault((record["n"], record["head_dim"]), {})[record["impl"]] = record["median_seconds"]
impls = ["megagraph-cubecl", "torch-sdpa-dense-mask", "torch-flex-attention"]
heads, fp32_peak = 8, 67e12
lines = ["| N | head_dim | " + " | ".join(f"{i} ms (TFLOP/s, % FP32 peak)" for i in impls)
         + " | sdpa / megagraph | flex / megagraph |",
         "|---|---|" + "---|" * (len(impls) + 2)]
def cell(seconds, n, d):
    flops = 14.0 * n * n * d * heads / seconds
    return f"{seconds * 1e3:.3f} ({flops / 1e12:.2f}, {100 * flops / fp32_peak:.1f}%)"
for (n, d), times in sorted(rows.items()):
    ms = [cell(times[i], n, d) if i in times else "-" for i in impls]
    ours = times.get("megagraph-cubecl")
    ratio = lambda i: f"{times[i] / ours:.2f}" if ours and i in times else "-"
    lines.append(f"| {n} | {d} | " + " | ".join(ms) + f" | {ratio(impls[1])} | {ratio(impls[2])} |")
table = "\n".join(lines)
(out / "table.md").write_text(table + "\n")
print(table)
EOF

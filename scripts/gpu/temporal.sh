#!/usr/bin/env bash
# On the device machine (16 CPU cores): issue 21's speed target, which 2 cores cannot show.
# Runs `megagraph temporal compare` for mini-batch parallelism and DepBloom at 1, 2, 4 and 8
# workers, one epoch each, and prints DepBloom's events/s over mini-batch parallelism's per
# worker count, beside the test AP and the memory synchronized. Temporal training runs on the
# CPU backend (Flex); each worker gets cores / workers threads.
#
#   scripts/gpu/temporal.sh [OUT_DIR]    (DATASETS, WORKERS, SCHEMES, EPOCHS, MODEL override)
#
# The device machine has no Rust: build here and carry the binary and the event streams, which
# live outside the repository (paths under .device/ are ignored through .git/info/exclude):
#
#   echo /.device/ >> .git/info/exclude
#   mkdir -p .device && cp "$CARGO_TARGET_DIR/release/megagraph" .device/ \
#       && cp -r ../shared/datasets/temporal .device/
#   run: MEGAGRAPH_BIN=.device/megagraph DATA=.device/temporal scripts/gpu/temporal.sh $OUT
#        carry: [".device"], timeout_s: 540
#
# Results: OUT_DIR/<dataset>.json (compare's rows), OUT_DIR/<dataset>.log and OUT_DIR/table.md.
# Default OUT_DIR: gpu-out. Without MEGAGRAPH_BIN the script builds the binary with cargo.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-gpu-out}"
mkdir -p "$out"
data="${DATA:-../shared/datasets/temporal}"
datasets="${DATASETS:-collegemsg}"
workers="${WORKERS:-1,2,4,8}"
schemes="${SCHEMES:-minibatch,depbloom}"
epochs="${EPOCHS:-1}"
model="${MODEL:-tgn}"

bin="${MEGAGRAPH_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --bin megagraph
    bin="${CARGO_TARGET_DIR:-target}/release/megagraph"
fi
echo "cores: $(nproc); binary: $bin"
export MEGAGRAPH_CACHE="${MEGAGRAPH_CACHE:-$out/cache}"
for d in $datasets; do
    "$bin" temporal compare --dataset "$data/$d" --model "$model" --workers "$workers" \
        --schemes "$schemes" --epochs "$epochs" --mrr-negatives 0 --json "$out/$d.json" \
        2>&1 | tee "$out/$d.log"
done

python3 - "$out" $datasets <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
lines = ["| dataset | workers | minibatch events/s | depbloom events/s | depbloom / minibatch "
         "| test AP minibatch / depbloom | MB synced minibatch / depbloom |",
         "|---|---:|---:|---:|---:|---|---|"]
for name in sys.argv[2:]:
    rows = json.loads((out / f"{name}.json").read_text())
    by = {(r["scheme"], r["workers"]): r for r in rows}
    for w in sorted({r["workers"] for r in rows}):
        m, d = by.get(("minibatch", w)), by.get(("depbloom", w))
        if not (m and d):
            continue
        ratio = d["events_per_second"] / m["events_per_second"]
        mb = lambda r: r["sync_bytes_per_epoch"] / 1e6
        lines.append(f"| {name} | {w} | {m['events_per_second']:.0f} | {d['events_per_second']:.0f} "
                     f"| {ratio:.2f}x | {m['test_ap']:.4f} / {d['test_ap']:.4f} | {mb(m):.1f} / {mb(d):.1f} |")
table = "\n".join(lines)
(out / "table.md").write_text(table + "\n")
print(table)
EOF

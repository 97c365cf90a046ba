#!/usr/bin/env python3
"""The table of scripts/gpu/attention.sh and h200.sh: megagraph's kernels against PyTorch's SDPA
(dense float mask) and FlexAttention, from OUT_DIR/megagraph.jsonl and OUT_DIR/torch.jsonl, into
OUT_DIR/table.md (median forward + backward ms, TFLOP/s, % of the H200's dense FP32 peak, ratios).

Usage: attention_table.py OUT_DIR
"""
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

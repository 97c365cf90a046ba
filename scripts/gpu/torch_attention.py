#!/usr/bin/env python3
"""PyTorch baselines for the graph attention op, on the same problem as
cube-kernels/examples/gpu_attention.rs: q, k, v [1, 8, N, Dh], a u8 distance index [1, N, N]
with 32 buckets and a learned table [32, 8]; forward, backward of sum(out * R), device sync.

- sdpa:  scaled_dot_product_attention with the bias materialized as a float mask [1, 8, N, N]
         (gathered from the table inside the timed step, so the table gets its gradient);
- flex:  FlexAttention (torch.compile'd) with a score_mod that reads table[index[b, q, k], h].
         FlexAttention needs a head_dim of at least 16 (PyTorch 2.11: "NYI: embedding dimension
         ... must be at least 16"): smaller ones are zero-padded to 16, which leaves the logits
         and the first head_dim output columns unchanged ("padded_head_dim" in its lines).

Prints one JSON object per line. Sizes whose dense mask does not fit are reported as errors.
Usage: torch_attention.py [--sizes 4096,16384,65536] [--head-dims 8,64] [--iterations 10]
                          [--budget-seconds S]
--budget-seconds bounds the timing: a size whose steps (predicted from the last size of the
same implementation and head_dim, as N^2) would not fit in what is left runs fewer iterations or
is skipped with a "skip" line.
"""

import argparse
import json
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4096,16384,65536")
    parser.add_argument("--head-dims", default="8,64")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--budget-seconds", type=float, default=float("inf"))
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as error:
        print(json.dumps({"kind": "skip", "reason": f"PyTorch not available: {error}"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"kind": "skip", "reason": "torch.cuda.is_available() is false"}))
        return 0
    try:
        from torch.nn.attention.flex_attention import flex_attention

        flex = torch.compile(flex_attention)
    except Exception as error:  # older PyTorch
        flex = None
        print(json.dumps({"kind": "skip", "impl": "torch-flex", "reason": str(error)}))

    heads, buckets = 8, 32
    device = "cuda"
    started_all = time.perf_counter()
    last = {}  # (impl, head_dim) -> (n, seconds per step)
    for n in [int(x) for x in args.sizes.split(",")]:
        for head_dim in [int(x) for x in args.head_dims.split(",")]:
            gen = torch.Generator(device=device).manual_seed(n * 1000 + head_dim)
            shape = (1, heads, n, head_dim)
            q, k, v, r = (torch.rand(shape, device=device, generator=gen) * 2 - 1 for _ in range(4))
            index = torch.randint(0, buckets, (1, n, n), device=device, generator=gen, dtype=torch.uint8)
            table0 = torch.rand((buckets, heads), device=device, generator=gen) * 2 - 1

            def sdpa_step():
                qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                table = table0.detach().requires_grad_()
                mask = table[index.long()].permute(0, 3, 1, 2)  # [1, H, N, N]
                out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask)
                (out * r).sum().backward()

            index_int = index.int()

            pad = max(0, 16 - head_dim)

            def flex_step():
                qq, kk, vv = (F.pad(t, (0, pad)).detach().requires_grad_() for t in (q, k, v))
                table = table0.detach().requires_grad_()

                def score_mod(score, b, h, q_idx, kv_idx):
                    return score + table[index_int[b, q_idx, kv_idx], h]

                # the unpadded head_dim's scale, as SDPA and megagraph use
                out = flex(qq, kk, vv, score_mod=score_mod, scale=head_dim ** -0.5)[..., :head_dim]
                (out * r).sum().backward()

            # FlexAttention first: SDPA's dense mask is the slow one that the budget cuts
            steps = [("torch-flex-attention", flex_step)] if flex is not None else []
            steps.append(("torch-sdpa-dense-mask", sdpa_step))
            for name, step in steps:
                left = args.budget_seconds - (time.perf_counter() - started_all)
                runs = args.iterations
                if (name, head_dim) in last:
                    m, previous = last[(name, head_dim)]
                    predicted = previous * (n / m) ** 2
                    runs = min(runs, int(left // predicted) - 3)
                    if runs < 1:
                        print(json.dumps({"kind": "skip", "impl": name, "n": n, "head_dim": head_dim,
                                          "reason": f"predicted {predicted:.1f} s per step, {left:.0f} s left"}))
                        continue
                try:
                    for _ in range(2):
                        step()
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    seconds = []
                    for _ in range(runs):
                        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        begin.record()
                        step()
                        end.record()
                        torch.cuda.synchronize()
                        seconds.append(begin.elapsed_time(end) / 1e3)
                    last[(name, head_dim)] = (n, statistics.median(seconds))
                    print(json.dumps({
                        "kind": "time", "impl": name, "n": n, "heads": heads, "head_dim": head_dim,
                        "median_seconds": statistics.median(seconds), "iterations": runs,
                        "padded_head_dim": head_dim + pad if name == "torch-flex-attention" else head_dim,
                        "peak_bytes": torch.cuda.max_memory_allocated(),
                        # FlashAttention's convention: 4·N²·Dh per head forward, 2.5x backward
                        "tflops": 14.0 * n * n * head_dim * heads / statistics.median(seconds) / 1e12,
                    }))
                except Exception as error:  # out of memory, compile failure
                    print(json.dumps({"kind": "error", "impl": name, "n": n, "head_dim": head_dim,
                                      "reason": str(error)[:300]}))
                    torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

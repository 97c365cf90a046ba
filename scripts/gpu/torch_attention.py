#!/usr/bin/env python3
"""PyTorch baselines for the graph attention op, on the same problem as
cube-kernels/examples/gpu_attention.rs: q, k, v [1, 8, N, Dh], a u8 distance index [1, N, N]
with 32 buckets and a learned table [32, 8]; forward, backward of sum(out * R), device sync.

- sdpa:  scaled_dot_product_attention with the bias materialized as a float mask [1, 8, N, N]
         (gathered from the table inside the timed step, so the table gets its gradient);
- flex:  FlexAttention (torch.compile'd) with a score_mod that reads table[index[b, q, k], h].

Prints one JSON object per line. Sizes whose dense mask does not fit are reported as errors.
Usage: torch_attention.py [--sizes 4096,16384,65536] [--head-dims 8,64] [--iterations 10]
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

            def flex_step():
                qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                table = table0.detach().requires_grad_()

                def score_mod(score, b, h, q_idx, kv_idx):
                    return score + table[index_int[b, q_idx, kv_idx], h]

                out = flex(qq, kk, vv, score_mod=score_mod)
                (out * r).sum().backward()

            steps = [("torch-sdpa-dense-mask", sdpa_step)]
            if flex is not None:
                steps.append(("torch-flex-attention", flex_step))
            for name, step in steps:
                try:
                    for _ in range(2):
                        step()
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    seconds = []
                    for _ in range(args.iterations):
                        started = time.perf_counter()
                        step()
                        torch.cuda.synchronize()
                        seconds.append(time.perf_counter() - started)
                    print(json.dumps({
                        "kind": "time", "impl": name, "n": n, "heads": heads, "head_dim": head_dim,
                        "median_seconds": statistics.median(seconds), "iterations": args.iterations,
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

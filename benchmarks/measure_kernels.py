"""Measure a GPU's GEMM curve and fused-attention throughput, isolated, for its hardware profile.

    python benchmarks/measure_kernels.py [--json OUT.json]

GEMMs: bf16 A[M,K] @ B[K,N] over square sizes 256-8192 and the per-rank shapes of GPT layers from hidden 2048 to
16384 (the published runs' models), each timed as the best of 20 bursts of 10 calls after warm-up (MAMF-finder
style, Bekman's ml-engineering `mamf-finder.py`). Attention: PyTorch scaled_dot_product_attention (the fused
flash/cuDNN kernel PyTorch picks), causal, bf16, for head dims 64/96/128 and sequences 2048-8192, forward and
forward + backward, with FLOPs counted as the cost model does (causal half: 2*b*heads*s^2*d forward, 2.5x that
backward, FlashAttention-2 Sec. 3.1). benchmarks/fit_kernel_profile.py turns the JSON into profile values.
Needs a CUDA GPU; uses only torch.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from cuda_timing import burst_s

SQUARE = [256, 512, 1024, 2048, 4096, 8192]
# (tokens, in, out) of one rank's QKV / projection / MLP GEMMs at micro-batch 1-4, TP 1-8, hidden 2048-16384.
LAYER_SHAPES = [
    (16384, 2048, 6144), (16384, 2048, 2048), (16384, 2048, 8192), (16384, 8192, 2048),
    (8192, 4096, 6144), (8192, 2048, 4096), (8192, 4096, 8192), (8192, 8192, 4096),
    (4096, 12288, 4608), (4096, 1536, 12288), (4096, 12288, 6144), (4096, 6144, 12288),
    (4096, 16384, 6144), (4096, 2048, 16384), (4096, 16384, 8192), (4096, 8192, 16384),
]
ATTENTION = [(1, 16, 4096, 128), (4, 8, 2048, 96), (1, 32, 8192, 128), (2, 16, 2048, 64), (1, 12, 4096, 128)]


def best_s(fn, bursts: int = 20, calls: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return min(burst_s(fn, calls) for _ in range(bursts))


def measure_gemms() -> list[dict]:
    out = []
    for m, k, n in [(s, s, s) for s in SQUARE] + LAYER_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        t = best_s(lambda a=a, b=b: a @ b)
        out.append({"m": m, "k": k, "n": n, "flops": 2.0 * m * n * k, "time_s": t})
    return out


def measure_attention() -> list[dict]:
    out = []
    for b, heads, s, d in ATTENTION:
        q, k, v = (torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        grad = torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16)

        def fwd(q=q, k=k, v=v) -> None:
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd(q=q, k=k, v=v, grad=grad) -> None:
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

        fwd_flops = 2.0 * b * heads * s * s * d  # 4*b*h*s^2*d full, half of it causal
        out.append({"batch": b, "heads": heads, "seq": s, "head_dim": d, "forward_flops": fwd_flops,
                    "forward_s": best_s(fwd), "forward_backward_s": best_s(fwd_bwd, bursts=10, calls=5)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "gemm": measure_gemms(), "attention": measure_attention()}
    for g in result["gemm"]:
        print(f"gemm {g['m']:6d} x {g['k']:6d} x {g['n']:6d}: {g['flops'] / g['time_s'] / 1e12:7.1f} TFLOP/s")
    for a in result["attention"]:
        total = a["forward_flops"] * 3.5
        print(f"sdpa b{a['batch']} h{a['heads']} s{a['seq']} d{a['head_dim']}: forward "
              f"{a['forward_flops'] / a['forward_s'] / 1e12:6.1f}, fwd+bwd {total / a['forward_backward_s'] / 1e12:6.1f} TFLOP/s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()

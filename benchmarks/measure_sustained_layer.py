"""Measure one tensor-parallel rank's share of a GPT layer on a GPU, sustained, against isolated GEMM bursts.

    python benchmarks/measure_sustained_layer.py [--seconds 20] [--json OUT.json]

The shapes are Korthikanti et al. 2022 Table 4's 22B layer as one of its TP 8 ranks computes it (hidden 6144,
8 local heads of 96, local FFN 3072, micro-batch 4 x sequence 2048 = 8192 tokens), without the TP collectives, in
bf16 with PyTorch's fused (flash) attention and causal masking. It prints:
- isolated: each forward GEMM shape and a 8192^3 GEMM timed alone, best of short bursts (how MAMF-style sweeps
  and datasheet-derived profiles see the GPU);
- sustained: the whole layer forward and forward + backward, looped for --seconds after warm-up, median per
  iteration (how a training step sees it: clocks under sustained power draw, element-wise kernels between GEMMs);
- the GEMM-only forward sequence looped the same way, so the sustained/isolated ratio of the GEMMs alone is seen.
benchmarks/fit_layer_overhead.py --measured OUT.json compares the layer times with meshplan's layer model.
Needs a CUDA GPU; uses only torch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from cuda_timing import burst_s

TOKENS, HIDDEN, HEADS, HEAD_DIM, FFN, SEQ = 8192, 6144, 8, 96, 3072, 2048


def isolated_gemm_s(m: int, k: int, n: int) -> float:
    """Best per-call time over 20 bursts of 10 calls (MAMF-finder style: short bursts, best taken)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    return min(burst_s(lambda: a @ b, 10) for _ in range(20))


class LayerShard(torch.nn.Module):
    """One TP rank of a GPT layer (Megatron column/row split), no collectives."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HEADS * HEAD_DIM)
        self.proj = torch.nn.Linear(HEADS * HEAD_DIM, HIDDEN)
        self.ln2 = torch.nn.LayerNorm(HIDDEN)
        self.fc1 = torch.nn.Linear(HIDDEN, FFN)
        self.fc2 = torch.nn.Linear(FFN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = TOKENS // SEQ
        q, k, v = self.qkv(self.ln1(x)).view(b, SEQ, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(TOKENS, HEADS * HEAD_DIM))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def sustained_s(fn, seconds: float) -> float:
    """Median per-iteration time over `seconds` of back-to-back iterations, after 3 s of warm-up."""
    t_end = time.perf_counter() + 3.0
    while time.perf_counter() < t_end:
        burst_s(fn, 5)
    samples = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        samples.append(burst_s(fn, 5))
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    out: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                 "shapes": {"tokens": TOKENS, "hidden": HIDDEN, "local_heads": HEADS, "head_dim": HEAD_DIM,
                            "local_ffn": FFN, "seq": SEQ}}
    gemms = {"qkv": (TOKENS, HIDDEN, 3 * HEADS * HEAD_DIM), "proj": (TOKENS, HEADS * HEAD_DIM, HIDDEN),
             "fc1": (TOKENS, HIDDEN, FFN), "fc2": (TOKENS, FFN, HIDDEN), "square_8192": (8192, 8192, 8192)}
    iso = {name: isolated_gemm_s(*shape) for name, shape in gemms.items()}
    out["isolated_gemm_s"] = iso
    out["isolated_tflops"] = {n: 2 * m * k * nn / iso[n] / 1e12 for n, (m, k, nn) in gemms.items()}

    layer = LayerShard().cuda().to(torch.bfloat16)
    x = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn_like(x)

    def fwd() -> None:
        with torch.no_grad():
            layer(x)

    def fwd_bwd() -> None:
        layer(x).backward(grad)

    mats = {n: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16), torch.randn(k, nn, device="cuda", dtype=torch.bfloat16))
            for n, (m, k, nn) in gemms.items() if n != "square_8192"}

    def gemm_sequence() -> None:
        for a, b in mats.values():
            a @ b

    out["sustained_forward_s"] = sustained_s(fwd, args.seconds)
    out["sustained_forward_backward_s"] = sustained_s(fwd_bwd, args.seconds)
    out["sustained_gemm_sequence_s"] = sustained_s(gemm_sequence, args.seconds / 2)
    out["isolated_gemm_sequence_s"] = sum(iso[n] for n in mats)
    out["gemm_sustained_over_isolated"] = out["isolated_gemm_sequence_s"] / out["sustained_gemm_sequence_s"]
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()

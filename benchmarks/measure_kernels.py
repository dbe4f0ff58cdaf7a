"""Measure a GPU's GEMM curve and fused-attention throughput, isolated, for its hardware profile.

    python benchmarks/measure_kernels.py [--json OUT.json]

GEMMs: bf16 A[M,K] @ B[K,N] over square sizes 256-8192 and the per-rank shapes of GPT layers from hidden 2048 to
16384 (the published runs' models), each timed as the best of 20 bursts of 10 calls after warm-up (MAMF-finder
style, Bekman's ml-engineering `mamf-finder.py`). Attention: PyTorch scaled_dot_product_attention (the fused
flash/cuDNN kernel PyTorch picks), causal, bf16, for head dims 64/96/128 and sequences 2048-8192, forward and
forward + backward, with FLOPs counted as the cost model does (causal half: 2*b*heads*s^2*d forward, 2.5x that
backward, FlashAttention-2 Sec. 3.1). benchmarks/fit_kernel_profile.py turns the JSON into profile values.
Needs a CUDA GPU; uses only torch.

    python benchmarks/measure_kernels.py --shapes benchmarks/data/training_gemm_shapes.json --json OUT.json
                                         [--budget-s 300] [--device cpu --limit 3]

times instead every per-rank GEMM of the validated published runs (benchmarks/training_gemm_shapes.py: forward,
input-gradient and weight-gradient passes, operands stored as nn.Linear stores them), in the file's order (most
shared first), the best of 5 bursts of 5 calls each. Before every shape it times a reference GEMM, the
--reference cube (4096^3 by default), the same way: a GPU that warms up and lowers its clocks over the run shows
as a slower reference, so a shape effect and a drift in time cannot be mistaken for each other (two harnesses
disagree on whether training shapes run below 4096^3; docs/cost_sources.md, GEMM shape). OUT.json is rewritten
after every shape, so a run stopped by --budget-s or a time limit keeps what it timed. --device cpu with --limit
(and a small --reference) is a smoke test of the harness itself.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

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


def best_s(fn, bursts: int = 20, calls: int = 10, device: str = "cuda") -> float:
    for _ in range(3):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return min(burst_s(fn, calls, device) for _ in range(bursts))


def pass_operands(step: str, m: int, k: int, n: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A and B of C[m,n] = A[m,k] @ B[k,n] for one training pass (benchmarks/training_gemm_shapes.py), laid out
    as nn.Linear keeps them: fwd X @ W^T (W stored [n, k]); dgrad dY @ W (W stored [k, n] = [out, in]); wgrad
    dY^T @ X (dY stored [k, m] = [tokens, out])."""
    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=torch.bfloat16)

    if step == "fwd":
        return rand(m, k), rand(n, k).t()
    if step == "dgrad":
        return rand(m, k), rand(k, n)
    if step == "wgrad":
        return rand(k, m).t(), rand(k, n)
    raise ValueError(f"pass {step!r} is not one of fwd, dgrad, wgrad")


def measure_training_shapes(path: Path, out: Path | None, device: str, budget_s: float, limit: int | None,
                            reference: int = 4096) -> dict:
    """Time every shape of a training_gemm_shapes.py file, each after the `reference` cube (see the module
    docstring); `out` is rewritten after each shape so a cut-short run keeps its measurements."""
    shapes = json.loads(path.read_text())["shapes"][:limit]
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    ref_a, ref_b = pass_operands("dgrad", reference, reference, reference, device)  # plain row-major A @ B
    result = {"device": name, "torch": torch.__version__, "shapes_file": str(path), "timing": "best of 5 bursts of 5",
              "reference": {"m": reference, "k": reference, "n": reference, "flops": 2.0 * reference**3},
              "training_gemm": []}
    start = time.perf_counter()
    for shape in shapes:
        if time.perf_counter() - start > budget_s:
            result["stopped"] = f"budget of {budget_s:.0f} s spent after {len(result['training_gemm'])} shapes"
            break
        ref_s = best_s(lambda: ref_a @ ref_b, bursts=5, calls=5, device=device)
        a, b = pass_operands(shape["pass"], shape["m"], shape["k"], shape["n"], device)
        t = best_s(lambda a=a, b=b: a @ b, bursts=5, calls=5, device=device)
        result["training_gemm"].append({key: shape[key] for key in ("pass", "m", "k", "n", "count", "flops")}
                                       | {"time_s": t, "reference_time_s": ref_s})
        del a, b
        if out is not None:
            out.write_text(json.dumps(result, indent=1))
    return result


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
    ap.add_argument("--shapes", type=Path, help="time this training_gemm_shapes.py file instead of the default sweep")
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="stop timing shapes after this long")
    ap.add_argument("--limit", type=int, help="time only the first N shapes")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test of the harness")
    ap.add_argument("--reference", type=int, default=4096, help="side of the cube timed before every --shapes shape")
    args = ap.parse_args()
    if args.shapes is not None:
        done = measure_training_shapes(args.shapes, Path(args.json) if args.json else None, args.device,
                                       args.budget_s, args.limit, args.reference)
        for g in done["training_gemm"]:
            print(f"{g['pass']:5s} {g['m']:6d} x {g['k']:6d} x {g['n']:6d}: {g['flops'] / g['time_s'] / 1e12:7.1f} TFLOP/s")
        print(done.get("stopped", f"timed all {len(done['training_gemm'])} shapes"))
        return
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

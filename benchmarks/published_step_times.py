"""A published run's step time, from what its source states, with the source's own FLOP accounting.

Sources report a time per iteration, a throughput (samples or tokens per GPU per second), achieved TFLOP/s, an MFU,
or GPU hours per trillion tokens. TFLOP/s and MFU are a FLOP count divided by time, so they become a step time only
through the formula the source counted with:

- Narayanan et al. 2021 Eq. 3: F = 96 B s L h^2 (1 + s/6h + V/16Lh), counts the recomputed forward pass (full
  activation recomputation), the Megatron-LM 2021 convention (Table 1 / Table 2).
- Korthikanti et al. 2022 Eq. 7 (model FLOPs): F = 72 B s L h^2 (1 + s/6h + V/12Lh), no recomputation, the attention
  scores over all s keys (no causal halving); Megatron-LM's num_floating_point_operations for GPT shapes until 2025.
- PaLM (Chowdhery et al. 2022, App. B), the MFU the Llama 3 paper cites: 6 N + 12 L H Q T FLOPs per token, N the
  parameters without the input embedding, H Q = heads x head dim, T = sequence length (no causal halving).
- Megatron-Core 2025 (megatron/training/training.py num_floating_point_operations at df0430dbf2, 2025-04): per token
  12 L h^2 (1 + g/a + s/2h) (a d/h) for GQA attention (causal halving since 2025-03), 12 L h (f_dense gl (dense share)
  + f_expert k gl (MoE share) + f_shared gl (MoE share)) for the MLPs (gl = 3/2 for SwiGLU), 6 h V for the logits.

Each formula is checked in tests/unit/test_published_runs.py against numbers the sources print (e.g. Korthikanti
Table 5's MFU from its iteration times, MegaScale Table 2's MFU from its iteration times).
"""

from __future__ import annotations

from published_cases import PublishedRun

from planner.model import ModelSpec


def narayanan_eq3(batch: int, seq: int, model: ModelSpec) -> float:
    s, L, h, V = seq, model.num_layers, model.hidden_size, model.vocab_size
    return 96.0 * batch * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))


def korthikanti_eq7(batch: int, seq: int, model: ModelSpec) -> float:
    s, L, h, V = seq, model.num_layers, model.hidden_size, model.vocab_size
    return 72.0 * batch * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h))


def palm(batch: int, seq: int, model: ModelSpec) -> float:
    """6 N + 12 L H Q T per token; N without the input token embedding (the LM head's GEMM is counted: untied, it
    is its own matrix; tied, the shared matrix is counted once, as the head)."""
    n = model.num_params() - (model.vocab_size * model.hidden_size if not model.tied_embeddings else 0)
    return batch * seq * (6.0 * n + 12.0 * model.num_layers * model.num_heads * model.head_dim * seq)


def megatron_2025(batch: int, seq: int, model: ModelSpec) -> float:
    L, h, a = model.num_layers, model.hidden_size, model.num_heads
    g, d = model.num_kv_heads, model.head_dim
    gl = 1.5 if model.mlp == "swiglu" else 1.0
    moe_layers = sum(model.is_moe_layer(i) for i in range(L))
    dense_share, moe_share = (L - moe_layers) / L, moe_layers / L
    attention = 12.0 * L * h * h * (1 + g / a + seq / h / 2) * (a * d / h)
    mlp = model.ffn_hidden_size * gl * dense_share
    if model.moe is not None:
        e = model.moe
        mlp += e.expert_ffn_hidden_size * (e.top_k + e.num_shared_experts) * gl * moe_share
    return batch * seq * (12.0 * L * h * mlp + attention + 6.0 * h * model.vocab_size)


FORMULAS = {"narayanan_eq3": narayanan_eq3, "korthikanti_eq7": korthikanti_eq7, "palm": palm, "megatron_2025": megatron_2025}
FORMULA_NAMES = {"narayanan_eq3": "Narayanan Eq.3", "korthikanti_eq7": "Korthikanti Eq.7", "palm": "PaLM 6N+12LHQT",
                 "megatron_2025": "Megatron-Core 2025"}


def legacy_step_time(case: PublishedRun) -> tuple[str, float, str | None]:
    """(method, value, formula) of a first-round case, from its id and throughput block."""
    thr = case.throughput
    if "iteration_time_s_readme" in thr:
        return "stated", float(thr["iteration_time_s_readme"]), None
    formula = "narayanan_eq3" if case.id.startswith("narayanan2021") else "korthikanti_eq7"
    return "tflops_per_gpu", float(thr["tflops_per_gpu"]), formula


def step_time_s(case: PublishedRun, model: ModelSpec) -> tuple[float, str]:
    """The published step time in seconds and how it was derived (a short label for the table)."""
    if case.step_time is not None:
        st = case.step_time
        method, value, formula, peak = st.method, st.value, st.formula, st.peak_tflops
    else:
        (method, value, formula), peak = legacy_step_time(case), None
    batch, seq, gpus = case.batch.global_batch_seqs, case.model.seq_len, case.hardware.num_gpus
    if method == "stated":
        return value, "stated time"
    if method == "samples_per_gpu_s":
        return batch / (value * gpus), "samples/GPU/s"
    if method == "tokens_per_gpu_s":
        return batch * seq / (value * gpus), "tokens/GPU/s"
    if method == "gpu_hours_per_trillion_tokens":
        return batch * seq * value * 3600.0 / 1e12 / gpus, "GPU-h/token"
    if formula is None:
        raise ValueError(f"case {case.id}: step_time method {method} needs a formula")
    flops = FORMULAS[formula](batch, seq, model)
    if method == "tflops_per_gpu":
        return flops / (value * 1e12 * gpus), FORMULA_NAMES[formula]
    if peak is None:
        raise ValueError(f"case {case.id}: step_time method mfu_pct needs peak_tflops")
    return flops / (value / 100.0 * peak * 1e12 * gpus), f"MFU, {FORMULA_NAMES[formula]}"


def uncertainty_pct(case: PublishedRun) -> float:
    """How far the published step time itself may be off (rounding of the printed figure, formula), %."""
    return case.step_time.uncertainty_pct if case.step_time is not None else float("nan")

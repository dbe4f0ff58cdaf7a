"""The reference model against independent oracles: parameter counts, attention, RoPE, MoE routing, smoke."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from executor.init import materialize
from executor.layers import apply_rope, rope_tables
from executor.model import CoreAttention, Transformer
from executor.model_args import check_model, from_spec
from executor.moe import MoE
from planner.errors import UserError
from planner.layout import Layout, Workload, rules
from planner.model import ModelSpec, preset
from planner.model.smoke import smoke_seq_len, smoke_spec

GPT = {
    "name": "tiny-gpt", "num_layers": 4, "hidden_size": 64, "num_heads": 8, "num_kv_heads": 8,
    "ffn_hidden_size": 256, "vocab_size": 256, "max_seq_len": 64, "mlp": "gelu", "norm": "layernorm",
    "position": "learned", "tied_embeddings": True, "linear_bias": True,
}


def _meta_model(spec) -> Transformer:
    args = from_spec(spec)
    with torch.device("meta"):
        return Transformer(args, range(args.num_layers), first=True, last=True)


def _count(model: Transformer) -> int:
    """Parameters (tied ones once) plus the MoE router biases, which the planner counts as parameters."""
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())


@pytest.mark.parametrize(
    "spec",
    [
        preset("tiny"),
        preset("tiny-moe"),
        ModelSpec.model_validate(GPT),
        smoke_spec(preset("llama3-70b"), tp=4, cp=2),
        smoke_spec(preset("mixtral-8x7b"), tp=2, cp=1),
        smoke_spec(preset("deepseek-v3"), tp=2, cp=1),
        smoke_spec(preset("gpt3-175b"), tp=8, cp=1),
    ],
    ids=lambda s: s.name,
)
def test_parameter_count_equals_planner_count(spec) -> None:
    """The built model holds exactly the parameters the planner's ModelSpec counts (an independent formula)."""
    assert _count(_meta_model(spec)) == spec.num_params()


def test_smoke_keeps_the_layer_structure_and_divides_by_tp_and_cp() -> None:
    spec = preset("deepseek-v3")
    for tp in (1, 2, 4, 8):
        for cp in (1, 2, 4):
            small = smoke_spec(spec, tp=tp, cp=cp)
            assert small.num_layers == spec.num_layers
            assert [small.is_moe_layer(i) for i in range(61)] == [spec.is_moe_layer(i) for i in range(61)]
            assert small.attention == "mha_gqa" and small.mla is None
            args = from_spec(small)
            check_model(args)
            rules.check(Layout(tp=tp, cp=cp), args, Workload(global_batch=1, seq_len=smoke_seq_len(cp)))
            assert small.num_params() < 10**8


def test_mla_is_refused_outside_smoke() -> None:
    with pytest.raises(UserError, match="attention='mla'.*--smoke"):
        from_spec(preset("deepseek-v3"))


def test_divisibility_errors_name_the_rule_and_the_fix() -> None:
    args = from_spec(preset("tiny"))  # 8 heads, 4 kv heads
    workload = Workload(global_batch=1, seq_len=64)
    with pytest.raises(UserError, match=r"tp=8: num_kv_heads=4 is not divisible by tp \[tp_divides_kv_heads\].*fix: "):
        rules.check(Layout(tp=8), args, workload)
    with pytest.raises(UserError, match=r"cp=3: seq_len=64 is not divisible by 2\*cp=6 \[cp_splits_sequence\]"):
        rules.check(Layout(cp=3), args, workload)
    with pytest.raises(UserError, match="head_dim=3 must be even for RoPE"):
        check_model(replace(args, head_dim=3))


def test_core_attention_is_causal_softmax_attention_with_gqa() -> None:
    """Oracle: explicit scores, -inf above the diagonal, softmax, weighted sum; kv head h//2 for GQA 4->2."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 6, 8, generator=gen)
    k = torch.randn(2, 2, 6, 8, generator=gen)
    v = torch.randn(2, 2, 6, 8, generator=gen)
    got = CoreAttention()(q, k, v)
    want = torch.empty_like(q)
    for h in range(4):
        scores = q[:, h] @ k[:, h // 2].transpose(-1, -2) / math.sqrt(8)
        scores = scores.masked_fill(torch.ones(6, 6).triu(1).bool(), float("-inf"))
        want[:, h] = scores.softmax(-1) @ v[:, h // 2]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_rope_scores_depend_only_on_relative_position() -> None:
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 1, 1, 16, generator=gen), torch.randn(1, 1, 1, 16, generator=gen)

    def score(m: int, n: int) -> float:
        cos, sin = rope_tables(torch.tensor([m, n]), 16, 10000.0)
        qm = apply_rope(q, cos[:1], sin[:1])
        kn = apply_rope(k, cos[1:], sin[1:])
        return (qm * kn).sum().item()

    assert score(7, 3) == pytest.approx(score(104, 100), rel=1e-5)
    assert score(0, 0) == pytest.approx((q * k).sum().item(), rel=1e-6)  # position 0 is the identity
    assert score(7, 3) != pytest.approx(score(7, 5), rel=1e-3)


def test_moe_equals_per_token_mixture_of_experts() -> None:
    """Oracle: for each token, renormalised top-k softmax weights times those experts, plus the shared one."""
    spec = preset("tiny-moe")
    args = from_spec(spec)
    with torch.device("meta"):
        moe = MoE(args.hidden_size, args.moe, swiglu=True, bias=False)
    materialize(moe, torch.device("cpu"), num_layers=4, seed=3)
    x = torch.randn(2, 5, args.hidden_size, generator=torch.Generator().manual_seed(2))
    got = moe(x)
    want = torch.empty_like(x)
    for b in range(2):
        for t in range(5):
            tok = x[b, t]
            probs = torch.softmax(moe.router(tok), -1)
            top = torch.topk(probs, args.moe.top_k)
            weights = top.values / top.values.sum()
            out = sum(w * moe.experts[str(int(e))](tok) for w, e in zip(weights, top.indices, strict=True))
            want[b, t] = out + moe.shared(tok)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_capacity_drops_assignments_in_gshard_order() -> None:
    """Oracle, written out per sequence: first choices claim places in token order, then second choices;
    an assignment past the capacity adds nothing and the token's other expert keeps its weight."""
    spec = preset("tiny-moe")
    spec = spec.model_copy(update={"moe": spec.moe.model_copy(update={"capacity_factor": 0.5})})
    args = from_spec(spec)
    with torch.device("meta"):
        moe = MoE(args.hidden_size, args.moe, swiglu=True, bias=False)
    materialize(moe, torch.device("cpu"), num_layers=4, seed=3)
    seq = 12
    limit = math.ceil(0.5 * seq * 2 / 4)  # 3 of a sequence's 24 assignments per expert
    x = torch.randn(2, seq, args.hidden_size, generator=torch.Generator().manual_seed(5))
    got = moe(x)
    want = torch.empty_like(x)
    dropped = 0
    for b in range(2):
        probs = torch.softmax(moe.router(x[b]), -1)
        top = torch.topk(probs, 2)
        weights = top.values / top.values.sum(-1, keepdim=True)
        taken = [0] * 4
        keep = torch.zeros(seq, 2, dtype=torch.bool)
        for slot in range(2):
            for t in range(seq):
                e = int(top.indices[t, slot])
                keep[t, slot] = taken[e] < limit
                taken[e] += 1
        dropped += int((~keep).sum())
        for t in range(seq):
            out = sum(weights[t, s] * moe.experts[str(int(top.indices[t, s]))](x[b, t]) for s in range(2) if keep[t, s])
            want[b, t] = out + moe.shared(x[b, t])
    assert dropped >= 2 * (24 - 4 * limit)  # 24 assignments, 12 places: half of them at least are dropped
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_tied_embeddings_stay_tied_after_materialisation() -> None:
    model = _meta_model(ModelSpec.model_validate(GPT))
    materialize(model, torch.device("cpu"), num_layers=4, seed=0)
    assert model.output.weight is model.tok_embeddings.weight


def test_pipeline_chunks_hold_only_their_parts_with_global_names() -> None:
    args = from_spec(preset("tiny"))
    with torch.device("meta"):
        last = Transformer(args, range(2, 4), first=False, last=True)
    names = {n for n, _ in last.named_parameters()}
    assert "tok_embeddings.weight" not in names and "output.weight" in names and "norm.weight" in names
    assert {n.split(".")[1] for n in names if n.startswith("layers.")} == {"2", "3"}

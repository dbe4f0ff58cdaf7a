"""What a rule is: a named predicate over layout-table columns and the numbers (`Facts`) it reads.

A rule holds (`holds`) on every row of a table whose columns it reads (`columns`), given a few numbers of
the model, workload and cluster (`facts`); it says what is wrong with a row that breaks it (`says`), how to
fix it and why it exists. The same predicate runs on numpy columns (the search's tables) and on one row (a
plan). The rule set is `planner.layout.rules`; this module holds only the types, so the generic rules and
the framework rules (`planner.layout.framework_rules`) can both be written with them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.model import ModelSpec

Columns = Mapping[str, Any]  # column name -> numpy array (or a scalar on one-row checks)

TRAITS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "gelu_mlp": ("a GELU MLP", lambda m: m.mlp != "swiglu"),
    "layernorm": ("LayerNorm", lambda m: m.norm != "rmsnorm"),
    "learned_positions": ("learned positions", lambda m: m.position != "rope"),
    "linear_biases": ("linear biases", lambda m: bool(m.linear_bias or m.qkv_bias)),
    "tied_head": ("a tied LM head", lambda m: bool(m.tied_embeddings)),
    "mla": ("MLA attention", lambda m: m.attention != "mha_gqa"),
    "shared_experts": ("shared experts", lambda m: m.moe is not None and m.moe.num_shared_experts > 0),
    "dense_layers_between_moe": ("dense layers between MoE layers", lambda m: m.moe is not None and not all(
        m.is_moe_layer(i) for i in range(m.num_layers))),
}
"""Architecture traits a framework's model code may lack: name -> (how a message says it, test on a ModelSpec).
Every one departs from the Llama 3 block (RMSNorm, SwiGLU, RoPE, no biases, untied head, GQA)."""


def traits_of(model: Any) -> frozenset[str] | None:
    """The `TRAITS` a model spec has (None for an object that is not a full spec, e.g. executor ModelArgs)."""
    try:
        return frozenset(name for name, (_, test) in TRAITS.items() if test(model))
    except AttributeError:
        return None


@dataclass(frozen=True)
class Facts:
    """The model, workload and cluster numbers rules read; None = unknown (rules that need it are skipped)."""

    num_heads: int | None = None
    num_kv_heads: int | None = None
    ffn_hidden_size: int | None = None
    expert_ffn_hidden_size: int | None = None  # 0 for dense models
    num_experts: int | None = None  # 1 for dense models
    num_layers: int | None = None
    max_seq_len: int | None = None
    traits: frozenset[str] | None = None  # TRAITS of the model
    model_name: str = "the model"  # for messages
    seq_len: int | None = None
    global_batch: int | None = None
    dtype: str | None = None  # Workload.dtype
    runtime: str | None = None  # Workload.runtime
    overlap_pp_comm: bool | None = None  # Workload.overlap_pp_comm
    grad_reduce_dtype: str | None = None  # Workload.grad_reduce_dtype
    master_weights: str | None = None  # Workload.master_weights
    optimizer_state_dtype: str | None = None  # Workload.optimizer_state_dtype
    num_gpus: int | None = None

    @classmethod
    def of(cls, model: ModelSpec | Any = None, workload: Any = None, num_gpus: int | None = None) -> Facts:
        """Facts of a model spec (or anything with its field names), a `Workload` and a GPU count."""
        out: dict[str, Any] = {"num_gpus": num_gpus}
        if model is not None:
            moe = getattr(model, "moe", None)
            out.update(num_heads=model.num_heads, num_kv_heads=model.num_kv_heads, ffn_hidden_size=model.ffn_hidden_size,
                       expert_ffn_hidden_size=moe.expert_ffn_hidden_size if moe else 0,
                       num_experts=moe.num_experts if moe else 1, num_layers=model.num_layers,
                       max_seq_len=model.max_seq_len, traits=traits_of(model),
                       model_name=getattr(model, "name", None) or "the model")
        if workload is not None:
            out.update(seq_len=workload.seq_len, global_batch=workload.batch, dtype=workload.dtype,
                       runtime=getattr(workload, "runtime", None),
                       overlap_pp_comm=getattr(workload, "overlap_pp_comm", None),
                       grad_reduce_dtype=getattr(workload, "grad_reduce_dtype", None),
                       master_weights=getattr(workload, "master_weights", None),
                       optimizer_state_dtype=getattr(workload, "optimizer_state_dtype", None))
        return cls(**out)


@dataclass(frozen=True)
class Rule:
    """One condition on a layout, evaluated over table columns (numpy) or one row alike."""

    name: str
    """Stable identifier, quoted in refusals and tests: generic rules in snake_case, a framework's rules as
    `<framework>.<what>`."""
    columns: tuple[str, ...]  # table columns it reads
    facts: tuple[str, ...]  # Facts fields it reads
    holds: Callable[[Columns, Facts], Any]  # True where the layout satisfies the rule
    says: Callable[[Mapping[str, int], Facts], str]  # the violation, with its numbers
    fix: str  # may name Facts fields in braces: "use --seq-len <= {max_seq_len}"
    why: str
    frameworks: frozenset[str] | None = None  # None: every framework

    def fix_for(self, facts: Facts) -> str:
        return self.fix.format(**{k: getattr(facts, k) for k in facts.__dataclass_fields__})

    def applies(self, columns: Iterable[str], facts: Facts) -> bool:
        """Whether the rule can be evaluated on these columns and facts (which rules a framework selects:
        `planner.layout.rules.rules_for`)."""
        have = columns if isinstance(columns, (set, frozenset)) else set(columns)
        return have.issuperset(self.columns) and all(getattr(facts, f) is not None for f in self.facts)


__all__ = ["TRAITS", "Columns", "Facts", "Rule", "traits_of"]

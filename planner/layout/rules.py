"""The one rule set: every condition a layout must meet, each written once, by name, with its reason and fix.

A rule (`planner.layout.rule.Rule`) is a named predicate over layout-table columns (`planner.layout.table`)
and a few numbers of the model, workload and cluster (`Facts`). The same predicate serves every caller:

- `check(layout, model, workload, gpus)` evaluates it on a one-row table and raises one `UserError` naming
  every violated rule with its numbers and the fix ("tp=3: num_heads=32 is not divisible by tp ...");
  `violations` lists them (exports and `explain` re-check a plan against a framework this way);
- `mask(table, facts)` evaluates it on whole columns: the search's choice generators (`planner.layout.choices`)
  apply each rule as soon as the columns it reads are known, and a `Tally` records which rule removed which
  candidates, so an empty search can say why;
- `Layout` itself runs the rules that read no model numbers when it is built.

Frameworks: the generic rules below apply to every framework; a framework's own rules
(`planner.layout.framework_rules`, named `<framework>.<what>`) apply to it alone. `rules_for(framework)`
selects them: the default, "meshplan", is the built-in executor (`meshplan run`); "any" selects the generic
rules only (the cost model's whole space, for what-if studies).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.errors import UserError
from planner.layout.framework_rules import FRAMEWORK_RULES
from planner.layout.names import (
    ANY_FRAMEWORK,
    DEFAULT_FRAMEWORK,
    FRAMEWORK_NAMES,
    RECOMPUTE_EVERY,
    RECOMPUTE_NAMES,
)
from planner.layout.rule import Columns, Facts, Rule
from planner.layout.schedules import BY_CODE, SCHEDULES
from planner.layout.table import FIELD_OF_COLUMN, RECOMPUTE_EVERY_K, layout_to_row

if TYPE_CHECKING:
    from planner.layout.layout import Layout

FRAMEWORKS: tuple[str, ...] = (*FRAMEWORK_NAMES, ANY_FRAMEWORK)
"""Every framework a rule set is selected for; "any" selects the generic rules only."""

def _sched(code: int):
    return BY_CODE[int(code)]


def _flag(sched: Any, name: str) -> np.ndarray:
    """Per row, the registry flag `name` of the row's schedule (`PipelineSchedule` field): False for a code
    no schedule has. Looked up in a per-flag table indexed by code (np.isin's sorting per call cost more
    than the rule it served)."""
    codes = np.asarray(sched)
    by_code = _FLAG_BY_CODE.get(name)
    if by_code is None:
        by_code = _FLAG_BY_CODE[name] = np.zeros(max(int(s.code) for s in SCHEDULES.values()) + 1, dtype=bool)
        by_code[[int(s.code) for s in SCHEDULES.values() if getattr(s, name)]] = True
    if codes.size and codes.dtype.kind in "iu" and codes.min() >= 0 and codes.max() < len(by_code):
        return by_code[codes]
    return np.isin(codes, np.nonzero(by_code)[0])


_FLAG_BY_CODE: dict[str, np.ndarray] = {}
"""Per registry flag, whether each schedule code has it (`_flag`; filled on first use)."""


def _needs_v(sched: Any) -> np.ndarray:
    return _flag(sched, "virtual_stages")


def _every(rc: Any) -> np.ndarray:
    return RECOMPUTE_EVERY_K[np.asarray(rc)]


GENERIC_RULES: tuple[Rule, ...] = (
    # Degrees and their split (no model numbers: `Layout` checks these when it is built).
    Rule("dp_shard_divides_dp", ("dp", "dp_shard"), (), lambda c, f: c["dp"] % c["dp_shard"] == 0,
         lambda r, f: f"dp_shard={r['dp_shard']} must divide dp={r['dp']}", "choose a dp_shard that divides dp",
         "the ZeRO/FSDP sharding groups tile the data-parallel ranks"),
    Rule("unsharded_without_zero", ("zero", "dp_shard"), (), lambda c, f: (c["zero"] > 0) | (c["dp_shard"] == 1),
         lambda r, f: f"dp_shard={r['dp_shard']} needs zero >= 1 (ZeRO-0 replicates)", "set dp_shard=1 or zero >= 1",
         "ZeRO-0 keeps a full replica on every data-parallel rank"),
    Rule("sequence_parallel_needs_tp", ("sp", "tp"), (), lambda c, f: (c["sp"] == 0) | (c["tp"] > 1),
         lambda r, f: "sequence_parallel=True needs tp > 1", "turn sequence parallelism off or use tp > 1",
         "Megatron sequence parallelism splits the sequence over the TP group (Korthikanti et al. 2022)"),
    Rule("ep_divides_dp_cp", ("ep", "dp", "cp"), (), lambda c, f: (c["dp"] * c["cp"]) % c["ep"] == 0,
         lambda r, f: f"ep={r['ep']} must divide dp*cp={r['dp'] * r['cp']}", "choose an ep that divides dp*cp",
         "expert-parallel groups are formed inside the DP x CP ranks"),
    Rule("virtual_stages_need_pipeline", ("v", "pp"), (), lambda c, f: (c["v"] == 1) | (c["pp"] > 1),
         lambda r, f: f"virtual_stages={r['v']} needs pp > 1", "use virtual_stages=1 without pipelining",
         "virtual stages are model chunks of a pipeline rank"),
    Rule("virtual_stages_need_interleaving", ("v", "sched"), (), lambda c, f: (c["v"] == 1) | _needs_v(c["sched"]),
         lambda r, f: f"virtual_stages={r['v']} needs an interleaved schedule (got {_sched(r['sched']).name!r})",
         "use schedule=interleaved or virtual_stages=1", "only interleaved schedules run several chunks per rank"),
    Rule("interleaving_needs_virtual_stages", ("v", "sched", "pp"), (),
         lambda c, f: (c["pp"] == 1) | ~_needs_v(c["sched"]) | (c["v"] >= 2),
         lambda r, f: f"schedule={_sched(r['sched']).name!r} needs virtual_stages >= 2",
         "use virtual_stages >= 2 or another schedule", "interleaving needs at least two chunks per rank"),
    Rule("microbatches_per_pipeline_rank", ("m", "pp", "sched"), (),
         lambda c, f: (c["pp"] == 1) | ~_flag(c["sched"], "needs_microbatches_per_rank") | (c["m"] >= c["pp"]),
         lambda r, f: f"num_microbatches={r['m']} < pp={r['pp']}: schedule {_sched(r['sched']).name!r} needs at "
         "least as many micro-batches as pipeline ranks", "use more micro-batches or the gpipe schedule",
         "1F1B-style schedules have a steady phase of one micro-batch per rank (Narayanan et al. 2021)"),
    Rule("microbatches_multiple_of_pp", ("m", "pp", "sched"), (),
         lambda c, f: (c["pp"] == 1) | ~_flag(c["sched"], "microbatches_multiple_of_pp") | (c["m"] % c["pp"] == 0),
         lambda r, f: f"schedule {_sched(r['sched']).name!r} needs num_microbatches={r['m']} divisible by "
         f"pp={r['pp']}", "use a multiple of pp micro-batches", "Megatron's interleaving runs micro-batches in groups of pp"),
    # Against the model, the workload and the cluster.
    Rule("fits_cluster", ("dp", "tp", "pp", "cp"), ("num_gpus",),
         lambda c, f: c["dp"] * c["tp"] * c["pp"] * c["cp"] <= f.num_gpus,
         lambda r, f: f"dp*tp*pp*cp={r['dp'] * r['tp'] * r['pp'] * r['cp']} exceeds the cluster's {f.num_gpus} GPUs",
         "use fewer ranks or more GPUs (--nodes/--gpus)", "one rank per GPU"),
    Rule("tp_divides_heads", ("tp",), ("num_heads",), lambda c, f: f.num_heads % c["tp"] == 0,
         lambda r, f: f"tp={r['tp']}: num_heads={f.num_heads} is not divisible by tp", "choose a tp that divides the heads",
         "TP splits the attention heads (Megatron column split)"),
    Rule("tp_divides_kv_heads", ("tp",), ("num_kv_heads",), lambda c, f: f.num_kv_heads % c["tp"] == 0,
         lambda r, f: f"tp={r['tp']}: num_kv_heads={f.num_kv_heads} is not divisible by tp",
         "choose a tp that divides the KV heads", "TP splits the KV heads too (meshplan run, Megatron-LM and "
         "TorchTitan need num_kv_heads % tp == 0; none replicates KV heads)"),
    Rule("tp_divides_ffn", ("tp",), ("ffn_hidden_size",), lambda c, f: f.ffn_hidden_size % c["tp"] == 0,
         lambda r, f: f"tp={r['tp']}: ffn_hidden_size={f.ffn_hidden_size} is not divisible by tp",
         "choose a tp that divides the MLP width", "TP splits the MLP width (Megatron column split)"),
    Rule("tp_divides_expert_ffn", ("tp",), ("expert_ffn_hidden_size",),
         lambda c, f: f.expert_ffn_hidden_size % c["tp"] == 0,
         lambda r, f: f"tp={r['tp']}: expert_ffn_hidden_size={f.expert_ffn_hidden_size} is not divisible by tp",
         "choose a tp that divides the expert MLP width", "TP splits every expert's MLP like a dense one"),
    Rule("cp_splits_sequence", ("cp",), ("seq_len",), lambda c, f: (c["cp"] == 1) | (f.seq_len % (2 * c["cp"]) == 0),
         lambda r, f: f"cp={r['cp']}: seq_len={f.seq_len} is not divisible by 2*cp={2 * r['cp']}",
         "choose a cp with seq_len divisible by 2*cp", "load-balanced CP chunks, Llama 3 paper Sec. 3.3.2"),
    Rule("pp_at_most_layers", ("pp",), ("num_layers",), lambda c, f: c["pp"] <= f.num_layers,
         lambda r, f: f"pp={r['pp']} exceeds num_layers={f.num_layers}", "use at most one pipeline rank per layer",
         "every pipeline rank holds at least one layer"),
    Rule("chunks_at_most_layers", ("pp", "v"), ("num_layers",),
         lambda c, f: (c["v"] == 1) | (c["pp"] * c["v"] <= f.num_layers + 2),
         lambda r, f: f"pp*virtual_stages={r['pp'] * r['v']} exceeds num_layers+2={f.num_layers + 2}",
         "use fewer virtual stages",
         "every model chunk holds at least one layer, except that the first may hold only the embedding and the "
         "last only the LM head (Qi et al. 2024's Megatron-LM fork pads num_layers, --allow-padding-num-layers, "
         "and runs interleaving with one layer per virtual stage)"),
    Rule("ep_divides_experts", ("ep",), ("num_experts",), lambda c, f: f.num_experts % c["ep"] == 0,
         lambda r, f: f"ep={r['ep']}: num_experts={f.num_experts} is not divisible by ep"
         + (" (a dense model: no experts to shard)" if f.num_experts == 1 else ""),
         "choose an ep that divides the experts", "each expert-parallel rank holds the same number of experts"),
    Rule("batch_matches", ("dp", "mb", "m"), ("global_batch",),
         lambda c, f: c["dp"] * c["mb"] * c["m"] == f.global_batch,
         lambda r, f: (f"dp*micro_batch={r['dp']}*{r['mb']}={r['dp'] * r['mb']} does not divide the global batch "
                       f"{f.global_batch}" if r["m"] == 0 else
                       f"dp*micro_batch*num_microbatches={r['dp']}*{r['mb']}*{r['m']}={r['dp'] * r['mb'] * r['m']} "
                       f"!= global batch {f.global_batch}"),
         "choose dp, micro_batch and num_microbatches whose product is the global batch",
         "every sequence of the step is trained exactly once"),
    # Partial recomputation (every k-th layer) is costed as 1/k of each rank's layers, each a mean layer.
    Rule("partial_recompute_even_chunks", ("rc", "pp", "v"), ("num_layers",),
         lambda c, f: (_every(c["rc"]) == 0) | (c["pp"] == 1)
         | (f.num_layers % (c["pp"] * c["v"] * np.maximum(_every(c["rc"]), 1)) == 0),
         lambda r, f: f"recompute={RECOMPUTE_NAMES[r['rc']]} with pp={r['pp']} x virtual_stages={r['v']}: "
         f"num_layers={f.num_layers} is not divisible by pp*virtual_stages*k="
         f"{r['pp'] * r['v'] * RECOMPUTE_EVERY_K[r['rc']]}",
         "choose pp and virtual stages whose even chunks hold a multiple of k layers each, or recompute full or none",
         "with pipeline parallelism an every-k policy recomputes 1/k of each model chunk's layers, as costed, when "
         "the chunks are even and each holds a multiple of k layers (Megatron's --recompute-method block recomputes "
         "the same number of layers in every chunk)"),
    Rule("partial_recompute_divides_layers", ("rc",), ("num_layers",),
         lambda c, f: (_every(c["rc"]) == 0) | (f.num_layers % np.maximum(_every(c["rc"]), 1) == 0),
         lambda r, f: f"recompute={RECOMPUTE_NAMES[r['rc']]}: num_layers={f.num_layers} is not divisible by "
         f"{RECOMPUTE_EVERY_K[r['rc']]}", "choose an every-k policy whose k divides the layers, or full",
         "so that exactly 1/k of the layers are recomputed, as costed"),
    Rule("partial_recompute_one_layer_type", ("rc",), ("traits",),
         lambda c, f: (_every(c["rc"]) == 0) | ("dense_layers_between_moe" not in f.traits),
         lambda r, f: f"recompute={RECOMPUTE_NAMES[r['rc']]} with dense layers between the MoE layers of "
         f"{f.model_name}", "use recompute full or none for this model",
         "every k-th layer must be a like share of each layer type for 1/k of the mean layer to be what it recomputes"),
    Rule("seq_len_fits_model", (), ("seq_len", "max_seq_len"), lambda c, f: f.seq_len <= f.max_seq_len,
         lambda r, f: f"seq_len={f.seq_len} exceeds the model's max_seq_len={f.max_seq_len}",
         "use --seq-len <= {max_seq_len}", "the model has no positions beyond its context"),
)
"""The rules every framework's layouts meet."""

RULES: tuple[Rule, ...] = GENERIC_RULES + FRAMEWORK_RULES
"""Every rule, by name (see `rule`)."""


def rule(name: str) -> Rule:
    """The rule called `name`."""
    for r in RULES:
        if r.name == name:
            return r
    raise KeyError(f"no rule {name!r}; known: {', '.join(r.name for r in RULES)}")


def rules_for(framework: str) -> tuple[Rule, ...]:
    """The rules a framework's layouts must meet: the generic ones, plus those naming the framework."""
    if framework not in FRAMEWORKS:
        raise UserError(f"unknown framework {framework!r}", where="framework", fix=f"use one of {', '.join(FRAMEWORKS)}")
    return _RULES_OF[framework]


_RULES_OF: dict[str, tuple[Rule, ...]] = {
    name: tuple(r for r in RULES if r.frameworks is None or name in r.frameworks) for name in FRAMEWORKS}
"""`rules_for`'s answer per framework, selected once (the search asks ~30 times per search)."""


@dataclass
class Rejection:
    """How many candidates one rule removed, and the first of them in words."""

    count: int
    example: str
    fix: str


@dataclass
class Tally:
    """What the rules removed during a search (`mask(..., tally=)`): per rule, and the stages they emptied."""

    by_rule: dict[str, Rejection] = field(default_factory=dict)
    emptied: list[tuple[str, dict[str, Rejection]]] = field(default_factory=list)
    """(stage, rejections) of every `mask` call whose rules removed all of its candidates, in call order."""

    def record(self, stage: str, found: dict[str, Rejection], survivors: int) -> None:
        for name, x in found.items():
            if name in self.by_rule:
                self.by_rule[name].count += x.count
            else:
                self.by_rule[name] = Rejection(x.count, x.example, x.fix)
        if found and not survivors:
            self.emptied.append((stage, found))

    def reason(self, pinned: Iterable[str] = ()) -> str | None:
        """Why nothing was left, from the first stage the rules emptied: 'the pinned tp breaks a rule: tp=3:
        num_heads=32 is not divisible by tp [tp_divides_heads, ...; fix: ...]'; None when no stage was emptied.

        `pinned`: the table columns the user pinned. Where rules reading a pinned column emptied the stage,
        only those are named: the pin is the cause, not the unpinned candidates the search also tried."""
        if not self.emptied:
            return None
        stage, found = self.emptied[0]
        pinned = set(pinned)
        on_pins = {name: x for name, x in found.items() if pinned & set(rule(name).columns)}
        items = sorted((on_pins or found).items(), key=lambda kv: -kv[1].count)
        what = "; ".join(f"{x.example} [{name}, {_plural(x.count)}; fix: {x.fix}]" for name, x in items)
        if on_pins:
            knobs = sorted({c for name in on_pins for c in rule(name).columns if c in pinned})
            names = ", ".join(FIELD_OF_COLUMN.get(c, c) for c in knobs)
            return f"the pinned {names} break{'s' if len(knobs) == 1 else ''} a rule: {what}"
        return f"every {stage} candidate breaks a rule: {what}"


def _plural(n: int) -> str:
    return f"{n} candidate" + ("s" if n != 1 else "")


def mask(table: Columns, facts: Facts, framework: str = DEFAULT_FRAMEWORK, *, tally: Tally | None = None,
         stage: str = "layout", rules: Iterable[Rule] | None = None) -> np.ndarray:
    """Rows of `table` that meet every rule evaluable on its columns and `facts` (all rules of `framework`, or
    the given ones). With `tally`, each removed row is booked to the first rule it breaks, under `stage`."""
    n = len(next(iter(table.values()))) if table else 1
    ok = np.ones(n, dtype=bool)
    found: dict[str, Rejection] = {}
    columns = set(table)
    for r in rules_for(framework) if rules is None else rules:
        if not r.applies(columns, facts):
            continue
        good = np.asarray(r.holds(table, facts), dtype=bool)
        if good.shape != (n,):  # a rule on facts or constant columns alone gives one value
            good = np.broadcast_to(good, (n,))
        bad = ok & ~good
        if tally is not None and bad.any():
            i = int(np.argmax(bad))
            row = {k: int(np.asarray(v).reshape(-1)[i]) for k, v in table.items()}
            found[r.name] = Rejection(int(np.count_nonzero(bad)), r.says(row, facts), r.fix_for(facts))
        ok &= good
    if tally is not None:
        tally.record(stage, found, int(np.count_nonzero(ok)))
    return ok


Violation = tuple[Rule, str]
"""A rule one layout breaks, and what is wrong in its numbers."""


def broken(row: Mapping[str, int], facts: Facts, rules: Iterable[Rule]) -> list[Violation]:
    """The given rules that one row of table columns (plain ints; any subset of the columns) breaks."""
    table = {k: np.array([v], dtype=np.int64) for k, v in row.items()}
    return [(r, r.says(row, facts)) for r in rules if r.applies(row.keys(), facts) and not mask(table, facts, rules=(r,))[0]]


def violations(layout: Layout, facts: Facts, framework: str = DEFAULT_FRAMEWORK, *,
               rules: Iterable[Rule] | None = None) -> list[Violation]:
    """Every rule of `framework` (or every given rule) `layout` breaks under `facts`, with what is wrong."""
    row = {k: int(v[0]) for k, v in layout_to_row(layout).items()}
    out = broken(row, facts, rules_for(framework) if rules is None else rules)
    lp = layout.layer_partition
    if rules is None and facts.num_layers is not None and lp is not None and sum(lp) != facts.num_layers:
        out.append((PARTITION_RULE, f"layer_partition sums to {sum(lp)}, the model has {facts.num_layers} layers"))
    if rules is None and lp is not None and layout.pp > 1 and layout.recompute in RECOMPUTE_EVERY and len(set(lp)) > 1:
        out.append((EVEN_PARTITION_RULE, f"recompute={layout.recompute} with pp={layout.pp} needs the same layers in "
                                         f"every chunk; layer_partition={list(lp)} is uneven"))
    return out


PARTITION_RULE = Rule("partition_covers_layers", (), ("num_layers",), lambda c, f: True, lambda r, f: "",
                      "give one entry per chunk summing to num_layers", "every layer runs in exactly one chunk")
"""The layer partition (not a table column) covers every layer once: checked by `violations` on a `Layout`."""
EVEN_PARTITION_RULE = Rule("partial_recompute_even_partition", (), (), lambda c, f: True, lambda r, f: "",
                           "give every chunk the same number of layers, or recompute full or none",
                           "an every-k policy with pipelining is costed for even chunks (partial_recompute_even_chunks)")
"""An explicit layer partition under an every-k policy with pipelining is even: checked by `violations`."""


def described(found: list[Violation]) -> str:
    """'what is wrong [rule]; ...': how every refusal names the rules a layout breaks."""
    return "; ".join(f"{text} [{r.name}]" for r, text in found)


def fixes(found: list[Violation], facts: Facts) -> str:
    return "; ".join(dict.fromkeys(r.fix_for(facts) for r, _ in found))


def check_inputs(model: Any, workload: Any, gpus: int | None = None, *, framework: str = DEFAULT_FRAMEWORK) -> None:
    """Raise one `UserError` for the rules of `framework` that read no layout (the workload and the model)."""
    facts = Facts.of(model, workload, gpus)
    found = broken({}, facts, rules_for(framework))
    if found:
        where = f"--framework {framework}" if any(r.frameworks for r, _ in found) else None
        raise UserError(described(found), where=where, fix=fixes(found, facts))


def check(layout: Layout, model: Any = None, workload: Any = None, gpus: int | None = None, *,
          framework: str = DEFAULT_FRAMEWORK) -> None:
    """Raise one `UserError` naming every rule of `framework` `layout` breaks for this model, workload and GPU count."""
    facts = Facts.of(model, workload, gpus)
    found = violations(layout, facts, framework)
    if found:
        raise UserError("invalid layout: " + described(found), fix=fixes(found, facts))

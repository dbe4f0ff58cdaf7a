"""Shared command-line options: model / cluster / workload inputs and layout pins, parsed into objects.

`plan`, `evaluate` and `compare` take the same inputs and pins. Rather than repeating ~25 typer parameters
in each command, `use_options(INPUTS, PINS)` appends them to the command's signature and hands the command
two dicts (`inputs`, `pins`); `resolve_inputs` and `layout_from_pins` turn those into planner objects. The
built-in example (llama3-70b on 8 x DGX H100) lives here; workload defaults adapt to the model
(`Workload.for_model`: 512 sequences of 8192 tokens for it, the same numbers as the API and `meshplan run`).

Every failure is a `UserError` naming the flag, the bad value and the fix.
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from planner.errors import UserError
from planner.layout.names import (
    ATTENTION_KERNELS,
    DEFAULT_GLOBAL_BATCH_SEQS,
    DEFAULT_MESH_AXES,
    DEFAULT_SEQ_LEN,
    FRAMEWORK_NAMES,
    GRAD_REDUCE_DTYPES,
    MASTER_WEIGHTS,
    OPTIMIZER_STATE_DTYPES,
    RECOMPUTE_MEANINGS,
    RECOMPUTE_NAMES,
    RUNTIME_NAMES,
)
from planner.layout.schedules import SCHEDULE_NAMES, SCHEDULES

if TYPE_CHECKING:
    from planner.layout import Layout, Workload
    from planner.model import ModelSpec

DEFAULT_MODEL = "llama3-70b"
DEFAULT_CLUSTER = "dgx-h100"
DEFAULT_NODES = 8

FLAG_OF = {
    "dp": "--dp", "tp": "--tp", "pp": "--pp", "cp": "--cp", "ep": "--ep", "micro_batch": "--micro-batch",
    "num_microbatches": "--num-microbatches", "schedule": "--schedule", "virtual_stages": "--virtual-stages",
    "zero": "--zero", "dp_shard": "--dp-shard", "recompute": "--recompute",
    "sequence_parallel": "--sequence-parallel", "mesh_axes": "--mesh-axes", "global_batch": "--global-batch",
    "global_batch_tokens": "--global-batch-tokens", "seq_len": "--seq-len", "layer_partition": "layer_partition",
    "grad_reduce_dtype": "--grad-reduce-dtype", "master_weights": "--master-weights",
    "optimizer_state_dtype": "--optimizer-state-dtype", "attention_kernel": "--attention-kernel",
}


ScheduleChoice = Enum("ScheduleChoice", [(name, name) for name in SCHEDULE_NAMES], type=str)
"""--schedule values: the schedule registry's names (planner.layout.schedules)."""


RuntimeChoice = Enum("RuntimeChoice", [(name.replace("-", "_"), name) for name in RUNTIME_NAMES], type=str)
"""--runtime values: the names of `Workload.runtime` (planner.layout.names.RUNTIME_NAMES)."""


GradReduceChoice = Enum("GradReduceChoice", [(name, name) for name in GRAD_REDUCE_DTYPES], type=str)
"""--grad-reduce-dtype values: those of `Workload.grad_reduce_dtype`."""
MasterWeightsChoice = Enum("MasterWeightsChoice", [(name, name) for name in MASTER_WEIGHTS], type=str)
"""--master-weights values: those of `Workload.master_weights`."""
AttentionKernelChoice = Enum("AttentionKernelChoice", [(name, name) for name in ATTENTION_KERNELS], type=str)
"""--attention-kernel values: those of `Workload.attention_kernel`."""
OptimizerStateChoice = Enum("OptimizerStateChoice", [(name, name) for name in OPTIMIZER_STATE_DTYPES], type=str)
"""--optimizer-state-dtype values: those of `Workload.optimizer_state_dtype`."""


class ObjectiveChoice(str, Enum):
    expected = "expected"
    pessimistic = "pessimistic"


RecomputeChoice = Enum("RecomputeChoice", [(name, name) for name in RECOMPUTE_NAMES], type=str)
"""--recompute values (planner.layout.table.RecomputeCode)."""
FrameworkChoice = Enum("FrameworkChoice", [(name, name) for name in FRAMEWORK_NAMES], type=str)
"""--framework values: the frameworks a user plans for (planner.layout.names.FRAMEWORK_NAMES)."""
FRAMEWORK_HELP = ("Training framework to plan for: meshplan (meshplan run), torchtitan (0.3.0), megatron (core_v0.19) "
                  "or deepspeed (0.19.8); only layouts it can build, costed with its runtime. (default: meshplan)")


@dataclass(frozen=True)
class OptionGroup:
    """Parameters appended to a command; the command receives them as one dict named `name`."""

    name: str
    params: tuple[inspect.Parameter, ...]


def _opt(name: str, kind: Any, flag: str, help: str, panel: str, default: Any = None, **kw: Any) -> inspect.Parameter:
    """A keyword-only typer option `flag` for parameter `name` (None when not given, unless `default`)."""
    if kind is int:
        kw.setdefault("min", 1)
    option = typer.Option(flag, rich_help_panel=panel, help=help, **kw)
    kind = kind if default is not None else kind | None
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, option])


_IN = "Inputs"
_PIN = "Pins (Layout fields; unpinned knobs are searched)"

INPUTS = OptionGroup("inputs", (
    _opt("model", str, "--model", f"Model preset, HF config.json or model YAML. (default: {DEFAULT_MODEL})", _IN,
         metavar="NAME|PATH"),
    _opt("cluster", str, "--cluster", f"Cluster profile name or YAML file. (default: {DEFAULT_CLUSTER})", _IN,
         metavar="NAME|PATH"),
    _opt("nodes", int, "--nodes",
         f"Hosts. (default: {DEFAULT_NODES} for {DEFAULT_CLUSTER}, else the profile's default_nodes)", _IN),
    _opt("gpus", int, "--gpus", "GPUs in all (instead of --nodes), on as few hosts as possible.", _IN),
    _opt("global_batch", int, "--global-batch", "Sequences per optimizer step.", _IN, metavar="SEQS"),
    _opt("global_batch_tokens", int, "--global-batch-tokens",
         f"Tokens per optimizer step (a multiple of --seq-len). (default unless --global-batch is given: "
         f"{DEFAULT_GLOBAL_BATCH_SEQS} sequences of the model's default length)", _IN, metavar="TOKENS"),
    _opt("seq_len", int, "--seq-len",
         f"Tokens per sequence. (default: {DEFAULT_SEQ_LEN}, or the model's max_seq_len if smaller)", _IN),
    _opt("no_flash_attention", bool, "--no-flash-attention",
         "Cost attention without FlashAttention (scores stored; selective recompute helps).", _IN, default=False),
    _opt("no_dp_overlap", bool, "--no-dp-overlap",
         "The framework reduces gradients after the last backward instead of overlapping DP/FSDP traffic with "
         "compute (e.g. Megatron-LM without --overlap-grad-reduce).", _IN, default=False),
    _opt("runtime", RuntimeChoice, "--runtime",
         "Training stack: pytorch (eager: meshplan run, TorchTitan without compile), pytorch-compile (TorchTitan "
         "with torch.compile) or megatron (Megatron-Core's fused kernels; gradient reduction overlapped under PP "
         "too). (default: the --framework's)", _IN),
    _opt("tp_comm_overlap", bool, "--tp-comm-overlap/--no-tp-comm-overlap",
         "Pipeline TP collectives with their GEMMs (Megatron --tp-comm-overlap, PyTorch async TP); needs a "
         "pytorch-compile or megatron runtime. (default: the --framework's: on for megatron)", _IN,
         show_default=False),
    _opt("grad_reduce_dtype", GradReduceChoice, "--grad-reduce-dtype",
         "Precision of the data-parallel gradient reduction: fp32, or bf16 for half the DP traffic at some loss of "
         "precision across many ranks (FSDP reduce_dtype, Megatron --grad-reduce-in-bf16). (default: fp32)", _IN),
    _opt("master_weights", MasterWeightsChoice, "--master-weights",
         "Master copy of the bf16 weights: fp32 (4 B per parameter), remainders (the 16 low bits, 2 B: Megatron's "
         "precision-aware optimizer, Apex DistributedFusedAdam) or none (bf16 updates: Apex DistributedFusedAdam "
         "with a bf16 optimizer dtype, DeepSpeed's bf16 master weights). (default: fp32)", _IN),
    _opt("optimizer_state_dtype", OptimizerStateChoice, "--optimizer-state-dtype",
         "Precision of Adam's two moments: fp32, or bf16 (Megatron's precision-aware optimizer with bf16 moments, "
         "Apex DistributedFusedAdam dtype bf16, DeepSpeed's bf16 optimizer states). (default: fp32)", _IN),
    _opt("attention_kernel", AttentionKernelChoice, "--attention-kernel",
         "Fused attention kernel: auto (the GPU's fastest: cuDNN attention on Hopper, as PyTorch >= 2.9 SDPA and "
         "Transformer Engine run it; FlashAttention-2 on Ampere), flash2 (FlashAttention-2, about half as fast on "
         "Hopper: older PyTorch SDPA, TorchTitan) or flash1 (FlashAttention-1, half as fast as FlashAttention-2: "
         "Megatron-LM of 2023). (default: the --framework's)", _IN),
    _opt("framework", FrameworkChoice, "--framework", FRAMEWORK_HELP, _IN),
))

PINS = OptionGroup("pins", (
    _opt("dp", int, "--dp", "Data-parallel degree.", _PIN),
    _opt("tp", int, "--tp", "Tensor-parallel degree.", _PIN),
    _opt("pp", int, "--pp", "Pipeline-parallel degree.", _PIN),
    _opt("cp", int, "--cp", "Context-parallel degree.", _PIN),
    _opt("ep", int, "--ep", "Expert-parallel degree.", _PIN),
    _opt("micro_batch", int, "--micro-batch", "Sequences per micro-batch per DP replica.", _PIN),
    _opt("num_microbatches", int, "--num-microbatches", "Micro-batches per step per DP replica.", _PIN),
    _opt("schedule", ScheduleChoice, "--schedule", "Pipeline schedule.", _PIN),
    _opt("virtual_stages", int, "--virtual-stages", "Model chunks per pipeline rank (interleaved).", _PIN),
    _opt("zero", int, "--zero", "ZeRO stage 0-3 (3 = FSDP).", _PIN, min=0, max=3),
    _opt("dp_shard", int, "--dp-shard", "ZeRO/FSDP sharding group size inside DP (< dp: HSDP).", _PIN),
    _opt("recompute", RecomputeChoice, "--recompute", "Activation recomputation: "
         + "; ".join(f"{k}: {v}" for k, v in RECOMPUTE_MEANINGS.items()) + ".", _PIN),
    _opt("sequence_parallel", bool, "--sequence-parallel/--no-sequence-parallel",
         "Megatron sequence parallelism (needs tp > 1).", _PIN, show_default=False),
    _opt("mesh_axes", str, "--mesh-axes", "Mesh axis order, outermost first, e.g. pp,dp_replicate,dp_shard,cp,tp.",
         _PIN, metavar="AXES"),
    _opt("max_tp", int, "--max-tp", "Largest TP searched. (default: 2 x NVLink domain)", _PIN),
    _opt("max_cp", int, "--max-cp", "Largest CP searched. (default: 16)", _PIN),
    _opt("max_micro_batch", int, "--max-micro-batch", "Largest micro-batch searched. (default: 64)", _PIN),
    _opt("objective", ObjectiveChoice, "--objective",
         "Rank by the predicted step time (expected) or by the upper end of its error band (pessimistic: the step "
         "time the validated runs most like the plan say it may reach). (default: expected)", _PIN),
))


def use_options(*groups: OptionGroup):
    """Append the groups' options to a typer command; the command gets one dict per group.

    typer reads parameters from `inspect.signature` and their types from `__annotations__`, so the wrapper
    publishes both; the options are keyword-only so they can follow the command's own arguments.
    """

    def decorate(func):
        sig = inspect.signature(func)
        hints = typing.get_type_hints(func, include_extras=True)
        names = {g.name for g in groups}
        own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
               if p.name not in names]
        extra = [p for g in groups for p in g.params]

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            for g in groups:
                kwargs[g.name] = {p.name: kwargs.pop(p.name) for p in g.params}
            return func(**kwargs)

        del command.__wrapped__  # typer must see the new signature, not the wrapped one
        params = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        params += [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
        params += extra
        command.__signature__ = sig.replace(parameters=params, return_annotation=None)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


# Inputs -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Inputs:
    """The resolved inputs of one planning request."""

    model: ModelSpec
    cluster: Any  # hardware_profiles.Cluster
    workload: Workload
    flash_attention: bool = True
    framework: str = "meshplan"

    @property
    def options(self) -> dict[str, Any]:
        """Cost-model options for `planner.api` (only those that differ from the defaults)."""
        options: dict[str, Any] = {} if self.flash_attention else {"flash_attention": False}
        if self.framework != "meshplan":
            options["framework"] = self.framework
        return options


def given(raw: dict[str, Any]) -> bool:
    """True when any input option was given on the command line."""
    return any(v not in (None, False) for v in raw.values())


def resolve_inputs(raw: dict[str, Any]) -> Inputs:
    """Model, cluster and workload from the input options (built-in defaults for those not given)."""
    from pydantic import ValidationError

    import hardware_profiles
    from planner.layout import Workload
    from planner.model import load_model

    model = load_model(raw.get("model") or DEFAULT_MODEL)
    name = raw.get("cluster") or DEFAULT_CLUSTER
    nodes, gpus = raw.get("nodes"), raw.get("gpus")
    if nodes is not None and gpus is not None:
        raise UserError("give --nodes or --gpus, not both", fix="drop one of them")
    if nodes is None and gpus is None and name == DEFAULT_CLUSTER:
        nodes = DEFAULT_NODES
    try:
        cluster = cli_cluster(name, nodes=nodes, gpus=gpus)
    except hardware_profiles.ProfileError as exc:
        raise UserError(f"--cluster {name}: {exc}") from None
    try:
        # Runtime costs given explicitly win over the framework's own (planner.frameworks.workload_for), so they
        # are passed only when given (None = not given).
        runtime = getattr(raw.get("runtime"), "value", raw.get("runtime"))
        framework = getattr(raw.get("framework"), "value", raw.get("framework")) or "meshplan"
        overlap_tp = raw.get("tp_comm_overlap")
        if overlap_tp:
            _check_tp_overlap_runtime(runtime, framework)
        workload = Workload.for_model(model, global_batch=raw.get("global_batch"),
                                      global_batch_tokens=raw.get("global_batch_tokens"), seq_len=raw.get("seq_len"),
                                      overlap_dp_comm=False if raw.get("no_dp_overlap") else None,
                                      runtime=runtime if runtime or not overlap_tp else _framework_runtime(framework),
                                      tp_comm_overlap=overlap_tp,
                                      grad_reduce_dtype=getattr(raw.get("grad_reduce_dtype"), "value", None),
                                      master_weights=getattr(raw.get("master_weights"), "value", None),
                                      optimizer_state_dtype=getattr(raw.get("optimizer_state_dtype"), "value", None),
                                      attention_kernel=getattr(raw.get("attention_kernel"), "value", None))
    except ValidationError as exc:
        batch = any("batch" in str(e.get("msg", "")) for e in exc.errors())
        raise UserError("; ".join(_flag_message(e) for e in exc.errors()),
                        fix="give --global-batch SEQS, or --global-batch-tokens as a multiple of --seq-len" if batch
                        else None) from None
    return Inputs(model=model, cluster=cluster, workload=workload, flash_attention=not raw.get("no_flash_attention"),
                  framework=framework)


def _framework_runtime(framework: str) -> str:
    from planner.frameworks import framework as profile_of

    return profile_of(framework).runtime


def _check_tp_overlap_runtime(runtime: str | None, framework: str) -> None:
    """--tp-comm-overlap needs a runtime that has it (the --runtime given, else the framework's)."""
    from planner.layout.names import TP_OVERLAP_RUNTIMES

    chosen = runtime or _framework_runtime(framework)
    if chosen not in TP_OVERLAP_RUNTIMES:
        raise UserError(f"TP-communication overlap needs a compiled or Megatron runtime, not {chosen} (PyTorch async "
                        "TP is a torch.compile pass)", where="--tp-comm-overlap",
                        fix="add --runtime pytorch-compile (TorchTitan with compile) or plan with --framework megatron, "
                        "or drop --tp-comm-overlap")


def cli_cluster(name: str, *, nodes: int | None = None, gpus: int | None = None) -> Any:
    """The cluster a CLI name means: a profile name or file, except that `local-cpu` is this machine as
    measured (planner.calibration.local_cache: calibrated once, cached; MESHPLAN_LOCAL_CPU=builtin keeps
    the built-in profile)."""
    import hardware_profiles

    if name == "local-cpu":
        from planner.calibration.local_cache import local_cpu
        from planner.cli.app import err

        return local_cpu(nodes=nodes, gpus=gpus, say=lambda text: err.print(text, markup=False))
    return hardware_profiles.cluster(name, nodes=nodes, gpus=gpus)


def inputs_of_plan(plan: Any) -> Inputs:
    """The inputs embedded in a plan (its cluster re-validated as a hardware_profiles.Cluster)."""
    import hardware_profiles

    cluster = hardware_profiles.Cluster.model_validate(plan.inputs.cluster)
    return Inputs(model=plan.inputs.model, cluster=cluster, workload=plan.inputs.workload, framework=plan.framework)


def _flag_message(err: dict[str, Any]) -> str:
    loc = [str(p) for p in err.get("loc", ())]
    msg = str(err.get("msg", "")).removeprefix("Value error, ")
    if loc:
        return f"{FLAG_OF.get(loc[0], loc[0])}={err.get('input')!r}: {msg}"
    return msg


# Pins and layouts ---------------------------------------------------------------------------------
def parse_mesh_axes(text: str, flag: str = "--mesh-axes") -> tuple[str, ...]:
    """'pp,dp_replicate,dp_shard,cp,tp' (commas, slashes or colons) -> a permutation of the five axes."""
    axes = tuple(a.strip() for a in text.replace("/", ",").replace(":", ",").split(",") if a.strip())
    if sorted(axes) != sorted(DEFAULT_MESH_AXES):
        raise UserError(f"{flag}={text!r} is not an order of the five mesh axes",
                        fix=f"give each of {','.join(DEFAULT_MESH_AXES)} once, outermost first")
    return axes


def collect_pins(raw: dict[str, Any]) -> dict[str, Any]:
    """Pins and search limits given on the command line, as keyword arguments of `planner.api.search`."""
    pins: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if isinstance(value, Enum):
            value = value.value
        if key == "mesh_axes":
            value = parse_mesh_axes(value)
        pins[key] = value
    return pins


LIMIT_NAMES = ("max_tp", "max_cp", "max_micro_batch", "objective")
"""Search options given beside the pins: not layout knobs."""

SHORT_KNOBS = {"micro_batch": "mb", "num_microbatches": "m", "virtual_stages": "v", "sequence_parallel": "sp",
               "recompute": "rc", "mesh_axes": "mesh"}
"""Short --layout names of Layout fields (compare's `searched` column shows knobs by them too)."""
_ALIASES = {**{short: field for field, short in SHORT_KNOBS.items()}, "order": "mesh_axes", "sched": "schedule"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_layout_string(text: str) -> dict[str, Any]:
    """'dp=8,tp=8,pp=2,mb=1,schedule=1f1b,zero=1,recompute=full,sp=1,mesh=pp/dp_replicate/dp_shard/cp/tp'.

    Keys are Layout field names (dashes allowed) or the short aliases mb, m, v, sp, rc, mesh; mesh axes are
    separated by '/' or ':' inside the string (commas separate the fields).
    """
    from planner.solver.space import PIN_FIELDS

    values: dict[str, Any] = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            raise UserError(f"--layout {text!r}: {item!r} is not key=value", fix="write e.g. dp=8,tp=8,pp=2")
        key, value = (s.strip() for s in item.split("=", 1))
        key = _ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
        if key not in PIN_FIELDS:
            raise UserError(f"--layout {text!r}: unknown key {key!r}", fix=f"use {', '.join(PIN_FIELDS)}")
        if key in values:
            raise UserError(f"--layout {text!r}: {key} given twice", fix="give each key once")
        if key == "mesh_axes":
            values[key] = parse_mesh_axes(value, "--layout mesh")
        elif key == "sequence_parallel":
            if value.lower() not in _TRUE | _FALSE:
                raise UserError(f"--layout {text!r}: sp={value!r} is not a boolean", fix="use sp=1 or sp=0")
            values[key] = value.lower() in _TRUE
        elif key in ("schedule", "recompute"):
            values[key] = value
        else:
            try:
                values[key] = int(value)
            except ValueError:
                raise UserError(f"--layout {text!r}: {key}={value!r} is not an integer",
                                fix=f"write e.g. {key}=2") from None
    return values


def layout_from_pins(values: dict[str, Any], inputs: Inputs) -> Layout:
    """A complete Layout from pinned knobs; unpinned knobs take the `Layout` defaults, except those that have
    a single valid value given the others:

    - dp fills the cluster: GPUs / (tp * pp * cp);
    - num_microbatches = global batch / (dp * micro_batch);
    - dp_shard = dp when zero >= 1 (plain ZeRO / FSDP over all of DP; pin --dp-shard for HSDP);
    - virtual_stages = 2 with a schedule that interleaves virtual stages.
    Everything else: micro_batch 1, schedule 1f1b, zero 0, recompute none, no sequence parallelism (pin
    --sequence-parallel: the search always turns it on with tp > 1), the default mesh axis order.
    """
    from pydantic import ValidationError

    from planner.layout import Layout

    v = {k: val for k, val in values.items() if k not in LIMIT_NAMES and val is not None}
    tp, pp, cp = v.get("tp", 1), v.get("pp", 1), v.get("cp", 1)
    n_gpus = int(inputs.cluster.num_gpus)
    if "dp" not in v:
        cell = tp * pp * cp
        if n_gpus % cell:
            raise UserError(f"tp*pp*cp={cell} does not divide the cluster's {n_gpus} GPUs, so dp cannot fill it",
                            fix="pin --dp")
        v["dp"] = n_gpus // cell
    if "num_microbatches" not in v:
        per = v["dp"] * v.get("micro_batch", 1)
        batch = inputs.workload.batch
        if batch % per:
            raise UserError(f"global batch {batch} is not a multiple of dp*micro_batch={per}",
                            fix="change --global-batch, --dp or --micro-batch, or pin --num-microbatches")
        v["num_microbatches"] = batch // per
    if v.get("zero", 0) > 0 and "dp_shard" not in v:
        v["dp_shard"] = v["dp"]
    if v.get("schedule") in SCHEDULES and SCHEDULES[v["schedule"]].virtual_stages and "virtual_stages" not in v:
        v["virtual_stages"] = 2
    try:
        return Layout(**v)
    except ValidationError as exc:
        raise UserError("invalid layout: " + "; ".join(_flag_message(e) for e in exc.errors())) from None


# Errors and output ----------------------------------------------------------------------------------
class user_errors:  # noqa: N801 (used as a context manager: `with user_errors(): ...`)
    """Turn user-side failures into one line on stderr and exit 2 (`UserError`, profile errors, and
    pydantic errors from files the user wrote); anything else propagates to `main()` as a bug."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            return False
        from pydantic import ValidationError

        import hardware_profiles
        from hardware_profiles.reader import InputFileError
        from planner.cli.app import abort
        from planner.errors import format_validation_error

        if isinstance(exc, UserError | hardware_profiles.ProfileError | InputFileError):
            abort(str(exc))
        if isinstance(exc, ValidationError):
            abort(format_validation_error(exc, exc.title))
        return False


def emit_json(text: str, target: str | None, *, force: bool) -> bool:
    """Write the command's one JSON document if asked; True when it went to stdout (then print no tables)."""
    from planner.cli.app import err, write_json_output
    from planner.io import is_stdout

    if target is None:
        return False
    with user_errors():
        write_json_output(text, target, force=force)
    if is_stdout(target):  # '-' or /dev/stdout: the document is the whole output, no tables after it
        return True
    err.print(f"wrote {target}", markup=False)
    return False

"""Every cost term of the runtimes against a value computed by hand from its docstring's counts.

Model used throughout: hidden 1024, 8 query heads and 2 KV heads of 128 (q = 1024, kv = 256), SwiGLU with
f = 4096, RoPE; bf16 on a DGX H100 (HBM 3.35e12 B/s datasheet, 0.866 of it achievable).
"""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles
from planner.api import make_context
from planner.cost import comm, compute, elementwise, fixed_costs, interference, moe_dispatch
from planner.cost.dp_groups import axis_groups
from planner.cost.efficiency import FLASH2_SPEEDUP_OVER_FLASH1
from planner.cost.runtime import KERNEL_LAUNCH_GAP_S, RUNTIME_COSTS, grad_reduce_bytes
from planner.layout import Workload
from planner.layout.names import RUNTIME_NAMES
from planner.model import ModelSpec

MODEL = ModelSpec(name="m", num_layers=4, hidden_size=1024, num_heads=8, num_kv_heads=2, ffn_hidden_size=4096,
                  vocab_size=32000, max_seq_len=4096, mlp="swiglu", norm="rmsnorm", position="rope",
                  tied_embeddings=False)
BW = 3.35e12 * 0.866  # achievable HBM bandwidth: datasheet x memory_bandwidth_efficiency (h100-sxm.yaml)
H, Q, KV, F, V = 1024, 1024, 256, 4096, 32000


def ctx_for(runtime: str, dtype: str = "bf16", cluster: str = "dgx-h100", **workload):
    # framework "any": the runtime's own costs, no framework's rules or runtime settings (terms, not frameworks)
    return make_context(MODEL, hardware_profiles.cluster(cluster, gpus=8),
                        Workload(global_batch=8, seq_len=4096, runtime=runtime, dtype=dtype, **workload), framework="any")


def test_runtime_table_covers_every_workload_runtime() -> None:
    assert set(RUNTIME_COSTS) == set(RUNTIME_NAMES) == {"pytorch", "pytorch-compile", "megatron"}


def test_elementwise_bytes_eager_and_fused() -> None:
    # Eager (executor Block, op by op): forward SwiGLU 5f*2 + RoPE (q + kv)(2*2 + 44); backward 9f*2 + (q+kv)(4 + 68);
    # norms + residual adds 10h*2 forward, 16h*2 backward.
    eager = elementwise.layer_bytes_per_token(ctx_for("pytorch"))
    assert eager.local_fwd == 5 * F * 2 + (Q + KV) * 48
    assert eager.local_bwd == 9 * F * 2 + (Q + KV) * 72
    assert (eager.replicated_fwd, eager.replicated_bwd) == (10 * H * 2, 16 * H * 2)
    # Fused (megatron, compile): SwiGLU 3f, RoPE 2(q + kv) elements, norms + residual 10h; backward twice.
    for runtime in ("megatron", "pytorch-compile"):
        fused = elementwise.layer_bytes_per_token(ctx_for(runtime))
        assert fused.local_fwd == (3 * F + 2 * (Q + KV)) * 2 and fused.local_bwd == 2 * fused.local_fwd
        assert fused.replicated_fwd == 10 * H * 2 and fused.replicated_bwd == 2 * fused.replicated_fwd
    # GQA repeat (eager only): K and V each read kv and write q, 2 bytes each
    assert elementwise.gqa_repeat_bytes_per_token(ctx_for("pytorch")) == 2 * (Q + KV) * 2
    assert elementwise.gqa_repeat_bytes_per_token(ctx_for("megatron")) == 0.0


def test_cpu_runs_keep_the_reference_count() -> None:
    """CPU profiles' measured overhead is a residual over the fused count, so the eager extras stay out."""
    cpu = ctx_for("pytorch", dtype="fp32", cluster="local-cpu")
    lb = elementwise.layer_bytes_per_token(cpu)
    assert lb.local_fwd == (3 * F + 2 * (Q + KV)) * 4
    assert elementwise.cross_entropy_bytes_per_logit(cpu) == (12.0, 24.0)
    assert fixed_costs.layer_launch_s(cpu) == (0.0, 0.0)


def test_layer_time_adds_the_elementwise_passes_and_launches() -> None:
    tokens, one = np.array([4096.0]), np.array([1])
    for runtime in ("pytorch", "megatron"):
        ctx = ctx_for(runtime)
        lt = ctx.layer_types[0]
        t = compute.layer_time_s(ctx, lt, tokens, one, one, one, np.array([False]))
        lb = elementwise.layer_bytes_per_token(ctx)
        gqa = 4096 * elementwise.gqa_repeat_bytes_per_token(ctx) / BW
        lf, lbk = fixed_costs.layer_launch_s(ctx)
        gemm = t.wgrad_s[0]
        ew_f = 4096 * (lb.local_fwd + lb.replicated_fwd) / BW + gqa + lf
        ew_b = 4096 * (lb.local_bwd + lb.replicated_bwd) / BW + gqa + lbk
        assert t.fwd_s[0] == pytest.approx(gemm + t.attn_fwd_s[0] + ew_f, rel=1e-12)
        assert t.bwd_s[0] == pytest.approx(2 * gemm + 2.5 * t.attn_fwd_s[0] + ew_b, rel=1e-12)


def test_kernel_launches_per_layer() -> None:
    # eager Llama block with GQA: forward 2 norms + 2 adds + 2 x 9 RoPE + 2 SwiGLU + 2 repeat_interleave = 26;
    # backward 2 x 2 + 2 + 2 x 14 + 3 + 2 = 39; fused runtimes 6 / 10.
    assert fixed_costs.layer_launch_s(ctx_for("pytorch")) == pytest.approx((26e-6, 39e-6))
    assert fixed_costs.layer_launch_s(ctx_for("megatron")) == pytest.approx((6 * KERNEL_LAUNCH_GAP_S, 10e-6))


def test_cross_entropy_bytes_per_runtime() -> None:
    tokens, tp = np.array([4096.0]), np.array([2])
    # the compiled runtime keeps TorchTitan's eager loss
    for runtime, (fwd, bwd) in (("pytorch", (22, 26)), ("megatron", (38, 14)), ("pytorch-compile", (22, 26))):
        ctx = ctx_for(runtime)
        logits = 4096 * V / 2
        gemm = compute.head_forward_time_s(ctx, tokens, tp)[0] - logits * fwd / BW
        assert compute.head_time_s(ctx, tokens, tp)[0] == pytest.approx(3 * gemm + logits * (fwd + bwd) / BW, rel=1e-12)


ONE = np.array([1])


def test_optimizer_step_bytes_per_runtime() -> None:
    params, zero, shard = np.array([8e8]), np.array([1]), np.array([4])
    local = 2e8
    # foreach AdamW 84 B per local parameter, no clipping (meshplan run)
    assert fixed_costs.optimizer_step_s(ctx_for("pytorch"), params, zero, shard, cp=ONE)[0] == pytest.approx(local * 84 / BW)
    # fused AdamW 28 + clipping 12
    assert fixed_costs.optimizer_step_s(ctx_for("pytorch-compile"), params, zero, shard, cp=ONE)[0] == pytest.approx(local * 40 / BW)
    # Megatron: fused 28 + param copy 6 + clipping 12 per local parameter, + per unsharded one 4 B grad-buffer
    # zeroing and the division by the DP size (read + write of the buffer: fp32 with bf16, 16-bit with fp16)
    assert fixed_costs.optimizer_step_s(ctx_for("megatron"), params, zero, shard, cp=ONE)[0] == pytest.approx(
        (local * 46 + 8e8 * (4 + 8)) / BW)
    assert fixed_costs.optimizer_step_s(ctx_for("megatron", dtype="fp16"), params, zero, shard, cp=ONE)[0] == pytest.approx(
        (local * 46 + 8e8 * (4 + 4)) / BW)
    # the distributed optimizer updates 1/(dp x cp) of the parameters, as FSDP2 over dp_shard x cp does: cp2
    # halves the local part
    cp2 = np.array([2])
    assert fixed_costs.optimizer_step_s(ctx_for("megatron"), params, zero, shard, cp=cp2)[0] == pytest.approx(
        (local / 2 * 46 + 8e8 * (4 + 8)) / BW)
    assert fixed_costs.optimizer_step_s(ctx_for("pytorch"), params, zero, shard, cp=cp2)[0] == pytest.approx(
        local / 2 * 84 / BW)


def test_fsdp_copy_out() -> None:
    # read + write of 2-byte weights per gathered parameter, per gather; none where gathers land in place
    got = fixed_costs.fsdp_copy_s(ctx_for("pytorch"), np.array([1e9]), np.array([3.0]))
    assert got[0] == pytest.approx(4 * 1e9 * 3 / BW)
    assert fixed_costs.fsdp_copy_s(ctx_for("megatron"), np.array([1e9]), np.array([3.0]))[0] == 0.0


def test_gradients_reduce_in_fp32_under_mixed_precision() -> None:
    assert grad_reduce_bytes(ctx_for("megatron")) == 4  # Megatron arguments.py: bf16 -> fp32 reduction
    assert grad_reduce_bytes(ctx_for("pytorch")) == 4  # FSDP2 reduce_dtype=float32 (executor/fsdp.py)
    assert grad_reduce_bytes(ctx_for("megatron", dtype="fp16")) == 2  # fp16 with loss scaling reduces 16-bit
    assert grad_reduce_bytes(ctx_for("pytorch", dtype="fp32", cluster="local-cpu")) == 4


def test_interference_of_overlapped_communication() -> None:
    # 10 ms of collective beside a 40 ms window, 1/4 of it with nothing to overlap: 2.5 ms alone, 7.5 ms beside
    # compute that runs 18.9 % slower -> 2.5 + 0.189 * 7.5
    assert interference.exposed_s(0.010, 0.040, 0.25, 0.189) == pytest.approx(0.0025 + 0.189 * 0.0075)
    # longer than the window: 30 ms of 50 exposed, the 20 ms overlapped add 18.9 % of themselves
    assert interference.exposed_s(0.050, 0.020, 0.0, 0.189) == pytest.approx(0.030 + 0.189 * 0.020)
    assert interference.slowdown(ctx_for("megatron")) == 0.189  # DGX H100 profile (Lee et al. 2025)
    assert interference.slowdown(ctx_for("pytorch", dtype="fp32", cluster="local-cpu")) == 0.0


def _data_rows(**columns: list[int]) -> dict[str, np.ndarray]:
    rows = len(next(iter(columns.values())))
    base = {"tp": 1, "pp": 1, "cp": 1, "dp": 1, "dp_shard": 1, "order": 0}
    return {k: np.asarray(columns.get(k, [v] * rows), dtype=np.int64) for k, v in base.items()}


def test_collectives_that_leave_the_host_slow_compute_by_the_sms_nccl_drives_the_nics_with() -> None:
    """NVIDIA/nccl#689: 2 SMs per NIC port of up to 25 GB/s. DGX H100: NDR ports (50 GB/s) take 4 SMs each of 132."""
    ctx = make_context(MODEL, hardware_profiles.cluster("dgx-h100", nodes=4), Workload(global_batch=32, seq_len=4096,
                                                                                         runtime="megatron"))
    rows = _data_rows(tp=[8, 4, 1, 1, 2], dp=[4, 8, 32, 8, 4], pp=[1, 1, 1, 4, 4])
    got = interference.data_group_slowdown(ctx, axis_groups(rows))
    # tp8 x dp4: one rank per host, one port, 4 SMs; tp4 x dp8: two ranks per host, 8 SMs; tp1 x dp32: eight ports,
    # 32 SMs -> 32/100, capped at the family's 0.189; tp1 x dp8 x pp4 and tp2 x dp4 x pp4: the group stays on its
    # host (NVLink): the family's factor.
    assert got.tolist() == pytest.approx([4 / 128, 8 / 124, 0.189, 0.189, 0.189])
    # A100 HDR ports (25 GB/s): 2 SMs each of 108.
    a100 = make_context(MODEL, hardware_profiles.cluster("dgx-a100", nodes=4), Workload(global_batch=32, seq_len=4096))
    assert interference.data_group_slowdown(a100, axis_groups(_data_rows(tp=[8], dp=[4]))).tolist() == pytest.approx([2 / 106])
    # One host, or a GPU profile without an SM count: the family's factor for every row.
    one_host = make_context(MODEL, hardware_profiles.cluster("dgx-h100", nodes=1), Workload(global_batch=8, seq_len=4096))
    assert interference.data_group_slowdown(one_host, axis_groups(_data_rows(tp=[1, 8], dp=[8, 1]))).tolist() == [0.189, 0.189]
    ctx.gpu = ctx.gpu.model_copy(update={"sm_count": None})
    assert interference.data_group_slowdown(ctx, axis_groups(rows)).tolist() == [0.189] * 5


def test_tp_overlap_hides_its_share_behind_the_gemms() -> None:
    on = ctx_for("megatron", tp_comm_overlap=True)
    share = RUNTIME_COSTS["megatron"].tp_overlap_hidden
    tp_s, gemm_s = np.array([0.004]), np.array([0.010])
    got = comm.tp_exposed_s(on, tp_s, gemm_s, np.array([True]), np.array([8]))[0]
    assert got == pytest.approx(0.004 * (1 - share) + 0.189 * 0.004 * share)
    # off without SP, without the option, and on the eager runtime
    assert comm.tp_exposed_s(on, tp_s, gemm_s, np.array([False]), np.array([8]))[0] == 0.004
    assert comm.tp_exposed_s(ctx_for("megatron"), tp_s, gemm_s, np.array([True]), np.array([8]))[0] == 0.004
    with pytest.raises(ValueError, match="tp_comm_overlap needs runtime"):
        Workload(runtime="pytorch", tp_comm_overlap=True)


def test_cp_exposure_and_attention_calls() -> None:
    cp_s, attn_s = np.array([0.003]), np.array([0.005])
    # the executor all-gathers before attention: all exposed; ring attention hides it, with interference
    assert comm.cp_exposed_s(ctx_for("pytorch"), cp_s, attn_s)[0] == 0.003
    assert comm.cp_exposed_s(ctx_for("megatron"), cp_s, attn_s)[0] == pytest.approx(0.189 * 0.003)
    cp = np.array([1, 4])
    assert compute.attention_calls(ctx_for("pytorch"), cp).tolist() == [1.0, 2.0]  # two query chunks per rank
    assert compute.attention_calls(ctx_for("megatron"), cp).tolist() == [1.0, 4.0]  # one per ring step


def test_cp_load_balance_gives_every_rank_one_cpth_of_the_causal_work() -> None:
    """executor/cp.py: rank i holds chunks i and 2cp-1-i of c = S/(2cp) tokens; chunk g attends keys [0, (g+1)c)
    with a causal lower-right mask, i.e. c*g*c + c^2/2 score elements."""
    seq, cp = 8192, 4
    c = seq // (2 * cp)
    work = [sum(c * g * c + c * c / 2 for g in (i, 2 * cp - 1 - i)) for i in range(cp)]
    assert work == [seq * seq / 2 / cp] * cp


def test_zero12_weights_are_gathered_every_microbatch_under_fsdp2() -> None:
    """FSDP2 reshards after every backward: ZeRO-1 gathers once per micro-batch (pytorch), once per step with
    Megatron's distributed optimizer; the FSDP copy-out is paid per gather."""
    lat, per_byte = 0.0, 1e-10
    coeffs = (np.array([lat]), np.array([per_byte]))
    one, m = np.array([1]), np.array([4])
    params, layers = np.array([1e8]), np.array([4])
    window = np.array([1e-9])  # nothing hides it
    t = {r: comm.dp_time_s(ctx_for(r), params, one, m, coeffs, coeffs, coeffs, np.array([8]), window, window, layers,
                           one)[0] for r in ("pytorch", "megatron")}
    rs = 4 * 1e8 * per_byte + 4 * 1e8 / 8 * per_byte  # fp32 gradients once per step: RS + replicate all-reduce
    ag = 2 * 1e8 * per_byte  # 16-bit weights
    copy = 4 * 1e8 / BW
    slow = 0.189 * 1e-9  # the hidden nanosecond slows compute by the interference factor
    assert t["megatron"] == pytest.approx(rs + ag + 2 * slow, rel=1e-6)
    assert t["pytorch"] == pytest.approx(rs + 4 * (ag + copy) + 5 * slow, rel=1e-6)


def test_zero_bubble_weight_pass_is_the_gemms() -> None:
    ctx = ctx_for("pytorch")
    tokens, one = np.array([4096.0]), np.array([1])
    lt = ctx.layer_types[0]
    t = compute.layer_time_s(ctx, lt, tokens, one, one, one, np.array([False]))
    from planner.cost.efficiency import gemm_time_s

    gemm = sum(gemm_time_s(f * 4096, ctx.peak_flops, ctx.max_fraction, ctx.half_flops) for f in lt.gemm_flops_per_token)
    assert t.wgrad_s[0] == pytest.approx(float(gemm), rel=1e-12)
    # B (the rest of the backward) is longer than W: attention and element-wise backward stay in B
    assert t.bwd_s[0] - t.wgrad_s[0] > t.wgrad_s[0]


def test_pipeline_transfers_blocking_or_overlapped() -> None:
    x, m, v, pp = np.array([0.001]), np.array([8]), np.array([2]), np.array([4])
    window = np.array([0.0004])  # one chunk's forward: hides 0.4 ms of each 1 ms transfer
    inter, one_f1b = np.array([2]), np.array([1])
    # blocking (torch.distributed.pipelining): 2 (m v + p - 1) transfers on the critical path
    assert comm.pp_exposed_s(ctx_for("pytorch"), x, m, v, pp, inter, window)[0] == pytest.approx(2 * (16 + 3) * 0.001)
    # Megatron's interleaved schedule: fill/drain exposed, steady state beyond the chunk window + interference
    got = comm.pp_exposed_s(ctx_for("megatron"), x, m, v, pp, inter, window)[0]
    assert got == pytest.approx(2 * 3 * 0.001 + 2 * 16 * (0.0006 + 0.189 * 0.0004))
    assert comm.pp_exposed_s(ctx_for("megatron"), x, m, v, pp, one_f1b, window)[0] == pytest.approx(2 * 19 * 0.001)
    assert comm.pp_exposed_s(ctx_for("megatron"), x, m, v, np.array([1]), inter, window)[0] == 0.0


def test_stage_boundary_message_per_tp_rank() -> None:
    """Sequence-sharded (SP) activations cross a stage boundary as 1/tp per TP rank in every runtime; without SP
    PyTorch's pipelining sends each rank's whole replicated activation, Megatron scatters 1/tp per rank."""
    tokens, tp = np.array([8192]), np.array([4])
    unit = {"pytorch": ctx_for("pytorch"), "megatron": ctx_for("megatron")}
    for name, ctx in unit.items():
        p2p = (0.0, 1.0)  # one second per byte, no latency: the transfer time is the message size
        with_sp = comm.pp_p2p_s(ctx, p2p, tokens, tp, np.array([True])) - comm.overhead.pp_transfer_s(ctx)
        without = comm.pp_p2p_s(ctx, p2p, tokens, tp, np.array([False])) - comm.overhead.pp_transfer_s(ctx)
        full = 8192 * MODEL.hidden_size * ctx.act_bytes
        assert with_sp[0] == pytest.approx(full / 4)
        assert without[0] == pytest.approx(full / 4 if RUNTIME_COSTS[name].p2p_scatter_gather else full)
    assert not RUNTIME_COSTS["pytorch"].p2p_scatter_gather and RUNTIME_COSTS["megatron"].p2p_scatter_gather


def test_embedding_backward_writes_a_dense_gradient() -> None:
    ctx = ctx_for("pytorch")
    tokens, tp = np.array([4096.0]), np.array([2])
    lookup = 4096 * H * 2 * 2 / BW  # forward gather: read and write h 2-byte elements per token
    dense = 3 * (V / 2) * H * 2 / BW  # V/tp x h gradient written and accumulated each micro-batch
    assert compute.embedding_time_s(ctx, tokens, tp)[0] == pytest.approx(3 * lookup + dense, rel=1e-12)


def test_megatron_moe_dispatch_sends_the_sequence_shard_and_exchanges_rows_over_expert_tp() -> None:
    """Megatron-Core's all-to-all dispatcher: T/tp tokens over EP, then top_k T h rows gathered/scattered over TP."""
    from planner.model.spec import MoESpec

    moe_model = MODEL.model_copy(update={"moe": MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=1024)})
    tokens, tp, on, off = np.array([4096.0]), np.array([4]), np.array([True]), np.array([False])
    ar, a2a = (np.array([1e-5]), np.array([1e-10])), (np.array([2e-5]), np.array([3e-10]))
    mega = make_context(moe_model, hardware_profiles.cluster("dgx-h100", gpus=8),
                        Workload(global_batch=8, seq_len=4096, runtime="megatron"), framework="any")
    eager = make_context(moe_model, hardware_profiles.cluster("dgx-h100", gpus=8),
                         Workload(global_batch=8, seq_len=4096, runtime="pytorch"), framework="any")
    assert moe_dispatch.ep_dispatch_tokens(mega, tokens, tp, on)[0] == 1024.0  # the SP shard
    assert moe_dispatch.ep_dispatch_tokens(mega, tokens, tp, off)[0] == 4096.0  # no SP: whole micro-batch
    assert moe_dispatch.ep_dispatch_tokens(eager, tokens, tp, on)[0] == 4096.0  # the executor dispatches every token
    # Expert-TP exchange: one all-reduce volume of top_k T h rows, less the dense MLP's T h volume it replaces.
    rows, mlp = 4096 * 2 * H * 2, 4096 * H * 2
    assert comm.etp_layer_s(mega, ar, tokens, tp, on)[0] == pytest.approx(1e-10 * (rows - mlp))
    assert comm.etp_layer_s(mega, ar, tokens, tp, off)[0] == 0.0
    assert comm.etp_layer_s(eager, ar, tokens, tp, on)[0] == 0.0
    shared = make_context(moe_model.model_copy(update={"moe": MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=1024, num_shared_experts=1)}),
                          hardware_profiles.cluster("dgx-h100", gpus=8),
                          Workload(global_batch=8, seq_len=4096, runtime="megatron"), framework="any")
    assert comm.etp_layer_s(shared, ar, tokens, tp, on)[0] == pytest.approx(1e-5 + 1e-10 * rows)
    # The all-to-all of the shard: dispatch + combine of T/tp top_k h each way, plus the counts.
    sent = moe_dispatch.ep_dispatch_tokens(mega, tokens, tp, on)
    assert comm.ep_layer_bwd_s(mega, a2a, sent, np.array([2]))[0] == pytest.approx(2 * (2e-5 + 3e-10 * 1024 * 2 * H * 2))


def test_unfused_gradient_accumulation_adds_six_bytes_per_local_parameter() -> None:
    # Megatron-LM 2021's DDP hook: main_grad.add_(grad) per micro-batch, read grad + read and write main_grad (fp16)
    tokens, one, sp = np.array([4096.0, 4096.0]), np.array([1, 1]), np.array([False, False])
    tp = np.array([1, 4])
    fused, unfused = ctx_for("megatron"), ctx_for("megatron", grad_accumulation_fusion=False)
    lt = fused.layer_types[0]
    a = compute.layer_time_s(fused, lt, tokens, tp, one, one, sp)
    b = compute.layer_time_s(unfused, lt, tokens, tp, one, one, sp)
    params = 2 * H * Q + 2 * H * KV + 3 * H * F + 2 * H  # q, o, k, v, gate/up/down, two RMSNorm weights
    assert lt.dense_params == params
    extra = 6.0 * params / tp / BW
    assert b.bwd_s == pytest.approx(a.bwd_s + extra, rel=1e-12)
    assert b.fwd_s == pytest.approx(a.fwd_s, rel=1e-12)  # forward untouched
    assert np.all(extra > 0) and extra[0] == pytest.approx(4 * extra[1])


def test_megatron_fp16_optimizer_holds_an_fp32_gradient_copy() -> None:
    # Float16OptimizerWithFloat16Params: main_param.grad = main_grad.float(); with fp16 main_grad that is 4 B/param more
    from planner.cost.memory import model_state_bytes

    fp16, bf16, eager = ctx_for("megatron", dtype="fp16"), ctx_for("megatron"), ctx_for("pytorch", dtype="fp16")
    assert (fp16.optimizer_bytes, bf16.optimizer_bytes, eager.optimizer_bytes) == (16, 12, 12)
    for zero, shard in ((0, 1), (1, 4)):  # sharded like the rest of the optimizer state under ZeRO-1
        args = (np.array([1e9]), np.array([zero]), np.array([shard]), np.array([1]))
        _, _, opt16 = model_state_bytes(fp16, *args, cp=np.array([1]))
        _, _, opt12 = model_state_bytes(bf16, *args, cp=np.array([1]))
        assert float(opt16[0] - opt12[0]) == pytest.approx(4e9 / shard)


def test_bf16_optimizer_all_reduces_the_whole_gradient_under_zero1() -> None:
    """DeepSpeed's BF16_Optimizer all-reduces the whole fp32 gradient (its ZeRO-1): the reduce-scatter of the
    distributed optimizer plus an all-gather of the same fp32 bytes; the weight gather is unchanged."""
    per_byte = 1e-10
    rs_coeffs, ag_coeffs = (np.array([0.0]), np.array([per_byte])), (np.array([0.0]), np.array([2 * per_byte]))
    one, params, layers, window = np.array([1]), np.array([1e8]), np.array([4]), np.array([1e-9])
    t = {flag: comm.dp_time_s(ctx_for("megatron", overlap_dp_comm=False, zero1_grad_allreduce=flag), params, one,
                              np.array([4]), rs_coeffs, ag_coeffs, rs_coeffs, np.array([8]), window, window, layers,
                              one)[0] for flag in (False, True)}
    assert t[True] - t[False] == pytest.approx(4 * 1e8 * 2 * per_byte, rel=1e-9)  # fp32 G over the all-gather's rate


def test_tied_embedding_allreduce_between_end_stages() -> None:
    """Megatron all-reduces the tied word-embedding gradient between the first and last stage once per step: a
    two-rank ring sends the whole V/tp x h gradient (fp32 with bf16, 16-bit with fp16) over the p2p path plus
    two latency steps; nothing without pipelining, untied embeddings or on the PyTorch runtimes."""
    tied = MODEL.model_copy(update={"tied_embeddings": True})
    work = Workload(global_batch=8, seq_len=4096, runtime="megatron")
    ctx = make_context(tied, hardware_profiles.cluster("dgx-h100", gpus=8), work, framework="any")
    a, b = np.array([5e-6, 5e-6, 5e-6]), np.array([1 / 25e9, 1 / 25e9, 1 / 25e9])
    pp, tp = np.array([1, 4, 4]), np.array([2, 2, 3])
    got = comm.tied_embedding_allreduce_s(ctx, (a, b), pp, tp)
    # V/tp = 16000 rows (tp 2) and ceil(32000 / 3) = 10667 rows (tp 3, Megatron pads the vocabulary), h = 1024
    assert got == pytest.approx([0.0, 1e-5 + 16000 * 1024 * 4 / 25e9, 1e-5 + 10667 * 1024 * 4 / 25e9], rel=1e-12)
    fp16 = make_context(tied, hardware_profiles.cluster("dgx-h100", gpus=8), work.model_copy(update={"dtype": "fp16"}),
                        framework="any")
    assert comm.tied_embedding_allreduce_s(fp16, (a, b), pp, tp)[1] == pytest.approx(1e-5 + 16000 * 1024 * 2 / 25e9)
    untied = make_context(MODEL, hardware_profiles.cluster("dgx-h100", gpus=8), work, framework="any")
    assert not comm.tied_embedding_allreduce_s(untied, (a, b), pp, tp).any()
    eager = make_context(tied, hardware_profiles.cluster("dgx-h100", gpus=8), work.model_copy(update={"runtime": "pytorch"}),
                         framework="any")
    assert not comm.tied_embedding_allreduce_s(eager, (a, b), pp, tp).any()


def test_bf16_gradient_reduction_moves_two_bytes_in_every_runtime() -> None:
    """`Workload.grad_reduce_dtype` bf16: FSDP2 reduce_dtype, Megatron --grad-reduce-in-bf16, DeepSpeed
    communication_data_type all reduce 2-byte gradients, also where training is fp32 (CPU)."""
    for runtime in RUNTIME_NAMES:
        assert grad_reduce_bytes(ctx_for(runtime, grad_reduce_dtype="bf16")) == 2
    assert grad_reduce_bytes(ctx_for("pytorch", dtype="fp32", cluster="local-cpu", grad_reduce_dtype="bf16")) == 2
    # ZeRO-0 exposes only the gradient all-reduce (overlap off, no latency): half the bytes, half the time.
    coeffs, one = (np.array([0.0]), np.array([1e-10])), np.array([1])
    window, params, layers = np.array([1e-9]), np.array([1e8]), np.array([4])

    def dp_s(grad_reduce_dtype: str, zero: int) -> float:
        ctx = ctx_for("pytorch", overlap_dp_comm=False, grad_reduce_dtype=grad_reduce_dtype)
        return comm.dp_time_s(ctx, params, np.array([zero]), np.array([4]), coeffs, coeffs, coeffs, np.array([8]),
                              window, window, layers, one)[0]

    assert dp_s("bf16", 0) == pytest.approx(dp_s("fp32", 0) / 2, rel=1e-12)
    # ZeRO-3: 4 micro-batches of reduce-scatter and the once-per-step all-reduce of G/8 across the replicate group
    # lose 2 of their 4 bytes per parameter; the weight gathers stay.
    assert dp_s("fp32", 3) - dp_s("bf16", 3) == pytest.approx((4 + 1 / 8) * 1e8 * 2 * 1e-10, rel=1e-9)


def test_megatron_bf16_grad_buffer_adds_the_fp32_copy_and_halves_the_buffer_passes() -> None:
    """--grad-reduce-in-bf16 makes Megatron's grad buffer bf16: the distributed optimizer copies each shard's gradient
    to fp32 (4 B per parameter, as in fp16 runs), and the zeroing and DP scaling move 2-byte elements."""
    bf16_reduce = ctx_for("megatron", grad_reduce_dtype="bf16")
    assert (bf16_reduce.optimizer_bytes, ctx_for("megatron").optimizer_bytes) == (16, 12)
    assert ctx_for("pytorch", grad_reduce_dtype="bf16").optimizer_bytes == 12  # FSDP2 reduces its bf16 grads: no copy
    params, zero, shard = np.array([8e8]), np.array([1]), np.array([4])
    # fused 28 + param copy 6 + clipping 12 per local parameter; per unsharded one 2 B zeroing + 2 x 2 B scaling
    assert fixed_costs.optimizer_step_s(bf16_reduce, params, zero, shard, cp=ONE)[0] == pytest.approx((2e8 * 46 + 8e8 * 6) / BW)


def test_megatron_bf16_model_states_match_the_distributed_optimizer_table() -> None:
    """Megatron-LM docs/distrib_optimizer.md: "bf16 param, fp32 grads" hold 18 B per parameter, 6 + 12/d with the
    distributed optimizer (the gradient buffer is fp32 by default for bf16); fp16 runs and --grad-reduce-in-bf16 keep
    a 16-bit buffer plus the optimizer's fp32 copy of it (20 B, 4 + 16/d); eager PyTorch keeps the ZeRO paper's 16 B."""
    from planner.cost.memory import model_state_bytes

    params = np.array([1e9])
    for ctx, full, per_shard in ((ctx_for("megatron"), 18, (6, 12)), (ctx_for("megatron", dtype="fp16"), 20, (4, 16)),
                                 (ctx_for("megatron", grad_reduce_dtype="bf16"), 20, (4, 16)),
                                 (ctx_for("pytorch"), 16, (4, 12))):
        for zero, d in ((0, 1), (1, 8)):
            states = model_state_bytes(ctx, params, np.array([zero]), np.array([d]), np.array([1]), cp=np.array([1]))
            total = sum(float(x[0]) for x in states)
            expected = full * 1e9 if zero == 0 else (per_shard[0] + per_shard[1] / d) * 1e9
            assert total == pytest.approx(expected, rel=1e-12), (ctx.workload.runtime, ctx.workload.dtype, zero)


def test_fp8_recipes_quantize_the_linear_layers_only() -> None:
    """Under fp8 the decoder linears run at the fp8 peak; attention's core and the LM head stay at bf16's
    (planner.layout.workload.UNQUANTIZED_MATMUL_DTYPE): a 2x fp8 peak must not halve attention or the head."""
    bf16, fp8 = ctx_for("megatron", dtype="bf16"), ctx_for("megatron", dtype="fp8")
    assert fp8.peak_flops > 1.9 * bf16.peak_flops and fp8.unquantized_peak_flops == bf16.peak_flops
    tokens, one = np.array([4096.0]), np.array([1])
    lt16, lt8 = bf16.layer_types[0], fp8.layer_types[0]
    t16 = compute.layer_time_s(bf16, lt16, tokens, one, one, one, one.astype(bool))
    t8 = compute.layer_time_s(fp8, lt8, tokens, one, one, one, one.astype(bool))
    np.testing.assert_allclose(t8.attn_fwd_s, t16.attn_fwd_s, rtol=1e-12)
    np.testing.assert_allclose(compute.head_weight_grad_time_s(fp8, tokens, one),
                               compute.head_weight_grad_time_s(bf16, tokens, one), rtol=1e-12)
    # The linears are faster: each weight-gradient GEMM (F + half) / (peak x plateau) at twice the peak, slowed by the
    # precise accumulation the recipe's backward runs with (test_fp8_backward_gemms_accumulate_precisely below).
    gemm16 = t16.wgrad_s
    slow = hardware_profiles.gpu("h100-sxm").fp8_precise_accumulation_slowdown
    expected8 = slow * sum((f * 4096 + bf16.half_flops) / (fp8.peak_flops * fp8.max_fraction) for f in lt8.gemm_flops_per_token)
    np.testing.assert_allclose(t8.wgrad_s, expected8, rtol=1e-12)
    assert float(t8.wgrad_s[0]) < float(gemm16[0])


def test_fp8_backward_gemms_accumulate_precisely() -> None:
    """Both fp8 recipes keep fast accumulation for the forward GEMM and turn it off for the input- and weight-gradient
    GEMMs (torchao Float8LinearConfig; Transformer Engine _2X_ACC_DGRAD/_2X_ACC_WGRAD): on Hopper those two take
    the profile's fp8_precise_accumulation_slowdown, the forward does not; bf16, and Blackwell (no fast-accumulation
    mode), are untouched."""
    tokens, one = np.array([4096.0]), np.array([1])
    slow = hardware_profiles.gpu("h100-sxm").fp8_precise_accumulation_slowdown
    assert slow > 1
    for runtime in ("pytorch", "pytorch-compile", "megatron"):
        fp8, fast = ctx_for(runtime, dtype="fp8"), ctx_for(runtime, dtype="fp8")
        fast.__dict__["fp8_backward_gemm_slowdown"] = 1.0  # the same context with fast accumulation everywhere
        assert fp8.fp8_backward_gemm_slowdown == slow
        lt = fp8.layer_types[0]
        t, f = (compute.layer_time_s(c, lt, tokens, one, one, one, one.astype(bool)) for c in (fp8, fast))
        np.testing.assert_allclose(t.fwd_s, f.fwd_s, rtol=1e-12)
        np.testing.assert_allclose(t.wgrad_s, slow * f.wgrad_s, rtol=1e-12)
        # dgrad and wgrad: the backward's GEMMs are twice the forward's, all slowed; nothing else changes
        np.testing.assert_allclose(t.bwd_s - f.bwd_s, 2 * (slow - 1) * f.wgrad_s, rtol=1e-9)
        assert ctx_for(runtime, dtype="bf16").fp8_backward_gemm_slowdown == 1.0
        assert ctx_for(runtime, dtype="fp8", cluster="gb200-nvl72").fp8_backward_gemm_slowdown == 1.0


def test_flash2_times_attention_at_its_own_efficiency_where_the_profile_has_one() -> None:
    """attention_kernel 'flash2' on Hopper uses the profile's FlashAttention-2 efficiency (0.348 of peak forward +
    backward, Azure's ND H100 v5 results, against the measured cuDNN kernel's 0.552); on Ampere the profile's kernel is FlashAttention-2
    already, so nothing changes. The framework TorchTitan sets it (its SDPA wrapper ranks the flash backend first)."""
    tokens, one = np.array([4096.0]), np.array([1])

    def attention_s(ctx) -> float:
        lt = ctx.layer_types[0]
        return float(compute.layer_time_s(ctx, lt, tokens, one, one, one, one.astype(bool)).attn_fwd_s[0])

    auto, fa2 = ctx_for("pytorch"), ctx_for("pytorch", attention_kernel="flash2")
    gpu = hardware_profiles.gpu("h100-sxm")
    assert fa2.attention_efficiency == pytest.approx(gpu.attention_efficiency_flash2 * gpu.sustained_fraction)
    assert attention_s(fa2) / attention_s(auto) == pytest.approx(gpu.attention_efficiency / gpu.attention_efficiency_flash2)
    a100 = [ctx_for("pytorch", cluster="dgx-a100", attention_kernel=k) for k in ("auto", "flash2", "flash1")]
    assert a100[0].attention_efficiency == a100[1].attention_efficiency
    # FlashAttention-1: FlashAttention-2's efficiency over its published speedup, on Ampere and Hopper alike
    assert a100[2].attention_efficiency == pytest.approx(a100[1].attention_efficiency / FLASH2_SPEEDUP_OVER_FLASH1)
    fa1 = ctx_for("pytorch", attention_kernel="flash1")
    assert fa1.attention_efficiency == pytest.approx(fa2.attention_efficiency / FLASH2_SPEEDUP_OVER_FLASH1)
    assert attention_s(fa1) > attention_s(fa2)

    from planner.frameworks import PROFILES, workload_for
    w = Workload(global_batch=8, seq_len=4096)
    assert workload_for(PROFILES["torchtitan"], w).attention_kernel == "flash2"
    assert workload_for(PROFILES["meshplan"], w).attention_kernel == "auto"
    assert workload_for(PROFILES["torchtitan"], Workload(global_batch=8, seq_len=4096, attention_kernel="auto")).attention_kernel == "auto"


def test_fp8_cast_passes_per_recipe() -> None:
    """fp8 adds the recipe's casts around every linear (cost.runtime.Fp8Casts), counted by hand for the test model
    (h = q = 1024, kv = 256, f = 4096, SwiGLU). Transformer Engine (megatron): QKV and FC1 read the norm's fp8
    output (1 B per input element, one cast each), proj and FC2 cast with their transpose (4 B), every output
    gradient 4 B. torchao (pytorch runtimes): each of the seven linears casts its input forward and backward
    (5 B each) and its output gradient twice (10 B). Column-parallel inputs and row-parallel outputs are the
    replicated (hidden-state) share. bf16 adds nothing."""
    base = elementwise.layer_bytes_per_token(ctx_for("megatron"))
    te = elementwise.layer_bytes_per_token(ctx_for("megatron", dtype="fp8"))
    got = (te.local_fwd - base.local_fwd, te.replicated_fwd - base.replicated_fwd,
           te.local_bwd - base.local_bwd, te.replicated_bwd - base.replicated_bwd)
    assert got == (4 * Q + 4 * F, 1 * H + 1 * H, 4 * (Q + 2 * KV + 2 * F), 4 * (H + H))
    for runtime in ("pytorch", "pytorch-compile"):
        base = elementwise.layer_bytes_per_token(ctx_for(runtime))
        ao = elementwise.layer_bytes_per_token(ctx_for(runtime, dtype="fp8"))
        got = (ao.local_fwd - base.local_fwd, ao.replicated_fwd - base.replicated_fwd,
               ao.local_bwd - base.local_bwd, ao.replicated_bwd - base.replicated_bwd)
        inputs_rep, inputs_local = 5 * H, Q + F  # q, k, v, gate, up read h; out reads q, down reads f
        assert got == (5 * inputs_local, 5 * inputs_rep, 5 * inputs_local + 10 * (Q + 2 * KV + 2 * F),
                       5 * inputs_rep + 10 * (H + H)), runtime

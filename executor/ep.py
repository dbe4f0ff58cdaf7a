"""Expert parallelism: each MoE layer's routed experts sharded over the `ep` mesh, tokens moved by all-to-all.

EP rank r of ep keeps experts [r * E/ep, (r+1) * E/ep) of every MoE layer, keyed by their global index, so
parameter names, initial values and checkpoints do not depend on ep (executor.init, executor.checkpoint).
Which ranks form an EP group, and how the other data ranks hold the experts: planner.layout.expert_groups and
executor.mesh. One MoE forward on one rank (executor.moe routes and sorts; `ExpertExchange` does the rest):

  1. route its tokens and sort the served (token, slot) assignments by expert (executor.moe, .routing);
  2. exchange the per-expert counts, an all_to_all_single of ep x E/ep integers: every rank learns how many
     rows each peer sends for each of its local experts (the split sizes of the next two steps);
  3. dispatch: all_to_all_single of the sorted rows with those split sizes (uneven, possibly empty);
  4. run the local experts: rows arrive grouped by source rank, then expert; they are regrouped by expert
     and every local expert runs, with no row if none came, so every rank makes the same collective calls
     (TP all-reduces inside the experts, FSDP gathers);
  5. combine: the reverse all_to_all_single (split sizes swapped) brings every output row home, where
     executor.moe weights it by its router weight and adds it to its token.
TorchTitan's `ExpertParallel` and Megatron-Core's `MoEAlltoAllTokenDispatcher` take the same steps.

Autograd: steps 3 and 5 use `torch.distributed._functional_collectives.all_to_all_single_autograd`, whose
backward is the all-to-all with the split sizes swapped; it runs on gloo with uneven and empty splits
(tests/distributed) and on NCCL. (`torch.distributed.nn.functional.all_to_all_single` is deprecated.)

Expert gradients: a data rank's loss is the mean over its own tokens, and FSDP/replicate average gradients
over the ranks holding the same weights. For experts those are the D/ep ranks of the expert-data-parallel
group, not all D data ranks, while a local expert's gradient sums the contributions of the ep ranks whose
tokens it served. So the expert's output gradient is scaled by 1/ep (and its input gradient back by ep,
leaving the tokens' gradients as they were): the average over D/ep ranks of (1/ep) x (sum over an EP group)
is the reference's mean over all D ranks. (TorchTitan sets FSDP's gradient divide factor instead; in torch
2.13 that reduces with PREMUL_SUM, which gloo does not implement.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import all_to_all_single_autograd
from torch.distributed.device_mesh import DeviceMesh

from executor.moe import MoE
from executor.routing import SequenceShard


def all_to_all_rows(rows: torch.Tensor, send: list[int], recv: list[int], group: dist.ProcessGroup) -> torch.Tensor:
    """Rows to peers: `send[j]` consecutive rows to group rank j, `recv[j]` rows back from it (autograd)."""
    return all_to_all_single_autograd(rows.contiguous(), recv, send, group)


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; multiplies the gradient by `scale` backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


def expert_major_order(counts: torch.Tensor) -> torch.Tensor:
    """Row order that regroups received rows by expert: `counts` (ep, E_local) rows from source rank r for
    local expert j arrive as blocks in (r, j) order; the result lists them in (j, r) order."""
    ep, local = counts.shape
    starts = (counts.flatten().cumsum(0) - counts.flatten()).view(ep, local).t().flatten()  # block starts, (j, r)
    lengths = counts.t().flatten()
    total = int(lengths.sum())
    out_starts = lengths.cumsum(0) - lengths
    return torch.arange(total) + torch.repeat_interleave(starts - out_starts, lengths)


@dataclass(frozen=True)
class ExpertExchange:
    """Steps 2-5 of the module docstring for one rank of one EP group."""

    group: dist.ProcessGroup
    ep: int
    rank: int
    num_experts: int

    @property
    def local_ids(self) -> range:
        per = self.num_experts // self.ep
        return range(self.rank * per, (self.rank + 1) * per)

    def __call__(self, rows: torch.Tensor, counts: torch.Tensor, experts) -> torch.Tensor:
        """Outputs of `rows` (sorted by expert, `counts` per global expert) from the experts that own them."""
        per_rank = counts.view(self.ep, -1)
        received_counts = torch.empty_like(per_rank)
        dist.all_to_all_single(received_counts, per_rank, group=self.group)
        send = per_rank.sum(dim=1).tolist()
        recv = received_counts.sum(dim=1).tolist()
        received = all_to_all_rows(rows, send, recv, self.group)
        order = expert_major_order(received_counts.cpu()).to(rows.device)
        x = _ScaleGrad.apply(received[order], float(self.ep))
        y = _ScaleGrad.apply(experts(x, received_counts.sum(dim=0).tolist()), 1.0 / self.ep)
        back = torch.empty_like(order)
        back[order] = torch.arange(len(order), device=order.device)
        return all_to_all_rows(y[back], recv, send, self.group)


def apply_ep(part: torch.nn.Module, ep_mesh: DeviceMesh | None, cp_mesh: DeviceMesh | None) -> None:
    """Keep this rank's experts in every MoE layer of `part` and route their tokens over `ep_mesh` (None:
    ep = 1, all experts local); tell capacity routing where the rank's tokens sit under CP (None: no CP)."""
    shard = None
    if cp_mesh is not None and cp_mesh.size() > 1:
        shard = SequenceShard(cp_mesh.get_group(), cp_mesh.get_local_rank(), cp_mesh.size())
    for moe in [m for m in part.modules() if isinstance(m, MoE)]:
        if shard is not None:
            moe.sequence_shard = shard
        if ep_mesh is None or ep_mesh.size() == 1:
            continue
        exchange = ExpertExchange(ep_mesh.get_group(), ep_mesh.size(), ep_mesh.get_local_rank(), moe.num_experts)
        for key in list(moe.experts.keys()):
            if int(key) not in exchange.local_ids:
                del moe.experts[key]
        moe.exchange = exchange

"""Wall time of the full exact search on large clusters (target: < 1 s each on a 2-core machine).

    .venv/bin/python benchmarks/search_speed.py

Each case times `planner.api.search_result` end to end (cost context, shape bounds, branch and bound,
vectorised evaluation) after the cluster's topology is built; the topology build is timed separately
because it is done once per cluster and cached. Prints shapes, rows evaluated and the pick.
"""

from __future__ import annotations

import sys
import time

import hardware_profiles
from planner.api import _cached_topology, search_result
from planner.model import ModelSpec, preset
from planner.workload import Workload

MT_NLG_530B = ModelSpec(
    name="gpt-530b", num_layers=105, hidden_size=20480, num_heads=128, num_kv_heads=128, ffn_hidden_size=81920,
    vocab_size=51200, max_seq_len=2048, mlp="gelu", norm="layernorm", position="learned", tied_embeddings=True,
    qkv_bias=True, linear_bias=True, source="Narayanan et al. 2021 Table 1 (529.6B row) / Smith et al. 2022 MT-NLG",
)


def cases():
    yield "llama3-405b on 16,384 H100 (16M tokens, seq 8192)", preset("llama3-405b"), ("dgx-h100", 16384), \
        Workload(global_batch_tokens=16 * 2**20, seq_len=8192)
    yield "gpt3-175b on 1,024 A100-80GB (batch 1536)", preset("gpt3-175b"), ("dgx-a100", 1024), \
        Workload(global_batch=1536, seq_len=2048)
    yield "530B on 5,120 A100-80GB (batch 2560)", MT_NLG_530B, ("dgx-a100", 5120), Workload(global_batch=2560, seq_len=2048)
    for n in (8, 64, 512, 4096, 32768, 65536):
        tokens_m = 4 if n < 32768 else 16  # the larger clusters get a 16M-token batch (Llama 3 Table 4 scale)
        yield f"llama3-70b on {n:,} H100 ({tokens_m}M tokens, seq 8192)", preset("llama3-70b"), ("dgx-h100", n), \
            Workload(global_batch_tokens=tokens_m * 2**20, seq_len=8192)


def main() -> int:
    print(f"{'case':52s} {'topology s':>10s} {'search s':>9s} {'shapes':>7s} {'rows':>9s}  best layout")
    worst = 0.0
    for label, model, (cname, gpus), workload in cases():
        cluster = hardware_profiles.cluster(cname, gpus=gpus)
        t0 = time.perf_counter()
        _cached_topology(cluster)
        t_topo = time.perf_counter() - t0
        t0 = time.perf_counter()
        ctx, res = search_result(model, cluster, workload, top=1)
        t_search = time.perf_counter() - t0
        worst = max(worst, t_search)
        from planner.api import row_to_layout

        best = row_to_layout({k: int(v[0]) for k, v in res.table.items()}, None).describe() if len(res.step_time_s) else "none fits"
        print(f"{label:52s} {t_topo:10.3f} {t_search:9.3f} {res.stats.shapes_total:7d} {res.stats.rows_evaluated:9d}  {best}")
    print(f"\nslowest search: {worst:.3f} s (target < 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

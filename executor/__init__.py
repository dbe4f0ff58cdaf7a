"""meshplan executor: trains a `planner.plan.Plan` with PyTorch's distributed building blocks.

Launched by torchrun on every rank (`python -m executor PLAN.json`, or `meshplan run`). Reads the plan's
schema, never its solver. Recipe: executor.world (checks) -> executor.mesh (DeviceMesh) -> executor.parallelize
(TP/SP, CP, activation checkpointing, FSDP2/HSDP/replicate, pipeline) -> executor.loop (train, metrics,
DCP checkpoints).
"""

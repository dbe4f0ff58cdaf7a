"""What a layout's result from `equivalence_worker.py` must meet (tolerances and why: test_equivalence.py)."""

from __future__ import annotations

LOSS_RTOL = 1e-6
GRAD_RTOL = 1e-5
WEIGHT_RTOL = 1e-5
UPDATE_RTOL = 1e-3


BF16_REDUCE_RTOL = {"loss": 1e-5, "grad": 2e-2, "weight": 2e-3, "update": 0.3}
"""Tolerances of layouts whose gradients are reduced in bf16 (`Workload.grad_reduce_dtype`; why each: test_equivalence.py)."""


def assert_matches_reference(r: dict | None, launch_tail: str, *, bf16_reduce: bool = False) -> None:
    """One case's result against the single-process reference (None: the case did not run); `bf16_reduce`: the
    layout reduces gradients in bf16, held to BF16_REDUCE_RTOL, and its gradients must show bf16 rounding."""
    assert r is not None, f"did not run:\n{launch_tail}"
    name = r.get("name", "?")
    assert "error" not in r, f"{name}: {r.get('error')}"
    assert r["covered"] == r["ref_numel"], f"{name}: compared {r['covered']} of {r['ref_numel']} parameters"
    assert r["init_err"] == 0.0, f"{name}: initial weights differ from the reference: {r['init_err']:.2e}"
    assert r["held_outputs"] == 0, f"{name}: pipeline stages kept {r['held_outputs']} micro-batch outputs after the step"
    if bf16_reduce:
        _assert_bf16_reduce(r, name)
        return
    assert r["loss_err"] <= LOSS_RTOL, f"{name}: losses {r['losses']} vs reference {r['ref_losses']}"
    assert r["grad_err"] <= GRAD_RTOL, f"{name}: gradient error {r['grad_err']:.2e} (worst: {r['worst_on_rank0']})"
    assert r["weight_err"] <= WEIGHT_RTOL, f"{name}: weight error {r['weight_err']:.2e} (worst: {r['worst_on_rank0']})"
    assert r["update_err"] <= UPDATE_RTOL, f"{name}: update error {r['update_err']:.2e}"


def _assert_bf16_reduce(r: dict, name: str) -> None:
    tol = BF16_REDUCE_RTOL
    # Above the fp32 bound: fp32 reductions give ~1e-6, so a plan whose bf16 knob was ignored fails here.
    assert r["grad_err"] > GRAD_RTOL, f"{name}: gradient error {r['grad_err']:.2e} shows no bf16 rounding"
    assert r["grad_err"] <= tol["grad"], f"{name}: gradient error {r['grad_err']:.2e} (worst: {r['worst_on_rank0']})"
    assert r["loss_err"] <= tol["loss"], f"{name}: losses {r['losses']} vs reference {r['ref_losses']}"
    assert r["weight_err"] <= tol["weight"], f"{name}: weight error {r['weight_err']:.2e} (worst: {r['worst_on_rank0']})"
    assert r["update_err"] <= tol["update"], f"{name}: update error {r['update_err']:.2e}"

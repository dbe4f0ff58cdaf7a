"""What a layout's result from `equivalence_worker.py` must meet (tolerances and why: test_equivalence.py)."""

from __future__ import annotations

LOSS_RTOL = 1e-6
GRAD_RTOL = 1e-5
WEIGHT_RTOL = 1e-5
UPDATE_RTOL = 1e-3


def assert_matches_reference(r: dict | None, launch_tail: str) -> None:
    """One case's result against the single-process reference (None: the case did not run)."""
    assert r is not None, f"did not run:\n{launch_tail}"
    name = r.get("name", "?")
    assert "error" not in r, f"{name}: {r.get('error')}"
    assert r["covered"] == r["ref_numel"], f"{name}: compared {r['covered']} of {r['ref_numel']} parameters"
    assert r["init_err"] == 0.0, f"{name}: initial weights differ from the reference: {r['init_err']:.2e}"
    assert r["loss_err"] <= LOSS_RTOL, f"{name}: losses {r['losses']} vs reference {r['ref_losses']}"
    assert r["grad_err"] <= GRAD_RTOL, f"{name}: gradient error {r['grad_err']:.2e} (worst: {r['worst_on_rank0']})"
    assert r["weight_err"] <= WEIGHT_RTOL, f"{name}: weight error {r['weight_err']:.2e} (worst: {r['worst_on_rank0']})"
    assert r["update_err"] <= UPDATE_RTOL, f"{name}: update error {r['update_err']:.2e}"

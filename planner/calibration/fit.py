"""Fits of the cost model's hardware parameters to `executor.calibrate` measurements (numpy only).

Both fits are linear least squares in the model's own form, weighted so every point counts by its
*relative* error (a 40 us GEMM matters as much as a 40 ms one):

  GEMM   time = (F + half_flops) / R        (planner.cost.efficiency: R = peak * max_fraction)
         = a + b F with b = 1/R, a = half_flops/R, so R = 1/b and half_flops = a/b.
  link   time = latency + factor(kind, n) * S / busbw     (planner.topology.estimate)
         = a + b S with a = latency, busbw = factor/b.

Both intercept and slope are physical and must be >= 0: a negative one (noise on a nearly flat or nearly
proportional set) is clamped to 0 and the other refitted alone (a two-variable non-negative least squares).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.topology.estimate import bytes_factor


@dataclass(frozen=True)
class Affine:
    """time = intercept + slope * x, and the fit's root-mean-square relative error."""

    intercept: float
    slope: float
    rms_rel_error: float


def fit_affine(x: np.ndarray | list[float], t: np.ndarray | list[float]) -> Affine:
    """Non-negative (intercept, slope) minimising sum(((a + b x - t) / t)^2)."""
    x, t = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    if len(x) == 0 or len(x) != len(t) or np.any(t <= 0) or np.any(x < 0):
        raise ValueError("fit_affine needs equal-length x >= 0 and t > 0 (at least one point)")
    w = 1.0 / t
    A = np.stack([w, x * w], axis=1)  # rows (1/t, x/t): residual (a + b x)/t - 1
    y = np.ones_like(t)
    if len(x) >= 2 and np.ptp(x) > 0:
        (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    else:
        a, b = -1.0, -1.0
    if not (a >= 0 and b >= 0):
        # One of the two is 0: keep the better of "proportional" (a = 0) and "constant" (b = 0).
        b_only = float(A[:, 1] @ y / (A[:, 1] @ A[:, 1])) if np.any(x > 0) else 0.0
        a_only = float(A[:, 0] @ y / (A[:, 0] @ A[:, 0]))
        err_b = np.sum((A[:, 1] * b_only - y) ** 2)
        err_a = np.sum((A[:, 0] * a_only - y) ** 2)
        a, b = (0.0, b_only) if err_b <= err_a else (a_only, 0.0)
    rel = (a + b * x - t) / t
    return Affine(float(a), float(b), float(np.sqrt(np.mean(rel**2))))


@dataclass(frozen=True)
class GemmFit:
    """Achieved GEMM rate curve: time(F) = (F + half_flops) / rate_flops."""

    rate_flops: float
    half_flops: float
    rms_rel_error: float
    points: int


def fit_gemm(flops: list[float], times_s: list[float]) -> GemmFit:
    """Plateau rate R (FLOP/s) and half-rate size (FLOP) of the efficiency curve from (F, seconds) pairs."""
    fit = fit_affine(flops, times_s)
    if fit.slope <= 0:
        raise ValueError("GEMM times do not grow with FLOPs: the measurement is too noisy to fit; rerun calibrate")
    return GemmFit(1.0 / fit.slope, fit.intercept / fit.slope, fit.rms_rel_error, len(flops))


def fit_gemm_knee(flops: np.ndarray | list[float], times_s: np.ndarray | list[float], rate_flops: float) -> float:
    """half_flops minimising the relative error of (F + h) / rate against the times, the plateau rate held fixed.

    For a GPU whose plateau comes from a separate measurement (a MAMF sweep over large shapes), only the knee is
    fitted to per-size timings. The closed form: minimising sum(((F + h) / (R t) - 1)^2) over h gives
    h = sum(x (1 - F x)) / sum(x^2) with x = 1 / (R t)."""
    x = 1.0 / (float(rate_flops) * np.asarray(times_s, dtype=float))
    return float(np.sum(x * (1.0 - np.asarray(flops, dtype=float) * x)) / np.sum(x * x))


@dataclass(frozen=True)
class CollectiveFit:
    """One (kind, group size): time(S) = latency_s + bytes_factor(kind, n) * S / bus_bandwidth_Bps."""

    kind: str
    group_size: int
    latency_s: float
    bus_bandwidth_Bps: float
    rms_rel_error: float
    points: int

    def time_s(self, message_bytes: float) -> float:
        return self.latency_s + bytes_factor(self.kind, self.group_size) * message_bytes / self.bus_bandwidth_Bps


def fit_collective(kind: str, group_size: int, message_bytes: list[float], times_s: list[float]) -> CollectiveFit:
    """Latency and bus bandwidth of one collective kind over groups of `group_size` from (S, seconds) pairs."""
    fit = fit_affine(message_bytes, times_s)
    if fit.slope <= 0:
        # Time does not grow with size over the range measured: bandwidth beyond what the sizes resolve.
        # Take the largest message's time as all latency and bound the bandwidth by that message moving in it.
        big = int(np.argmax(message_bytes))
        slope = float(times_s[big]) / float(message_bytes[big]) * 1e-3
        return CollectiveFit(kind, group_size, fit.intercept, bytes_factor(kind, group_size) / slope,
                             fit.rms_rel_error, len(times_s))
    return CollectiveFit(kind, group_size, fit.intercept, bytes_factor(kind, group_size) / fit.slope,
                         fit.rms_rel_error, len(times_s))


def fit_collectives(points: list[dict]) -> list[CollectiveFit]:
    """One fit per (kind, group size) of `executor.calibrate`'s collective points."""
    keys = sorted({(p["kind"], int(p["group_size"])) for p in points})
    fits = []
    for kind, n in keys:
        sel = [p for p in points if p["kind"] == kind and int(p["group_size"]) == n]
        fits.append(fit_collective(kind, n, [p["bytes"] for p in sel], [p["time_s"] for p in sel]))
    return fits

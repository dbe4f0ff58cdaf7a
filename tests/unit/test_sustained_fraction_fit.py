"""The H100-family sustained fraction is benchmarks/fit_layer_overhead.py's shape-corrected fit of the H200 layer."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import hardware_profiles

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
DATA = ROOT / "benchmarks" / "data"


def test_profiles_hold_the_shape_corrected_fit():
    import fit_layer_overhead

    plain, corrected = fit_layer_overhead.fit_measured(str(DATA / "h200_sustained_layer.json"),
                                                       str(DATA / "h200_kernels.json"))
    # The layer's own GEMMs run faster than the GEMM curve there, so the uncorrected fit over-credits every step.
    assert corrected < plain - 0.02
    for name in ("h200", "h100-sxm", "h100-sxm-96gb", "h800"):
        assert hardware_profiles.gpu(name).sustained_fraction == pytest.approx(corrected, abs=0.002)


def test_correction_is_void_where_the_curves_match_the_layer(tmp_path):
    import fit_layer_overhead

    measured = json.loads((DATA / "h200_sustained_layer.json").read_text())
    _, _, gemm, attention = fit_layer_overhead.shard_parts_s("hgx-h200", 1.0)
    measured["isolated_gemm_s"] = {"qkv": gemm / 3, "proj": 0.0, "fc1": 0.0, "fc2": 0.0}
    kernels = {"attention": [{"batch": 4, "heads": 8, "seq": 2048, "head_dim": 96, "forward_backward_s": attention}]}
    (tmp_path / "layer.json").write_text(json.dumps(measured))
    (tmp_path / "kernels.json").write_text(json.dumps(kernels))
    plain, corrected = fit_layer_overhead.fit_measured(str(tmp_path / "layer.json"), str(tmp_path / "kernels.json"))
    assert corrected == pytest.approx(plain, rel=1e-6)


def test_the_a100_constant_is_the_korthikanti_table_4_fit():
    """SUSTAINED_FRACTION_OF_ISOLATED (the A100 value and the default of profiles without one) is what
    fit_layer_overhead.py fits to Korthikanti et al. 2022 Table 4 with the committed A100 kernel curve."""
    import fit_layer_overhead

    from planner.cost.efficiency import SUSTAINED_FRACTION_OF_ISOLATED

    fitted = fit_layer_overhead.fit_table_4()
    assert fitted == pytest.approx(SUSTAINED_FRACTION_OF_ISOLATED, abs=0.0015)

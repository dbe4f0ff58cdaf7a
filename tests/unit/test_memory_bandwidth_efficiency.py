"""The GPU profile's `memory_bandwidth_efficiency`: validated, applied once in the cost context to every
memory-bound term, and never applied to a calibrated profile, whose bandwidth is already a measured copy rate."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

import hardware_profiles as hp
from planner.api import make_context
from planner.calibration.profile import fit_all, gpu_profile_data
from planner.cost import compute, fixed_costs
from planner.layout import Workload
from planner.model import preset
from tests.unit.test_calibration import COPY_BPS, synthetic_raw

# (profile, copy rate in bytes/s the source quotes, datasheet bytes/s); see each profile's source string.
PUBLISHED_COPY = {
    "h100-sxm": (2.90e12, 3.35e12),
    "h800": (2.90e12, 3.35e12),  # the H100 SXM measurement, same HBM3
    "h200": (4.01e12, 4.8e12),
    "a100-80gb": ((1.61e12 + 1.709e12) / 2, 2.039e12),
    "a100-40gb": (1.3946e12, 1.555e12),
}


def _with_efficiency(cluster, value):
    """`cluster` with every GPU profile's efficiency replaced by `value` (None: unset)."""
    gpus = {k: g.model_copy(update={"memory_bandwidth_efficiency": value}) for k, g in cluster.gpus.items()}
    return cluster.model_copy(update={"gpus": gpus})


def _write(tmp_path, data) -> str:
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("name", sorted(PUBLISHED_COPY))
def test_profiles_hold_the_published_copy_rate_over_the_datasheet(name):
    copy, sheet = PUBLISHED_COPY[name]
    gpu = hp.gpu(name)
    assert gpu.memory_bandwidth_Bps == pytest.approx(sheet)
    assert gpu.memory_bandwidth_efficiency == pytest.approx(copy / sheet, abs=0.0015)
    assert "BabelStream" in gpu.sources["memory_bandwidth_efficiency"]


@pytest.mark.parametrize("name", ["h100-pcie", "h100-sxm-96gb", "b200", "gb200", "mi300x", "l40s", "cpu"])
def test_profiles_without_a_published_measurement_keep_the_datasheet(name):
    assert hp.gpu(name).memory_bandwidth_efficiency is None


def test_efficiency_is_validated_and_needs_a_source(tmp_path):
    data = yaml.safe_load((hp.DATA_DIR / "gpus" / "h100-sxm.yaml").read_text())
    for bad in (0.0, 1.2):
        data["memory_bandwidth_efficiency"] = bad
        with pytest.raises(hp.ProfileError, match="memory_bandwidth_efficiency"):
            hp.gpu(_write(tmp_path, data))
    data["memory_bandwidth_efficiency"] = 0.9
    del data["sources"]["memory_bandwidth_efficiency"]
    with pytest.raises(hp.ProfileError, match="no source for memory_bandwidth_efficiency"):
        hp.gpu(_write(tmp_path, data))


def test_every_memory_bound_term_sees_the_achievable_bandwidth_and_gemms_do_not():
    """The context's bandwidth is datasheet x efficiency, and the terms that divide bytes by it (loss, embedding,
    optimizer) scale by exactly 1 / efficiency, while GEMM-only terms stay put."""
    model, workload = preset("llama3-8b"), Workload(global_batch=8, seq_len=4096)
    base = hp.cluster("dgx-h100", gpus=8)
    peak = make_context(model, _with_efficiency(base, None), workload)
    real = make_context(model, _with_efficiency(base, 0.8), workload)
    assert peak.memory_bandwidth_Bps == pytest.approx(3.35e12)
    assert real.memory_bandwidth_Bps == pytest.approx(0.8 * 3.35e12)
    tokens, tp = np.array([4096]), np.array([1])
    assert compute.embedding_time_s(real, tokens, tp)[0] == pytest.approx(compute.embedding_time_s(peak, tokens, tp)[0] / 0.8)
    _, ce_f_real, ce_b_real = compute._head_parts_s(real, tokens, tp)
    gemm, ce_f_peak, ce_b_peak = compute._head_parts_s(peak, tokens, tp)
    assert ce_f_real[0] == pytest.approx(ce_f_peak[0] / 0.8) and ce_b_real[0] == pytest.approx(ce_b_peak[0] / 0.8)
    assert compute._head_parts_s(real, tokens, tp)[0][0] == pytest.approx(gemm[0])
    params = np.array([1e9])
    assert fixed_costs.fsdp_copy_s(peak, params, 1)[0] > 0  # the default runtime (eager FSDP2) copies
    assert fixed_costs.fsdp_copy_s(real, params, 1)[0] == pytest.approx(fixed_costs.fsdp_copy_s(peak, params, 1)[0] / 0.8)
    # The committed H100 profile carries its sourced value.
    assert make_context(model, base, workload).memory_bandwidth_Bps == pytest.approx(0.866 * 3.35e12)


def test_calibrated_gpu_profile_is_not_counted_twice():
    """A calibrated profile of a GPU whose built-in profile has an efficiency stores the measured copy rate and no
    efficiency, so the cost model uses the measured rate as it is."""
    raw = dict(synthetic_raw(), device="cuda", device_name="NVIDIA H100 80GB HBM3", backend="nccl", host_copy_Bps=5.0e10)
    assert hp.gpu("h100-sxm").memory_bandwidth_efficiency is not None  # the datasheet profile calibrate starts from
    data = gpu_profile_data(raw, fit_all(raw), "calibrated-cuda")
    assert "memory_bandwidth_efficiency" not in data
    assert data["memory_bandwidth_Bps"] == pytest.approx(COPY_BPS, rel=1e-3)
    gpu = hp.GPUProfile.model_validate(data)
    base = hp.cluster("dgx-h100", gpus=8)
    cluster = base.model_copy(update={"gpus": {k: gpu for k in base.gpus}})
    ctx = make_context(preset("llama3-8b"), cluster, Workload(global_batch=8, seq_len=4096))
    assert ctx.memory_bandwidth_Bps == pytest.approx(COPY_BPS, rel=1e-3)


def test_json_schema_of_gpu_profiles_documents_the_field():
    prop = hp.GPUProfile.model_json_schema()["properties"]["memory_bandwidth_efficiency"]
    bounds = next(branch for branch in prop["anyOf"] if branch.get("type") == "number")
    assert bounds["exclusiveMinimum"] == 0 and bounds["maximum"] == 1
    assert "copy" in prop["description"] and prop["default"] is None

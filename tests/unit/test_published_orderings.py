"""The planner's ranking of layouts against the orderings Narayanan et al. 2021 measured side by side (Sec. 5.3-5.6).

Every entry of benchmarks/data/published_orderings.yaml is predicted (benchmarks/published_orderings.py) and its
verdict compared with where the model stands: each ordering kept, except Figure 17's claim that a 145B model at
(t, p) = (8, 16) needs activation recomputation at large batches, which the memory model does not reproduce (it
puts the 1F1B stage at 70.7 of 80 GiB without recomputation). A cost-model change that breaks a measured ordering,
or that starts to keep Figure 17's, fails here and is looked at.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import published_orderings  # noqa: E402
from published_orderings import Orderings, check, load_orderings  # noqa: E402

NOT_KEPT = {
    # The model fits the layout without recomputation (Korthikanti et al. 2022's activation formula, 16 micro-batches
    # in flight under 1F1B); the paper ran out of memory at large batches without it.
    "narayanan2021_fig17_recompute_needed",
}


@pytest.mark.parametrize("entry", load_orderings().orderings, ids=lambda e: e.id)
def test_measured_orderings_are_kept_by_the_predictions(entry) -> None:
    result = check(entry)
    assert result["holds"] == (entry.id not in NOT_KEPT), (entry.id, result["margin"], result["times"])
    assert all(t is None or t > 0 for t in result["times"].values())


def test_each_ordering_names_its_source_model_and_a_quote() -> None:
    data = load_orderings()
    assert {e.claim for e in data.orderings} == {"fastest_first", "slower_along", "gain_shrinks", "needs_recompute"}
    for entry in data.orderings:
        assert entry.source in data.sources and entry.model in data.models and entry.quote
        assert len({tuple(sorted(layout.items())) for layout in entry.layouts}) == len(entry.layouts)


def test_a_malformed_ordering_is_refused_with_its_field(tmp_path: Path) -> None:
    raw = yaml.safe_load(published_orderings.DATA.read_text())
    raw["orderings"][0]["claim"] = "fastest_last"
    bad = tmp_path / "orderings.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(Exception, match="claim"):
        Orderings.model_validate(yaml.safe_load(bad.read_text()))
    raw["orderings"][0]["claim"] = "gain_shrinks"  # needs `batches`
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="batches"):
        load_orderings.__wrapped__(bad)


def test_the_benchmark_prints_every_verdict(capsys) -> None:
    assert published_orderings.main([]) == 0
    out = capsys.readouterr().out
    total = len(load_orderings().orderings)
    assert f"orderings kept: {total - len(NOT_KEPT)} of {total}" in out
    assert published_orderings.main(["--ids", "no-such-ordering"]) == 2

"""Packaging: pyproject.toml gives setuptools nothing to warn about on every install.

`license = { text = ... }` made setuptools print a deprecation notice (four times per `bash .ci/install`);
the SPDX string needs setuptools >= 77, which the build system requires. `.ci/install` keeps pip's output in
a log shown only on failure.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_license_is_an_spdx_string_setuptools_accepts_silently() -> None:
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message).splitlines()[0] for w in caught] == []
    assert dist.metadata.license_expression == "Apache-2.0"
    requires = re.search(r"^requires = (.*)$", (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert requires and '"setuptools>=77"' in requires.group(1)  # the first setuptools reading SPDX strings


def test_ci_install_is_quiet_unless_it_fails() -> None:
    script = (ROOT / ".ci" / "install").read_text()
    pip_lines = [ln for ln in script.splitlines() if "pip install" in ln]
    assert pip_lines and all(ln.strip().startswith("quietly ") for ln in pip_lines), pip_lines

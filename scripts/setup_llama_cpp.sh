#!/usr/bin/env bash
# Build llama-cpp-python (the `llama-cpp` extra: `--engine llama-cpp`) into .venv from source, for this machine:
# the CUDA build where `nvidia-smi -L` lists a GPU, else the CPU build with the host's native flags (AVX-512,
# avx512_bf16, ... as the compiler finds them). PyPI serves llama-cpp-python as source only: the build takes
# ~10 min on 2 idle cores, and pip caches the wheel it built, so a second setup (CI's next run) takes seconds.
# The cached wheel is keyed by the source, not by CMAKE_ARGS: after moving .venv's cache to another CPU model,
# `pip cache remove llama_cpp_python` first. Set CMAKE_ARGS yourself to override the choice below.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
if [ -z "${CMAKE_ARGS:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    export CMAKE_ARGS="-DGGML_CUDA=ON"
  else
    export CMAKE_ARGS="-DGGML_NATIVE=ON"
  fi
fi
if python -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '0.3.36')" 2>/dev/null; then
  echo "llama-cpp-python $(python -c 'import llama_cpp; print(llama_cpp.__version__)') already installed"
  exit 0
fi
echo "building llama-cpp-python with CMAKE_ARGS=$CMAKE_ARGS (about 10 min the first time; pip caches the wheel)"
pip install -q -e ".[llama-cpp]"
python -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'ready')"

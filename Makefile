# The README's two commands: `make run` (sets up on demand, then runs the embedded default) and `make test`.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.specbench-setup

.PHONY: setup run test bench clean

$(STAMP): pyproject.toml scripts/setup.sh
	scripts/setup.sh
	touch $(STAMP)

setup: $(STAMP)

# The embedded default: SmolLM2-135M-Instruct with the fastest draft measured on it (prompt lookup,
# the shipped distilled draft where lookup has no match) at its best γ, greedy, on one offline
# translation and one offline summarization task.
DEFAULT_JOB := --draft lookup+distilled --gamma 2 --limit 8
run: $(STAMP)
	$(BIN)/specbench run --task ding-de-en $(DEFAULT_JOB)
	$(BIN)/specbench run --task aclsum $(DEFAULT_JOB)

$(VENV)/.specbench-packages: pyproject.toml scripts/setup.sh
	scripts/setup.sh --no-assets
	touch $@

test: $(VENV)/.specbench-packages
	$(BIN)/python -m pytest -q

# Our engines against HF's on the shipped draft pair, under the default eager backend (like for like
# with HF) and under the compiled one (static cache + torch.compile, which HF's generate() does not
# use on a CPU); each prints the four figures beside their goals.
bench: $(STAMP)
	$(BIN)/python bench/bench.py --backend eager
	$(BIN)/python bench/bench.py --backend compiled

clean:
	rm -rf $(VENV) reports

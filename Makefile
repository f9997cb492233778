# The README's two commands: `make run` (sets up on demand, then runs the embedded default) and `make test`.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.specbench-setup

.PHONY: setup run test bench clean

$(STAMP): pyproject.toml scripts/setup.sh
	scripts/setup.sh
	touch $(STAMP)

setup: $(STAMP)

# The embedded default: SmolLM2-135M-Instruct with the prompt-lookup draft, greedy, on one offline
# translation and one offline summarization task.
run: $(STAMP)
	$(BIN)/specbench run --task ding-de-en --limit 8
	$(BIN)/specbench run --task aclsum --limit 8

$(VENV)/.specbench-packages: pyproject.toml scripts/setup.sh
	scripts/setup.sh --no-assets
	touch $@

test: $(VENV)/.specbench-packages
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/bench.py

clean:
	rm -rf $(VENV) reports

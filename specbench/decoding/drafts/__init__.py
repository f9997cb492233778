"""Draft kinds: one module each. `make_proposer` (specbench.models) picks one from a --draft spec."""

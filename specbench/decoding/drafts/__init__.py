"""Draft kinds: one module each. `specbench.run_specs.parse_draft` reads a --draft value; `factory.make_proposer`
builds its draft."""

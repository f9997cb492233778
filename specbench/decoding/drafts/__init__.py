"""Draft kinds: one module each. `spec.parse_draft` reads a --draft value; `factory.make_proposer` builds its draft."""

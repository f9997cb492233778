"""Measuring the machine a benchmark runs on: who it is, what one pass costs, how noisy it is, and the
choices (γ, draft, dtype) that follow from those measurements rather than from another machine's."""

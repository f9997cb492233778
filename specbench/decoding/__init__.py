"""Decoding engines: the autoregressive baseline and speculative decoding, over one KV-cached model API, with
the timers they measure themselves with (timing.py) and the analytical model their γ policies use (theory.py).
Imports nothing from measure, evidence, report or cli (tests/test_layers.py)."""

"""Decoding engines: the autoregressive baseline and speculative decoding, over one KV-cached model API."""

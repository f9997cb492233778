"""Evidence that speculative decoding kept the target's output: exact laws, statistical tests, and
the numerics classifier that tells a low-precision near-tie from a bug."""

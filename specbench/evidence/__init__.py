"""Evidence that speculative decoding kept the target's output: exact laws and statistical tests, on the laws
themselves, on real models (`specbench verify`) and on what runs recorded (the numerics classifier's classes and
the outputs' NLL, both taken by the runner: measure/stats/numerics.py, measure/stats/nll.py)."""

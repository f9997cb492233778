"""specbench: measure speculative decoding honestly (Leviathan, Kalman & Matias, ICML 2023)."""

__version__ = "0.1.0"

"""`python -m specbench.cli`: the same app as the `specbench` script (benchmarks spawn it this way)."""

from specbench.cli import main

main()

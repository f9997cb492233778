"""Tasks: what to decode and how to score it. A task is data (a YAML file validated into a TaskSpec,
`specs`), turned into seeded, hashed Examples (`examples`); rows come from a source (`sources`: the
registry of kinds, with the hub and local-file kinds; `offline`, `spec_bench` and `speed_bench` register theirs),
each row known by its example id (`rows`: the id, and the check that no two rows share one), and outputs are scored
by `quality`. The tasks that ship with specbench are package data under `builtin/`."""

# these register their source kinds in sources.SOURCES, in this order (error messages list them so)
from specbench.tasks import offline, spec_bench, speed_bench  # noqa: F401

"""Tasks: what to decode and how to score it. A task is data (a YAML file validated into a TaskSpec,
`specs`), examples come from a source (hub, local file, offline package: `sources`), and outputs are
scored by `quality`. The tasks that ship with specbench are package data under `builtin/`."""

from specbench.tasks import spec_bench  # noqa: F401  (registers the spec-bench source kind in sources.SOURCES)

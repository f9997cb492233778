"""specbench: measure speculative decoding honestly (Leviathan, Kalman & Matias, ICML 2023).

The Python entry points are two loaders, imported lazily so that `import specbench` (and `specbench --help`)
stays cheap: neither torch nor pandas loads until one is called.

    import specbench
    runs = specbench.load_runs("results")          # one row per run: the columns `specbench export` writes
    examples = specbench.load_examples("results")  # one row per example

What each column means: the results schema, shipped as specbench/measure/results/results.md (docs/results.md).
"""

from __future__ import annotations

from os import PathLike

__version__ = "0.1.0"
__all__ = ["load_examples", "load_runs"]


def load_runs(path: str | PathLike | list[str | PathLike]):
    """Every run under `path` (a run folder, a sweep folder or a results folder; or a list of them) as a pandas
    DataFrame, one row per run with the axes (task, target, draft, γ, dtype, the device that ran, …) and the
    measurements (speedup and its interval, α, acceptance rate, mean acceptance length, tokens/s, TTFT, TPOT):
    the table `specbench export` writes. A folder or file that cannot be used is a warning, not an error."""
    return _frame(path, examples=False)


def load_examples(path: str | PathLike | list[str | PathLike]):
    """As load_runs, one row per example: its run's identity and axes, both engines' counts and seconds, and the
    example's own speedup."""
    return _frame(path, examples=True)


def _frame(path, examples: bool):
    import warnings
    from pathlib import Path

    from specbench.measure.results.tidy_table import export_frames

    paths = [Path(p) for p in (path if isinstance(path, (list, tuple)) else [path])]
    frame, notes = export_frames(paths, examples=examples)
    for note in notes:
        warnings.warn(f"skipped {note}", stacklevel=3)
    return frame

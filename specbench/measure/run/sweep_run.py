"""Run a sweep's cells into one resumable sweep folder: the cells' names, the folder's sweep.json, and the loop.

The grid (what to measure) is measure/run/sweep.py; this module is how it is measured, kept apart so
that each stays readable. A sweep is many `execute_run` calls that share what may be shared and
nothing else:
  - one `Session` per target (models load once, lazily: a finished sweep reruns without loading any;
    cells are grouped by target, and a target's session is freed before the next one loads);
  - no decode state: execute_run builds fresh caches and a generator per example;
  - no timing: each cell times its own baseline beside the speculative engine, A B B A on its own examples,
    exactly as `specbench run` does (issue 26 item 7). Sweeps before that shared one baseline per task
    and sampling setting (baselines/*.jsonl, re-timed before each cell as a drift probe); their folders
    stay readable, and their sweep.json keeps "baselines", the list of those files.

Layout of `results/<sweep-id>/`:
  sweep.json                    the grid, its cells and task hashes (atomically written)
  <cell-id>/                    an ordinary run folder (manifest.json, examples.jsonl, summary.json)

The sweep id is a hash of the grid, so rerunning the same command finds the same folder and
skips finished cells and examples (a killed sweep loses nothing already measured).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specbench.config import (
    RunConfig,
    batch_suffix,
    check_batch_size,
    check_gamma_budget,
    check_id,
    check_results_dir,
    load_suffix,
    prompt_length_suffix,
)
from specbench.engines import runtime, same_session
from specbench.errors import SpecbenchError
from specbench.files import atomic_write_json
from specbench.measure.results.record_checks import example_problem
from specbench.measure.results.record_writing import prepare_run_dir
from specbench.measure.results.records import read_json_object, scan_jsonl
from specbench.measure.results.schema import SCHEMA_VERSION
from specbench.measure.run.sweep import MAX_CELLS, SweepGrid
from specbench.run_specs import parse_gamma

SWEEP_FILE = "sweep.json"
LARGE_SWEEP_CELLS = 200  # above this many cells a sweep says what it is about to cost before it starts
# A stated rough constant, not a measurement of this machine: SmolLM2-135M decodes a token in about 43 ms in float32
# on a 2-core AMD EPYC (docs/benchmarks.md); rounded up to 50 ms for the speculative engine's drafting.
ESTIMATE_S_PER_TOKEN = 0.05


def _digest(obj, n: int = 8) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "x"


def short_names(values: tuple[str, ...]) -> dict[str, str]:
    """Readable, unique folder-name parts: a path's stem or a hub id's last part, plus a hash on a clash."""
    stems = {
        v: _slug(Path(v).stem if Path(v).suffix in (".jsonl", ".yaml", ".yml", ".gguf") else Path(v).name)
        for v in values
    }
    clashes = {s for s in stems.values() if list(stems.values()).count(s) > 1}
    return {v: f"{s}-{_digest(v, 6)}" if s in clashes else s for v, s in stems.items()}


def sweep_id_for(grid: SweepGrid) -> str:
    """Deterministic from the grid (the axes are sorted), so a rerun of the same command resumes the same folder."""
    tasks = "+".join(short_names(grid.tasks).values())[:40]
    return _slug(f"sweep-{tasks}-{len(grid.configs())}cells-{_digest(grid.to_dict())}")


def axis_parts(grid: SweepGrid, config: RunConfig) -> tuple[str, str]:
    """(prefix, suffix) a cell's id gains from the newer axes: the target's short name first when
    the grid has several, '-n<budget>' when the budget is an axis, '-p<bucket>' for a prompt-length bucket.
    Grids without these axes get ('', ''), so their ids and file names stay as they always were."""
    prefix = f"{short_names(grid.targets)[config.load.target]}-" if len(grid.targets) > 1 else ""
    budget = f"-n{config.max_new_tokens}" if len(grid.budgets) > 1 and config.max_new_tokens else ""
    engine = f"-e{config.engine}" if len(grid.engines) > 1 else ""  # the engine axis: its own cells
    return prefix, budget + prompt_length_suffix(config) + engine


def cell_ids(grid: SweepGrid) -> list[tuple[str, RunConfig]]:
    """(cell id, config) per cell: [target-]task-draft-gγ-tT[-n<budget>][-p<bucket>]; top-k/top-p/seed are shared by
    the sweep, not in the id."""
    tasks, drafts = short_names(grid.tasks), short_names(grid.all_drafts)
    cells = []
    for c in grid.configs():
        prefix, suffix = axis_parts(grid, c)
        cells.append(
            (
                _slug(
                    f"{prefix}{tasks[c.task]}-{drafts[c.draft.text]}-g{c.gamma}-t{c.sampling.temperature:g}"
                    + (f"-conf{c.draft_confidence:g}" if c.draft_confidence else "")
                    + batch_suffix(c)
                    + load_suffix(c)
                    + suffix
                ),
                c,
            )
        )
    return cells


# --------------------------------------------------------------------------- running


@dataclass
class CellOutcome:
    cell_id: str
    config: RunConfig
    summary: dict
    new_examples: int  # measured by this call (0 for a cell finished earlier)


@dataclass
class SweepOutcome:
    root: Path
    cells: list[CellOutcome] = field(default_factory=list)

    @property
    def new_examples(self) -> int:
        return sum(c.new_examples for c in self.cells)


def _task_info(grid: SweepGrid) -> dict:
    """n examples and their hash per task, computed before any model loads (bad tasks fail fast);
    every integer γ of the grid is checked against each task's token budget here too (a budget axis
    skips instead: SweepGrid.over_budget)."""
    from specbench.tasks.examples import examples_hash, select_examples
    from specbench.tasks.specs import load_task

    info = {}
    for task in grid.tasks:
        spec = load_task(task)
        examples = select_examples(spec, grid.limit, grid.seed)
        for gamma in grid.gammas:
            for budget in grid.budgets:
                if not grid.over_budget(gamma, budget):
                    check_gamma_budget(parse_gamma(gamma), budget or spec.max_new_tokens)
        for batch_size in grid.batch_sizes:
            check_batch_size(batch_size, len(examples))
        info[task] = {"n_examples": len(examples), "examples_hash": examples_hash(examples)}
    return info


def bucket_key(config: RunConfig) -> str:
    return f"{config.load.target}|{config.task}|{config.prompt_length}"


def _bucket_info(grid: SweepGrid) -> dict:
    """n examples, their hash and the bucket's record per (target, task, prompt-length bucket), from the target's
    tokenizer alone (no weights): {} when the grid has no buckets, so sweep.json stays as before buckets."""
    from specbench.measure.run.planning import select_run_examples
    from specbench.tasks.examples import examples_hash
    from specbench.tasks.specs import load_task

    info = {}
    for cfg in grid.configs():
        key = bucket_key(cfg)
        if cfg.prompt_length == "all" or key in info:
            continue
        examples, bucket = select_run_examples(load_task(cfg.task), cfg)
        for batch_size in grid.batch_sizes:
            check_batch_size(batch_size, len(examples))
        info[key] = {
            "n_examples": len(examples),
            "examples_hash": examples_hash(examples),
            **(bucket.to_dict() if bucket is not None else {}),  # a bucket: prompt_length is not "all"
        }
    return info


def cell_examples(tasks: dict, buckets: dict, config: RunConfig) -> int:
    """How many examples a cell measures: its task's, or its prompt-length bucket's."""
    return (tasks[config.task] if config.prompt_length == "all" else buckets[bucket_key(config)])["n_examples"]


def records_cover(path: Path, example_ids: list[str] | None, n_examples: int) -> bool:
    """Whether examples.jsonl ends on a whole line and holds a record for every example of the cell.

    The summary alone is not proof: a torn or lost last line after it was written (a kill, a
    full disk, a copy cut short) must send the cell back to the runner, which repairs the file
    and measures what is missing."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data and not data.endswith(b"\n"):
        return False
    rows, _ = scan_jsonl(path, example_problem)  # a wrong-shape line is no finished example
    ids = {str(row["example_id"]) for row in rows}
    return {str(i) for i in example_ids} <= ids if example_ids is not None else len(ids) >= n_examples


def _cell_done(run_dir: Path, config: RunConfig, n_examples: int) -> dict | None:
    """The summary of a finished cell (same config, every example on disk as a whole record), else None."""
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not (isinstance(manifest, dict) and isinstance(summary, dict)):
        return None
    if manifest.get("config") != config.to_dict() or not summary.get("complete"):
        return None
    if summary.get("n_examples") != n_examples:
        return None
    raw = manifest.get("task")
    task = raw if isinstance(raw, dict) else {}
    expected = task.get("example_ids") if isinstance(task.get("example_ids"), list) else None
    return summary if records_cover(run_dir / "examples.jsonl", expected, n_examples) else None


def write_sweep_file(
    root: Path,
    sweep_id: str,
    grid: SweepGrid,
    cells: list[tuple[str, RunConfig]],
    tasks: dict,
    complete: list[str] | None = None,
    buckets: dict | None = None,
) -> dict:
    """Create sweep.json, or check that an existing one describes the same grid and examples."""
    path = root / SWEEP_FILE
    doc = {
        "schema_version": SCHEMA_VERSION,
        "sweep_id": sweep_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "grid": grid.to_dict(),
        "tasks": tasks,
        **({"prompt_length": buckets} if buckets else {}),  # per target|task|bucket: n, hash, thresholds
        "cells": [{"cell_id": cid, "config": cfg.to_dict()} for cid, cfg in cells],
        "baselines_per_cell": True,  # each cell times its own baseline, A B B A (older sweeps: "baselines")
        "complete_cells": sorted(complete or []),
    }
    if path.exists():
        # unreadable or not an object: a torn file cannot happen with atomic writes, but a hand edit can: rewrite it
        old, _ = read_json_object(path, SWEEP_FILE)
        if old is not None:
            if old.get("grid") != doc["grid"]:
                raise SpecbenchError(f"{root} holds a sweep of a different grid; use another --sweep-id or delete it")
            if old.get("tasks") != tasks:
                raise SpecbenchError(
                    f"{root} holds a sweep on different examples (the task data changed); "
                    f"use another --sweep-id or delete it"
                )
            if old.get("prompt_length") != doc.get("prompt_length"):
                raise SpecbenchError(
                    f"{root} holds a sweep whose prompt-length buckets hold other examples (the task "
                    f"data or tokenizer changed); use another --sweep-id or delete it"
                )
            doc["created"] = old.get("created", doc["created"])
            if isinstance(old.get("baselines"), list):  # begun with shared baselines: its earlier cells used them
                doc["baselines"] = old["baselines"]
                del doc["baselines_per_cell"]
            if complete is None:
                doc["complete_cells"] = old.get("complete_cells", [])
    atomic_write_json(path, doc)
    return doc


def cost_line(n_cells: int, n_examples: int, repeats: int, tokens: int) -> str:
    """The one line a large sweep prints before it starts: its cells, examples, timed decodes and a rough time.

    tokens: the token budget summed over every (cell, example); each example decodes it once per engine and
    repeat (a cell times its own baseline beside the speculative engine, A B B A, as `run` does)."""
    seconds = 2 * repeats * tokens * ESTIMATE_S_PER_TOKEN
    time = f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
    return (
        f"{n_cells} cells, {n_examples} examples, {2 * repeats * n_examples} timed decodes (baseline and "
        f"speculative, {repeats} repeat(s) each); a rough estimate at {1000 * ESTIMATE_S_PER_TOKEN:g} ms per "
        f"token (a small model on a 2-core CPU, not this machine): about {time}"
    )


def budget_tokens(grid: SweepGrid, cells: list[tuple[str, RunConfig]], counts: dict[str, int]) -> int:
    """Σ over cells of its examples × its new-token budget (--max-new-tokens, else its task's default)."""
    from specbench.tasks.specs import load_task

    default = {task: load_task(task).max_new_tokens for task in grid.tasks}
    return sum(counts[cid] * (cfg.max_new_tokens or default[cfg.task]) for cid, cfg in cells)


def release_memory() -> None:
    """Return a dropped session's memory before the next target loads (the GPU's cache too, where there is one)."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_sweep(
    grid: SweepGrid,
    results_dir: str | Path,
    *,
    sweep_id: str | None = None,
    session=None,
    on_plan: Callable[[int, int], None] = lambda total, n_cells: None,
    on_cell: Callable[[str, int, int], None] = lambda cell_id, total, done: None,
    on_example: Callable[[str, dict], None] = lambda cell_id, record: None,
    on_estimate: Callable[[str], None] = lambda line: None,
    executor=None,
    max_cells: int = MAX_CELLS,
) -> SweepOutcome:
    """Run every cell of the grid not finished yet; resume per example; share models, never timings.

    on_plan(total examples over all cells, cells) fires once before any model loads; on_cell
    (cell id, its examples, those already done) before each cell; on_example(cell id, record)
    after each example is on disk (an exception there stops the sweep with nothing lost). A grid of more than
    LARGE_SWEEP_CELLS cells first gives on_estimate one line (cost_line); more than max_cells are refused.
    executor: None runs the cells here, one after another; an executor from measure/executors
    (Ray) runs them on its workers and streams their records back to be written here.
    """
    from specbench.measure.run.runner import execute_run

    grid.validate(max_cells)
    results_dir = check_results_dir(results_dir)
    if sweep_id is not None:
        check_id(sweep_id, "--sweep-id")
    tasks, buckets = _task_info(grid), _bucket_info(grid)
    cells = cell_ids(grid)
    sweep_id = sweep_id or sweep_id_for(grid)
    root = prepare_run_dir(results_dir / sweep_id)
    write_sweep_file(root, sweep_id, grid, cells, tasks, buckets=buckets)
    if grid.skipped_gammas():
        warnings.warn(
            "skipped cells whose γ exceeds their --max-new-tokens (a step never drafts past the budget): "
            + ", ".join(f"γ {g} at {b}" for g, b in grid.skipped_gammas()),
            stacklevel=2,
        )
    counts = {cid: cell_examples(tasks, buckets, cfg) for cid, cfg in cells}  # cell id → examples it measures
    if len(cells) > LARGE_SWEEP_CELLS:
        on_estimate(cost_line(len(cells), sum(counts.values()), grid.repeats, budget_tokens(grid, cells, counts)))
    on_plan(sum(counts.values()), len(cells))

    outcome = SweepOutcome(root)
    if executor is not None:  # the cells run on its workers; every file of the sweep is still written here
        outcome.cells = executor.run_cells(grid, root, cells, counts, on_cell=on_cell, on_example=on_example)
    for cell_id, config in cells if executor is None else []:
        n = counts[cell_id]
        finished = _cell_done(root / cell_id, config, n)
        if finished is not None:
            on_cell(cell_id, n, n)
            outcome.cells.append(CellOutcome(cell_id, config, finished, 0))
            continue
        if session is not None and (
            getattr(session, "load", config.load).target != config.load.target
            or not same_session(session.session_kind, config)
        ):
            session = None  # cells are grouped by target: the previous one is done, free it before the next loads
            release_memory()
        if session is None:  # loaded at the first cell with work left, once per target and engine kind
            session = runtime(config.engine).open_session(config.load)
        run = execute_run(
            config,
            root,
            run_id=cell_id,
            session=session,
            on_start=functools.partial(on_cell, cell_id),
            on_example=functools.partial(on_example, cell_id),
        )
        outcome.cells.append(CellOutcome(cell_id, config, run.summary, run.new_examples))
    write_sweep_file(
        root,
        sweep_id,
        grid,
        cells,
        tasks,
        complete=[c.cell_id for c in outcome.cells if c.summary.get("complete")],
        buckets=buckets,
    )
    return outcome

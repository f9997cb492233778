"""`specbench sweep`: a grid of run configurations into one resumable sweep folder.

The grid is parsed by specbench.measure.run.sweep and run by measure.sweep_run; this command only shows progress and
the table of cells. The progress bar starts once the sweep has checked its folder and
planned its cells, so a bad --sweep-id or an unwritable folder prints its error alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from specbench.cli.load_table import load_table
from specbench.cli.options import (
    DEFAULT_TASK,
    Address,
    AsJson,
    Backend,
    CpusPerCell,
    Device,
    DeviceMap,
    Dtype,
    Engines,
    Executor,
    GammaMax,
    GpusPerCell,
    Limit,
    MaxMemory,
    Repeats,
    ResultsDir,
    Seed,
    SloTpotMs,
    TopK,
    TopP,
    TrustRemote,
)
from specbench.cli.output import (
    fmt,
    options_checked,
    out,
    phase_status,
    print_table,
    progress_bar,
    quiet_transformers,
    say,
    warn_if_noisy,
)
from specbench.config import DEFAULT_SLO_TPOT_MS, RATE_NEEDS_CONCURRENCY, check_id, check_results_dir
from specbench.engines import DEFAULT_ENGINE, engine_spec
from specbench.measure.results import Summary
from specbench.models import DEFAULT_DRAFT, DEFAULT_TARGET
from specbench.tasks.specs import check_task_named

Targets = Annotated[
    Optional[str],
    typer.Option(
        "--target",
        help=f"Target model: preset, hub id, local dir or .gguf "
        f"file (default {DEFAULT_TARGET}; for several targets use --pair).",
    ),
]
Drafts = Annotated[
    Optional[str],
    typer.Option(
        "--draft",
        help=f"Drafts, comma-separated (e.g. prompt-lookup,<model>; "
        f"a draft's own options stay with it: prompt-lookup:rule=hf,"
        f"max_ngram=2,distilled; default {DEFAULT_DRAFT}).",
    ),
]
Pairs = Annotated[
    Optional[list[str]],
    typer.Option(
        "--pair",
        metavar="TARGET:DRAFT",
        help="TARGET:DRAFT, repeatable: each pair's target with its own draft (split on the first ':'; the "
        "draft is never split on ','). Replaces --target/--draft; cells are grouped so each target loads once.",
    ),
]
Budgets = Annotated[
    Optional[str],
    typer.Option(
        "--max-new-tokens",
        help="Tokens to generate (default: the task's); "
        "a list 16,64,256 is an axis (cells whose integer γ exceeds their "
        "budget are skipped, with one line naming them).",
    ),
]
PromptLengths = Annotated[
    str,
    typer.Option(
        "--prompt-length",
        help="Prompt-length buckets, an axis: short, medium, "
        "long (tertiles of the task's prompt tokens under the target's tokenizer) "
        "or all (every example; the default).",
    ),
]
Gammas = Annotated[
    str,
    typer.Option(
        "--gamma",
        help="γ values: a list 1,2,3,5,7 or a range 1-8 (or both), and the "
        "policies auto, adaptive, heuristic (e.g. 1-8,adaptive,heuristic).",
    ),
]
Temperatures = Annotated[str, typer.Option("--temperature", help="Temperatures, comma-separated (0 = greedy).")]
Tasks = Annotated[str, typer.Option("--task", help="Tasks, comma-separated (names or JSONL files).")]
Confidences = Annotated[
    str,
    typer.Option(
        "--draft-confidence",
        help="Early-stop confidences of model drafts, "
        "comma-separated (an axis; 0 = off; model-free drafts run at 0 only).",
    ),
]
BatchSizes = Annotated[
    str,
    typer.Option(
        "--batch-size",
        help="Batch sizes, an axis: a list 1,2,4,8,16 or a range "
        "1-4 (each at most the examples; γ must be integers at > 1).",
    ),
]
BatchPolicies = Annotated[
    str,
    typer.Option(
        "--batch-policy",
        help="Batch policies, an axis: ragged, min or ragged,min (batch 1 runs once: the policies agree there).",
    ),
]
Concurrencies = Annotated[
    Optional[str],
    typer.Option(
        "--concurrency",
        help="Load points, an axis (--engine vllm): e.g. 1,4,16; each cell serves its examples as one load with at "
        "most this many requests in flight, both arms on the same prompts, order and schedule.",
    ),
]
RequestRates = Annotated[
    Optional[str],
    typer.Option(
        "--request-rate",
        help="With --concurrency: Poisson arrival rates in requests/s, an axis (e.g. 2,8,inf); inf (the default) "
        "submits all at once up to the cap.",
    ),
]
MaxCells = Annotated[
    Optional[int],
    typer.Option(
        "--max-cells",
        min=1,
        help="The most cells the grid may have (default 10000): a larger one is refused before anything runs, "
        "so a typo like --gamma 1-100000 fails at once. Above 200 cells a line gives the count and a rough time.",
    ),
]
SweepId = Annotated[
    Optional[str],
    typer.Option("--sweep-id", help="Sweep folder name (default: derived from the grid; a rerun resumes it)."),
]

Threads = Annotated[
    int, typer.Option("--threads", help="llama.cpp's CPU threads in the llama-cpp cells (0: every core).")
]

# columns of the cell table; the speedup is the primary measure (statistics.PRIMARY_MEASURE: the geometric mean
# of per-example throughput ratios) with its interval; Thm 3.8 and extended are predictions from the measured α, c
CELL_COLUMNS = ("n", "α", "speedup (geomean)", "95% CI", "Thm 3.8", "extended", "timing")


def sweep(
    target: Targets = None,
    draft: Drafts = None,
    pair: Pairs = None,
    gamma: Gammas = "1,2,3,5,7",
    gamma_max: GammaMax = 8,
    repeats: Repeats = 1,
    temperature: Temperatures = "0",
    top_k: TopK = 0,
    top_p: TopP = 1.0,
    task: Tasks = DEFAULT_TASK,
    limit: Limit = 8,
    seed: Seed = 0,
    max_new_tokens: Budgets = None,
    prompt_length: PromptLengths = "all",
    device: Device = "auto",
    dtype: Dtype = "float32",
    backend: Backend = "eager",
    engine: Engines = DEFAULT_ENGINE,
    threads: Threads = 0,
    draft_confidence: Confidences = "0",
    batch_size: BatchSizes = "1",
    batch_policy: BatchPolicies = "ragged",
    concurrency: Concurrencies = None,
    request_rate: RequestRates = None,
    slo_tpot_ms: SloTpotMs = DEFAULT_SLO_TPOT_MS,
    device_map: DeviceMap = None,
    max_memory: MaxMemory = None,
    executor: Executor = "local",
    address: Address = None,
    gpus_per_cell: GpusPerCell = 0.0,
    cpus_per_cell: CpusPerCell = 1.0,
    results_dir: ResultsDir = "results",
    sweep_id: SweepId = None,
    max_cells: MaxCells = None,
    as_json: AsJson = False,
    trust_remote_code: TrustRemote = False,
):
    """Run a grid (γ × draft × temperature × task × …) into results/<sweep-id>/, resumably; each cell times its own baseline.

    Example: specbench sweep --gamma 1-8 --draft prompt-lookup --temperature 0,1 --limit 8
    Example: specbench sweep --gamma 3 --batch-size 1,2,4,8,16 --batch-policy ragged,min --limit 32
    Example: specbench sweep --gamma 1-8 --executor ray --address auto --gpus-per-cell 1   (cells over a Ray cluster)
    Example: specbench sweep --draft prompt-lookup --gamma 4 --max-new-tokens 16,64,256 --prompt-length short,medium,long
    Example: specbench sweep --pair smollm2-135m:lookup+distilled --pair qwen2.5-coder-1.5b:prompt-lookup --gamma 4
    Example: specbench sweep --engine specbench,llama-cpp --draft prompt-lookup --gamma 2,4 --task aclsum
    Example: specbench sweep --engine vllm --concurrency 1,4,16 --task aclsum --draft prompt-lookup --gamma 4
    """  # noqa: E501 (--help prints each example on one line)
    from specbench.errors import SpecbenchError
    from specbench.measure.run import (
        MAX_CELLS,
        SweepGrid,
        make_executor,
        parse_budgets,
        parse_float_list,
        parse_int_list,
        parse_policy_list,
        parse_prompt_lengths,
        parse_rate_list,
        parse_str_list,
    )

    with options_checked():  # what the option checks refuse is a bad command line (exit code 2)
        if pair and (target is not None or draft is not None):
            raise SpecbenchError("--pair names each target with its draft; drop --target/--draft, or drop --pair")
        if sweep_id is not None:
            check_id(sweep_id, "--sweep-id")
        if not (gpus_per_cell >= 0 and cpus_per_cell > 0 and math.isfinite(gpus_per_cell + cpus_per_cell)):  # NaN too
            raise SpecbenchError(
                f"--gpus-per-cell must be >= 0 and --cpus-per-cell > 0, both finite (got {gpus_per_cell:g}, "
                f"{cpus_per_cell:g}); --gpus-per-cell 0 runs each cell on CPUs"
            )
        if threads < 0:  # the llama-cpp cells' threads; the other cells would ignore a negative count silently
            raise SpecbenchError(f"--threads must be >= 0 (got {threads}); 0 uses every core")
        check_results_dir(results_dir)
        prompt_lengths = tuple(parse_prompt_lengths(prompt_length))
        if request_rate is not None and concurrency is None:
            raise SpecbenchError(RATE_NEEDS_CONCURRENCY)
        concurrencies = tuple(parse_int_list(concurrency, "--concurrency")) if concurrency is not None else (0,)
        rates = tuple(parse_rate_list(request_rate)) if request_rate is not None else (None,)
        grid = SweepGrid.from_specs(
            target=target or DEFAULT_TARGET,
            draft=draft or DEFAULT_DRAFT,
            gamma=gamma,
            temperature=temperature,
            task=task,
            pairs=tuple(pair or ()),
            max_cells=max_cells or MAX_CELLS,
            top_k=top_k,
            top_p=top_p,
            limit=limit,
            seed=seed,
            max_new_tokens=parse_budgets(max_new_tokens),
            prompt_length=prompt_lengths[0] if len(prompt_lengths) == 1 else prompt_lengths,
            device=device,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            backend=backend,
            engine=tuple(parse_str_list(engine, "--engine")),
            threads=threads,
            draft_confidence=tuple(parse_float_list(draft_confidence, "--draft-confidence")),
            gamma_max=gamma_max,
            repeats=repeats,
            batch_size=tuple(parse_int_list(batch_size, "--batch-size")),
            batch_policy=tuple(parse_policy_list(batch_policy)),
            concurrency=concurrencies,
            request_rate=rates,
            slo_tpot_ms=slo_tpot_ms,
            device_map=device_map,
            max_memory=max_memory,
        )
        for name in grid.tasks:
            check_task_named(name)  # a misspelt --task or a missing task file: a bad command line
    for name in grid.engines if executor != "local" else ():  # Ray workers have specbench's own install only
        if (setup := engine_spec(name).setup) is not None:
            raise SpecbenchError(
                f"--engine {name} needs its own build (`{setup}`), which Ray workers lack; its cells run with "
                f"--executor local: drop --executor or the engine"
            )
    cells_on = make_executor(executor, address=address, gpus_per_cell=gpus_per_cell, cpus_per_cell=cpus_per_cell)
    quiet_transformers()
    outcome = sweep_with_progress(grid, results_dir, sweep_id, cells_on, max_cells or MAX_CELLS)
    if as_json:
        out.print_json(
            json.dumps(
                [
                    {"cell_id": c.cell_id, "run_dir": str(outcome.root / c.cell_id), "summary": c.summary}
                    for c in outcome.cells
                ]
            )
        )
        return
    print_table(cells_table(outcome))
    load = load_table([(c.cell_id, Summary.from_dict(c.summary)) for c in outcome.cells])
    if load is not None:
        out.print(load)
    out.print(f"results: {outcome.root}   (report: specbench report {outcome.root})")
    for c in outcome.cells:
        warn_if_noisy(Summary.from_dict(c.summary), f"{c.cell_id}: ")


def sweep_with_progress(grid, results_dir: str | Path, sweep_id: str | None, executor=None, max_cells=None):
    """run_sweep with a transient spinner while it checks and plans, then a bar over cells × examples."""
    from specbench.measure.run import MAX_CELLS, run_sweep

    status, bar = phase_status("reading tasks"), progress_bar()
    job = bar.add_task("cells × examples", total=None, info="")

    def on_plan(total: int, n_cells: int) -> None:
        status.stop()  # the sweep folder is checked and written: from here on, progress is worth a line
        bar.start()
        bar.update(job, total=total, info=f"{n_cells} cells; loading models")  # type: ignore[arg-type]  # rich's TaskID is an int NewType

    def on_cell(cell_id: str, total: int, done: int) -> None:
        bar.update(job, advance=done, info=cell_id + (f" (resumed {done}/{total})" if done else ""))  # type: ignore[arg-type]  # rich's TaskID is an int NewType

    def on_example(cell_id: str, record: dict) -> None:
        s = record["speculative"]
        bar.update(job, advance=1, info=f"{cell_id}: accepted {s['accepted']}/{s['drafted']}")  # type: ignore[arg-type]  # rich's TaskID is an int NewType

    status.start()
    try:
        return run_sweep(
            grid,
            results_dir,
            sweep_id=sweep_id,
            on_plan=on_plan,
            on_cell=on_cell,
            on_example=on_example,
            on_estimate=say,  # a large grid's cells and rough time, before any model loads
            executor=executor,
            max_cells=max_cells or MAX_CELLS,
        )
    finally:
        status.stop()
        if bar.live.is_started:  # stopping a bar that never started would still print an empty line
            bar.stop()


def primary_speedup(summary: Summary) -> tuple[str, str]:
    """(speedup, 95 % interval) cells: the geometric mean and its t interval ("n < MIN_INTERVAL_N" where too few give
    none); a summary from before the primary measure shows its ratio of sums, labelled so."""
    from specbench.measure.stats import MIN_INTERVAL_N

    # before the primary measure: neither field written (since, the interval is always a list, [null, null] at worst)
    if summary.speedup_geomean is None and summary.speedup_geomean_ci95 is None:
        return f"{fmt(summary.speedup)} (ratio of sums)", fmt(summary.speedup_ci95, 2)
    if summary.interval_note:
        return fmt(summary.speedup_geomean), f"n < {MIN_INTERVAL_N}"
    return fmt(summary.speedup_geomean), fmt(summary.speedup_geomean_ci95, 2)


def cells_table(outcome) -> Table:
    table = Table(
        title=f"{outcome.root.name}  ({len(outcome.cells)} cells, {outcome.new_examples} examples measured now)"
    )
    table.add_column("cell", overflow="fold", min_width=20)  # a pipe's 80 columns must not squeeze it to nothing
    for col in CELL_COLUMNS:
        table.add_column(col, justify="right", no_wrap=True)
    for c in outcome.cells:
        s = Summary.from_dict(c.summary)  # read by attribute: a renamed field fails mypy instead of printing "—"
        table.add_row(
            c.cell_id,
            fmt(s.n_examples),
            fmt(s.alpha),
            *primary_speedup(s),
            fmt(s.predicted_speedup),
            fmt(s.predicted_speedup_extended),
            "suspect" if s.suspect_timing else "ok",
        )
    return table

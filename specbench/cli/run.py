"""`specbench run`: one configuration on a task, baseline and speculative decoding side by side.

The command turns its options into a RunConfig, hands it to specbench.measure.run.runner, and
renders the summary; measuring, resuming and writing all happen in the runner.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from specbench.cli.load_table import load_table
from specbench.cli.options import (
    DEFAULT_TASK,
    AsJson,
    Backend,
    BatchPolicy,
    BatchSize,
    Concurrency,
    Device,
    DeviceMap,
    Draft,
    DraftConfidence,
    Dtype,
    Engine,
    Gamma,
    GammaMax,
    Limit,
    MaxMemory,
    MaxNew,
    PromptLength,
    Repeats,
    RequestRate,
    ResultsDir,
    Seed,
    SloTpotMs,
    Target,
    Task,
    Temperature,
    TopK,
    TopP,
    TrustRemote,
)
from specbench.cli.output import (
    fmt,
    options_checked,
    out,
    progress_bar,
    quiet_transformers,
    say,
    warn_if_noisy,
)
from specbench.config import (
    DEFAULT_SLO_TPOT_MS,
    RATE_NEEDS_CONCURRENCY,
    LoadSpec,
    RunConfig,
    SamplingConfig,
    check_batch_size,
    check_id,
    check_results_dir,
    parse_gamma,
    parse_request_rate,
)
from specbench.engines import DEFAULT_ENGINE, check_config
from specbench.errors import SpecbenchError
from specbench.measure.results import SUMMARY_NAMES, SUMMARY_UNITS, Summary, run_table_rows
from specbench.models import DEFAULT_DRAFT, DEFAULT_TARGET
from specbench.run_specs import parse_draft
from specbench.tasks.specs import check_task_named

Threads = Annotated[int, typer.Option("--threads", help="--engine llama-cpp: llama.cpp's CPU threads (0: every core).")]
ExactShapes = Annotated[
    bool,
    typer.Option(
        "--exact-shapes",
        help="Pad every target pass of both engines to γ+1 tokens, so both compute every logit with the "
        "same kernels: greedy identity then holds in bf16 too; the baseline is slower, so do not read the speedup.",
    ),
]
BitExact = Annotated[
    bool,
    typer.Option(
        "--bit-exact",
        help="Run every verify pass of speculative decoding as one-token passes over the KV cache (the baseline's "
        "decoding step), so each logit is the baseline's bit for bit: greedy output must then equal the baseline's "
        "in any dtype, and any divergence is a bug. It checks exactness: its speedup is not a speed measurement.",
    ),
]
RunId = Annotated[
    Optional[str],
    typer.Option("--run-id", help="Run folder name (default: derived from the config; a rerun resumes it)."),
]

Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Show every row of the run table (costs, predictions, percentiles).")
]
AutoControl = Annotated[
    bool,
    typer.Option(
        "--auto-control",
        help="After an auto run, also time the runner-up (the best other draft or dtype) on the same examples and "
        "print it beside the choice.",
    ),
]


def run(
    target: Target = DEFAULT_TARGET,
    draft: Draft = DEFAULT_DRAFT,
    gamma: Gamma = "3",
    gamma_max: GammaMax = 8,
    repeats: Repeats = 1,
    temperature: Temperature = 0.0,
    top_k: TopK = 0,
    top_p: TopP = 1.0,
    task: Task = DEFAULT_TASK,
    limit: Limit = 8,
    seed: Seed = 0,
    max_new_tokens: MaxNew = None,
    prompt_length: PromptLength = "all",
    device: Device = "auto",
    dtype: Dtype = "float32",
    backend: Backend = "eager",
    draft_confidence: DraftConfidence = 0.0,
    engine: Engine = DEFAULT_ENGINE,
    threads: Threads = 0,
    exact_shapes: ExactShapes = False,
    bit_exact: BitExact = False,
    batch_size: BatchSize = 1,
    batch_policy: BatchPolicy = "ragged",
    concurrency: Concurrency = None,
    request_rate: RequestRate = None,
    slo_tpot_ms: SloTpotMs = DEFAULT_SLO_TPOT_MS,
    device_map: DeviceMap = None,
    max_memory: MaxMemory = None,
    results_dir: ResultsDir = "results",
    run_id: RunId = None,
    as_json: AsJson = False,
    verbose: Verbose = False,
    auto_control: AutoControl = False,
    trust_remote_code: TrustRemote = False,
):
    """Run one configuration on a task: baseline and speculative decoding side by side.

    Example: specbench run --task aclsum --draft prompt-lookup --gamma 3 --limit 8
    Example: specbench run --draft auto --dtype auto --gamma auto --repeats 2   (choices measured on this machine)
    Example: specbench run --draft prompt-lookup --gamma 3 --batch-size 8 --limit 16   (two batches of 8)
    Example: specbench run --task aclsum --draft prompt-lookup --gamma 4 --prompt-length long   (the longest third)
    Example: specbench run --engine llama-cpp --task aclsum --draft prompt-lookup --gamma 4   (on llama.cpp)
    Example: specbench run --engine vllm --task aclsum --draft prompt-lookup --gamma 4 --concurrency 8 --repeats 2
    """
    with options_checked():
        check_load_options(concurrency, request_rate)
        load = LoadSpec(
            target,
            device=device,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            backend=backend,
            device_map=device_map,
            max_memory=max_memory,
            threads=threads,
        )
        config = RunConfig(
            load=load,
            draft=parse_draft(draft),  # the --draft value parsed here, once
            task=task,
            gamma=parse_gamma(gamma),
            sampling=SamplingConfig(temperature, top_k, top_p),
            limit=limit,
            seed=seed,
            max_new_tokens=max_new_tokens,
            engine=engine,
            draft_confidence=draft_confidence,
            gamma_max=gamma_max,
            repeats=repeats,
            exact_shapes=exact_shapes,
            bit_exact=bit_exact,
            batch_size=batch_size,
            batch_policy=batch_policy,
            prompt_length=prompt_length.strip().lower(),
            concurrency=concurrency or 0,
            request_rate=parse_request_rate(request_rate),
            slo_tpot_ms=slo_tpot_ms,
        )
        check_config(config)
        if run_id is not None:
            check_id(run_id, "--run-id")
        check_results_dir(results_dir)
        if limit is not None:
            check_batch_size(batch_size, limit)  # more rows than examples: refused before the task loads
        check_task_named(task)  # a misspelt --task or a missing task file: a bad command line, as click's own
    from specbench.measure.run import prepare_run  # torch: after the options are checked, so bad ones fail fast

    quiet_transformers()
    with progress_bar() as bar:
        setup = SetupProgress(bar)
        plan = prepare_run(config, results_dir, run_id=run_id, on_status=setup)
        setup.done()
    print_context(plan)
    outcome = measure_with_progress(plan)
    summary = Summary.from_dict(outcome.summary)  # read by attribute from here on: a renamed field fails mypy
    print_summary(outcome, summary, as_json, verbose, exactness_mode(config))
    warn_if_noisy(summary)
    if auto_control:
        run_auto_control(plan, config, results_dir, outcome.summary)


def check_load_options(concurrency: int | None, request_rate: str | None) -> None:
    """--concurrency given is at least 1 (0 would silently mean no load run); --request-rate needs it."""
    if concurrency is not None and concurrency < 1:
        raise SpecbenchError(f"--concurrency must be >= 1 (got {concurrency}); drop it to decode one example at a time")
    if request_rate is not None and concurrency is None:
        raise SpecbenchError(RATE_NEEDS_CONCURRENCY)


def run_auto_control(plan, config, results_dir: str | Path, summary: dict) -> None:
    """--auto-control: the runner-up timed on the same examples, then one line beside the choice (stderr)."""
    from specbench.measure.auto import control_config, control_line
    from specbench.measure.run import prepare_run

    control = control_config(config, plan.choice) if plan.choice else None
    if control is None:
        say("auto: control: no runner-up to time (nothing was chosen by the replay pilot)")
        return
    with progress_bar() as bar:
        control_plan = prepare_run(control, results_dir, on_status=SetupProgress(bar))
    control_outcome = measure_with_progress(control_plan)
    say(f"auto: {control_line(summary, control_outcome.summary, plan.choice.runner_up)}")


class SetupProgress:
    """prepare_run's on_status: the step under way on a "setup" line, and (`progress`, called by the auto choice)
    one bar per phase with a count (calibration: dtypes; pilot: untimed examples); the examples get theirs later."""

    def __init__(self, bar):
        self.bar, self.bars = bar, {}
        self.setup = bar.add_task("setup", total=None, info="loading task and models")

    def __call__(self, message: str) -> None:
        self.bar.update(self.setup, info=message)

    def progress(self, phase: str, done: int, total: int) -> None:
        if phase not in self.bars:
            self.bars[phase] = self.bar.add_task(phase, total=total, info="")
        self.bar.update(self.bars[phase], completed=done, total=total)

    def done(self) -> None:
        self.bar.update(self.setup, total=1, completed=1, info="ready")


def print_context(plan) -> None:
    """Before timing: the hardware measured and every auto choice with its reason (stderr, one line each)."""
    from specbench.measure.machine import describe

    say(f"hardware: {describe(plan.manifest.get('hardware'))}")
    for reason in plan.choice.reasons if plan.choice else []:
        say(f"auto: {reason}")


def measure_with_progress(plan):
    """The runner's measure() under a progress bar that counts examples and shows the acceptance so far."""
    from specbench.measure.run import measure

    with progress_bar() as bar:
        job = bar.add_task("examples", total=None, info="warming up")

        def on_start(total: int, done: int) -> None:
            bar.update(job, total=total, completed=done, info=f"resumed {done}" if done else "")

        def on_example(record: dict) -> None:
            s = record["speculative"]
            bar.update(job, advance=1, info=f"accepted {s['accepted']}/{s['drafted']}")

        return measure(plan, on_start=on_start, on_example=on_example)


def print_summary(outcome, summary: Summary, as_json: bool, verbose: bool = False, mode: str | None = None) -> None:
    """--json: summary.json as written (every key, in schema order); else the table and the lines below it."""
    if as_json:
        out.print_json(json.dumps(outcome.summary))
        return
    out.print(summary_table(summary, verbose))
    load = load_table([(summary.run_id or "", summary)])
    if load is not None:
        out.print(load)
    line = prediction_line(summary)
    if line:
        out.print(line, highlight=False)
    if mode:  # an exactness option: its passes are not the engines' timed ones
        out.print(f"{mode}: its speedup is not a speed measurement (rerun without it to time)", highlight=False)
    if summary.identity_line:
        floor = summary.numerics_floor
        out.print(
            f"greedy identity: {summary.identity_line}"
            + (
                f" (numerics floor: {floor:.1%} of positions flip under verify-shaped passes)"
                if floor is not None
                else ""
            ),
            highlight=False,
        )
    out.print(f"results: {outcome.files.root}" + ("" if verbose else "  (--verbose or --json for every metric)"))


def exactness_mode(config: RunConfig) -> str | None:
    """The exactness option a run was made under (its passes are not the engines' timed ones), or None."""
    if config.bit_exact:
        return "--bit-exact (verify passes run as one-token steps)"
    if config.exact_shapes:
        return "--exact-shapes (every pass padded to γ+1 tokens)"
    return None


def with_unit(value, unit: str) -> str:
    """A number as its unit reads: 1.23×, 412.3 tok/s, 12.4 ms, 443 MiB; other units as plain digits."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        return fmt(value)
    if unit == "×":
        return f"{value:.2f}×"
    if unit == "tokens/s":
        return f"{value:.{0 if value >= 100 else 1 if value >= 10 else 2}f} tok/s"
    if unit == "s":
        return f"{value * 1e3:.1f} ms" if abs(value) < 10 else f"{value:.1f} s"
    if unit == "MiB":
        return f"{value:.0f} MiB"
    return fmt(value)


def cell(summary: Summary, key: str) -> str:
    """A table cell: the value in its unit, its `<key>_ci95` interval beside it when the summary has one, a list's
    entries. `key` is a Summary field named by the run table's rows (schema_doc.run_table_rows)."""
    value, unit = getattr(summary, key), SUMMARY_UNITS.get(key, "")
    if isinstance(value, list) and all(isinstance(v, (int, float, type(None))) for v in value):
        return "—" if not value else ", ".join(fmt(v, 2) for v in value[:8]) + (" …" if len(value) > 8 else "")
    has_interval = f"{key}_ci95" in SUMMARY_NAMES
    interval = getattr(summary, f"{key}_ci95") if has_interval else None
    bounds = interval if isinstance(interval, list) and len(interval) == 2 else [None, None]
    if all(isinstance(b, (int, float)) and b == b for b in bounds) and value is not None:
        return f"{with_unit(value, unit)} ({with_unit(bounds[0], unit)} – {with_unit(bounds[1], unit)})"
    if has_interval and summary.interval_note and value is not None:
        return f"{with_unit(value, unit)} (no interval: too few examples)"  # interval_note, under --verbose/--json
    return with_unit(value, unit)


def prediction_line(summary: Summary) -> str | None:
    """One line setting the prediction beside the measurement, saying which prediction it is."""
    measured = summary.speedup_geomean or summary.speedup
    if measured is None:
        return None
    auto, check = summary.auto_predicted_speedup, summary.auto_check_speedup
    if auto is not None or check is not None:

        def shown(value, bounds) -> str:
            low_high: list = bounds or [None, None]
            return f"{value:.2f}×" + (f", 95 % {low_high[0]:.2f}–{low_high[1]:.2f}" if None not in low_high else "")

        parts = [f"predicted (held out) {shown(auto, summary.auto_predicted_interval)}"] if auto is not None else []
        if check is not None:
            parts.append(f"cost-model check (known acceptance) {shown(check, summary.auto_check_interval)}")
        return f"before timing (auto): {'; '.join(parts)}; measured {measured:.2f}×"
    paper, priced, cost = summary.predicted_speedup, summary.predicted_speedup_extended, summary.verify_cost
    if priced is not None and cost is not None:
        if summary.verified_trees and summary.predicted_tokens_per_call is not None:  # a token tree (tree_check)
            return (
                f"cost-model check at the measured acceptance: {summary.predicted_tokens_per_call:.2f} tokens a "
                f"target pass, a tree's verify pass costing {cost:.2f} one-token passes here: {priced:.2f}× (the "
                f"paper's formula is for chains); measured {measured:.2f}×"
            )
        paper_note = f"; the paper's formula, which prices it as one, says {paper:.2f}×" if paper is not None else ""
        return (
            f"cost-model check at the measured α and draft cost, a verify pass costing {cost:.2f} one-token passes "
            f"here: {priced:.2f}×{paper_note}; measured {measured:.2f}×"
        )
    if paper is None:
        return None
    return f"the paper's formula at the measured α and draft cost: {paper:.2f}×; measured {measured:.2f}×"


def summary_table(summary: Summary, verbose: bool = False) -> Table:
    batched = (summary.batch_size or 1) > 1
    batch = f", batch {summary.batch_size} {summary.batch_policy}" if batched else ""
    title = (
        f"{summary.run_id}  ({summary.n_examples} examples; {summary.draft}, γ {summary.gamma}, {summary.dtype}{batch})"
    )
    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    if verbose:
        table.add_column("key")
    for key, label in run_table_rows(batch=batched, verbose=verbose):
        if key == "greedy_identity" and summary.greedy_identity is None:
            continue  # sampling: no identity to show
        table.add_row(label, cell(summary, key), *([key] if verbose else []))
    quality = summary.quality
    for key, value in quality["baseline"].items() if quality else []:
        if isinstance(value, float):
            table.add_row(
                f"{key}, baseline / speculative",
                f"{value:.2f} / {quality['speculative'][key]:.2f}",  # type: ignore[index]  # set: the loop runs
                *([key] if verbose else []),
            )
    return table

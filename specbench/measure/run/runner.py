"""Run one configuration over a task: baseline and speculative side by side, streamed to disk.

Data flows one way: RunConfig → planning.prepare_run (task examples, models, auto choices, manifest) → `measure`
(per example: both engines A B B A, one ExampleRecord appended to examples.jsonl, summary.json rewritten). This
module is only the loop and `execute_run`, the one call for a whole run; what it loops over is in engines.py, how a
run is planned in planning.py, what it writes in run_folder.py, the loop for --batch-size > 1 in batch_runner.py and
the load run's (--concurrency) in load_runner.py.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from specbench.config import (
    RunConfig,
)
from specbench.decoding.base import DecodeResult, KeepsLearnt, Proposer, forget_outputs, remember_output
from specbench.engines.session import Session
from specbench.files import append_jsonl, atomic_write_text
from specbench.measure.machine.memory import peak_memory, reset_peak_memory
from specbench.measure.machine.noise import cpu_counters
from specbench.measure.results.bounded_reads import read_json_object
from specbench.measure.results.record_writing import append_record, repair_jsonl, run_lock
from specbench.measure.results.records import read_examples
from specbench.measure.results.run_folder import write_summary
from specbench.measure.results.schema import SCHEMA_VERSION, EngineRecord, ExampleRecord, RunFiles, engine_dict
from specbench.measure.run import turns
from specbench.measure.run.arms import (
    Engines,
    engine_order,
    engine_record,
    example_seed,
    merge_repeats,
    probe_target,
)
from specbench.measure.run.batch_runner import measure_batches
from specbench.measure.run.calibrating import run_capacity
from specbench.measure.run.load_runner import measure_load
from specbench.measure.run.planning import RunPlan, prepare_run
from specbench.measure.stats.metric_units import first_divergence
from specbench.measure.stats.nll import example_nll
from specbench.measure.stats.numerics import explain_bit_exact, explain_example
from specbench.measure.stats.own_logits import explain_greedy

LEARNT_FILE = "learnt.json"  # a learning draft's state after the finished examples (decoding/base.KeepsLearnt)


@dataclass
class RunOutcome:
    files: RunFiles
    summary: dict
    new_examples: int  # examples measured by this call (the rest were resumed from disk)


def start_memory(device: torch.device) -> Callable[[], dict]:
    """Reset the peak-memory counter now; → what write_summary calls to read the peak since then."""
    reset_peak_memory(device)
    return functools.partial(peak_memory, device)


def measure(
    plan: RunPlan,
    *,
    on_start: Callable[[int, int], None] = lambda total, done: None,
    on_example: Callable[[dict], None] = lambda record: None,
) -> RunOutcome:
    """Measure every not-yet-recorded example of the plan; resume from examples.jsonl if present. Each
    example times both engines here, A B B A (a sweep's cell too: it shares no baseline with other cells)."""
    try:
        with run_lock(plan.files.root):  # already held since prepare_run (re-entrant); a plan built by hand takes it
            return _measure_locked(plan, on_start, on_example)
    finally:
        forget_outputs(plan.proposer)  # what the draft learnt from this run's outputs stays in this run
        if plan.lock is not None:
            plan.lock.close()
            plan.lock = None


def _measure_locked(plan: RunPlan, on_start, on_example) -> RunOutcome:
    config, files, target = plan.config, plan.files, plan.session.target
    repair_jsonl(files.examples)
    records = read_examples(files.examples)  # a line of the wrong shape is skipped (warned), never summarized
    if records and not files.summary.exists():  # killed between a record and its summary: rebuild it first
        write_summary(files, config, plan.spec, records, plan.manifest, None)
    done = {r["example_id"] for r in records}
    todo = [p for p in plan.prepared if p.example.id not in done]
    on_start(len(plan.prepared), len(plan.prepared) - len(todo))
    forget_outputs(plan.proposer)  # a draft that learns from earlier outputs starts each run from nothing,
    for stored in records:  # then from the resumed examples' outputs, in the order they ran
        remember_example(plan.proposer, stored)
    if lost := resume_learnt(files.root, plan.proposer, [r["example_id"] for r in records]):
        warnings.warn(lost, stacklevel=1)  # one line (CLI)
    engines = Engines(plan.session, config, plan.proposer, plan.choice)
    probe_file = files.root / "noise_probes.jsonl"
    threads = plan.session.compute_threads()  # what each probe row's contention counters are read against
    memory = start_memory(target.device) if todo else None  # a call that measures nothing keeps the stored peak
    if config.batch_size > 1:
        turns.refuse_turns(plan.prepared, "--batch-size > 1", "use --batch-size 1")
        measure_batches(plan, engines, records, on_example, memory)
        return RunOutcome(files, write_summary(files, config, plan.spec, records, plan.manifest, memory), len(todo))
    if config.concurrency:  # a load run: every example served together, per arm (load_runner.py)
        turns.refuse_turns(plan.prepared, "--concurrency", "drop --concurrency or use a one-turn task")
        measure_load(plan, engines, records, on_example, memory)
        return RunOutcome(files, write_summary(files, config, plan.spec, records, plan.manifest, memory), len(todo))
    if todo:
        engines.warm_up(todo[0].prompt_ids, run_capacity(config, plan.prepared, plan.max_new_tokens))
        ms = probe_target(plan.session, plan.prepared[0].prompt_ids)
        append_jsonl(probe_file, {"after": None, "ms": ms, **cpu_counters(threads)})
    for item in todo:
        seed = example_seed(config.seed, item.example.id)
        runs: dict[str, list[DecodeResult]] = {"baseline": [], "speculative": []}
        log = turns.TurnLog()  # each turn of a multi-turn question (measure/run/turns.py)
        for engine in engine_order(config.repeats, plan.prepared.index(item)):
            decode = engines.baseline if engine == "baseline" else engines.speculative
            runs[engine].append(
                turns.ask_turns(decode, item, seed, plan.max_new_tokens, plan.spec, target, log.runs[engine])
            )
        merged, repeat_s = merge_repeats(runs["baseline"])
        base = engine_dict(engine_record(merged, target.tokenizer, repeat_s))
        merged, repeat_s = merge_repeats(runs["speculative"])
        spec_rec = engine_record(merged, target.tokenizer, repeat_s)
        divergence = first_divergence(base["token_ids"], spec_rec.token_ids)
        numerics = None
        if config.sampling.greedy:  # after this example's timed decodes: the floor and the divergence's class
            t_prompt, t_base, t_spec, t_div = log.numerics_inputs(item.prompt_ids, base, asdict(spec_rec), divergence)
            if config.bit_exact:  # no pass shape separates the engines: any divergence is unexplained, ungated
                numerics = explain_bit_exact(
                    target.model, t_prompt, t_base, t_spec, t_div, target.decoder_start_id, plan.session.target_backend
                )
            else:  # on the engine's own logits where it scores prompts (vLLM), else (or failing that) a torch replay
                torch_replay = functools.partial(
                    explain_example,
                    target.model,
                    t_prompt,
                    t_base,
                    t_spec,
                    config.draft_gamma,
                    t_div,
                    target.decoder_start_id,
                    plan.session.target_backend,
                    engines.pad_to,
                )
                scorer = plan.session.prompt_scores
                dtype = getattr(torch, plan.session.load.dtype, torch.float32)
                numerics = explain_greedy(scorer, torch_replay, t_prompt, t_base, t_spec, t_div, dtype)
        record = ExampleRecord(
            SCHEMA_VERSION,
            item.example.id,
            len(item.prompt_ids),
            item.example.reference,
            EngineRecord(**base),
            spec_rec,
            divergence is None,
            divergence,
            numerics,
            nll=None
            if config.sampling.greedy
            else example_nll(  # after the timed decodes
                target.model,
                item.prompt_ids,
                base,
                asdict(spec_rec),
                target.decoder_start_id,
                plan.session.target_backend,
            ),
            turns=log.records(target.tokenizer),
        )
        append_record(files.examples, record)
        records.append(asdict(record))
        remember_example(plan.proposer, records[-1])  # after its timed decodes: later examples may copy from it
        keep_learnt(files.root, plan.proposer, [r["example_id"] for r in records])  # right after its record
        ms = probe_target(plan.session, item.prompt_ids)
        append_jsonl(probe_file, {"after": item.example.id, "ms": ms, **cpu_counters(threads)})
        write_summary(files, config, plan.spec, records, plan.manifest, memory)
        on_example(records[-1])
    summary = write_summary(files, config, plan.spec, records, plan.manifest, memory)
    return RunOutcome(files, summary, len(todo))


def keep_learnt(root: Path, proposer: Proposer, example_ids: list[str]) -> None:
    """Write what a draft that keeps learnt state knows after `example_ids` (atomic: a kill leaves the last whole
    state); nothing for any other draft."""
    if isinstance(proposer, KeepsLearnt):
        atomic_write_text(root / LEARNT_FILE, json.dumps({"examples": example_ids, "state": proposer.learnt()}))


def resume_learnt(root: Path, proposer: Proposer, example_ids: list[str]) -> str | None:
    """Give a resumed run's draft the state it kept after exactly `example_ids` (the records resumed, in order); a
    sentence saying why it resumes without it (a missing, unreadable or mismatched file), else None."""
    if not example_ids or not isinstance(proposer, KeepsLearnt):
        return None
    doc, problem = read_json_object(root / LEARNT_FILE, LEARNT_FILE)
    if doc is not None and doc.get("examples") != example_ids:
        problem = f"{root / LEARNT_FILE}: kept after other examples than the {len(example_ids)} resumed"
    elif doc is not None:
        try:
            proposer.restore_learnt(doc.get("state"))
            return None
        except ValueError as exc:
            problem = f"{root / LEARNT_FILE}: {exc}"
    return f"{problem}; the draft resumes without what the finished examples taught it, so it drafts less for a while"


def remember_example(proposer: Proposer, record: dict) -> None:
    """A finished example's speculative output (each turn's, for a multi-turn question) to a draft that learns from
    the run's earlier outputs (base.LearnsOutputs: suffix decoding); nothing for any other draft."""
    turns = record.get("turns") or []
    outputs = [t["speculative"]["token_ids"] for t in turns if t.get("speculative")]
    for token_ids in outputs or [record["speculative"]["token_ids"]]:
        remember_output(proposer, token_ids)


def execute_run(
    config: RunConfig,
    results_dir: Path,
    *,
    run_id: str | None = None,
    session: Session | None = None,
    on_start: Callable[[int, int], None] = lambda total, done: None,
    on_example: Callable[[dict], None] = lambda record: None,
) -> RunOutcome:
    """prepare_run then measure: one call for a whole run."""
    plan = prepare_run(config, results_dir, run_id=run_id, session=session)
    return measure(plan, on_start=on_start, on_example=on_example)

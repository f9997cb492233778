"""The measure loop for --batch-size B > 1: examples decoded B at a time, still one record per example.

The run's examples are grouped into batches of B in the task's seeded order (the last batch holds
what is left), so a batch's rows are the same on every run and resume of a configuration. Each
batch is decoded by the batched baseline and the batched speculative engine (decoding/batched),
A B B A … over repeats as in the batch-1 loop; then every row becomes an ordinary ExampleRecord,
with its batch (batch_size, batch_index, row, batch_rows) and each engine's shared batch wall time
(`batch_s`), appended one line per example. A batch is the unit of timing, so it is also the unit
of resuming: a batch with every example on disk is skipped, and a batch a kill cut short (some
rows written) is decoded again whole, with only the missing rows appended, so no example appears
twice and no row is timed in a batch other than its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict

from specbench.decoding.base import DecodeResult
from specbench.decoding.sampling import make_generator
from specbench.files import append_jsonl
from specbench.measure.results.record_writing import append_record
from specbench.measure.results.run_folder import write_summary
from specbench.measure.results.schema import SCHEMA_VERSION, EngineRecord, ExampleRecord, engine_dict
from specbench.measure.run.arms import (
    WARMUP_TOKENS,
    Engines,
    Prepared,
    engine_order,
    engine_record,
    example_seed,
    merge_repeats,
    probe_target,
)
from specbench.measure.run.planning import RunPlan
from specbench.measure.stats.metric_units import first_divergence
from specbench.measure.stats.numerics import explain_example


def batch_groups(prepared: list[Prepared], batch_size: int) -> list[list[Prepared]]:
    """The run's examples in batches of `batch_size`, in order; the last batch holds the remainder."""
    return [prepared[i : i + batch_size] for i in range(0, len(prepared), batch_size)]


def pending_batches(groups: list[list[Prepared]], done: set[str]) -> list[tuple[int, list[Prepared]]]:
    """(batch index, rows) of every batch with an example not on disk yet."""
    return [(i, g) for i, g in enumerate(groups) if any(p.example.id not in done for p in g)]


def decode_batch(
    engines: Engines, engine: str, items: list[Prepared], seeds: list[int], max_new_tokens: int
) -> list[DecodeResult]:
    """One engine over one batch → one DecodeResult per row, in order (each row's own generator)."""
    from specbench.decoding.batched import decode_autoregressive_batch, decode_speculative_batch

    t, cfg = engines.session.target, engines.config
    prompts = [p.prompt_ids for p in items]
    generators = [make_generator(t.device, s) for s in seeds]
    common = dict(
        max_new_tokens=max_new_tokens, sampling=cfg.sampling, eos_ids=t.eos_ids, generators=generators, pad_id=t.pad_id
    )
    if engine == "baseline":
        return decode_autoregressive_batch(t.model, prompts, **common)
    # one proposer for every row: a model draft's network drafts all rows in one pass, a model-free one is
    # copied per row by the engine, and a hybrid looks up per row and drafts the rest in one batched pass
    return decode_speculative_batch(
        t.model,
        engines.proposer,
        prompts,
        gamma=cfg.gamma.fixed,  # type: ignore[arg-type]  # batches take a fixed γ (config.py refuses a policy)
        policy=cfg.batch_policy,
        **common,
    )


def merge_batch(runs: list[list[DecodeResult]], tokenizer) -> list[EngineRecord]:
    """Repeats of one engine over one batch → an EngineRecord per row: each row's median times
    (merge_repeats), and the median of the batch's wall time over the repeats."""
    batch_s = statistics.median(r[0].batch_s for r in runs)
    out = []
    for row in range(len(runs[0])):
        merged, repeat_s = merge_repeats([r[row] for r in runs])
        rec = engine_record(merged, tokenizer, repeat_s, batched=True)
        rec.batch_s = batch_s
        out.append(rec)
    return out


def measure_batch(
    engines: Engines, plan: RunPlan, index: int, items: list[Prepared]
) -> tuple[list[dict], list[EngineRecord]]:
    """Both engines over one batch, A B B A → (baseline record dicts, speculative records), one per row."""
    cfg, tok = engines.config, engines.session.target.tokenizer
    seeds = [example_seed(cfg.seed, p.example.id) for p in items]
    runs: dict[str, list[list[DecodeResult]]] = {"baseline": [], "speculative": []}
    for engine in engine_order(cfg.repeats, index):
        runs[engine].append(decode_batch(engines, engine, items, seeds, plan.max_new_tokens))
    base = [engine_dict(r) for r in merge_batch(runs["baseline"], tok)]
    return base, merge_batch(runs["speculative"], tok)


def row_record(
    engines: Engines, plan: RunPlan, item: Prepared, base: dict, spec: EngineRecord, index: int, row: int, rows: int
) -> ExampleRecord:
    """One row of a batch as the example's record; at T = 0 its divergence classified as in the batch-1 loop."""
    return classified_record(
        engines, item, base, spec, batch_size=engines.config.batch_size, batch_index=index, row=row, batch_rows=rows
    )


def classified_record(engines: Engines, item: Prepared, base: dict, spec: EngineRecord, **extra) -> ExampleRecord:
    """An example's record from its two engines' outputs, served together (a batch's row, a load's request): its
    first divergence and, at T = 0, that divergence's class from the target's replay; `extra`: the record's
    batch fields."""
    t = engines.session.target
    divergence = first_divergence(base["token_ids"], spec.token_ids)
    numerics = None
    if engines.config.sampling.greedy:
        numerics = explain_example(
            t.model,
            item.prompt_ids,
            base,
            asdict(spec),
            engines.config.draft_gamma,
            divergence,
            t.decoder_start_id,
            engines.session.target_backend,
            1,
        )
    return ExampleRecord(
        SCHEMA_VERSION,
        item.example.id,
        len(item.prompt_ids),
        item.example.reference,
        EngineRecord(**base),
        spec,
        divergence is None,
        divergence,
        numerics,
        **extra,
    )


def measure_batches(
    plan: RunPlan,
    engines: Engines,
    records: list[dict],
    on_example: Callable[[dict], None],
    memory: Callable[[], dict] | None,
) -> None:
    """Measure every batch with an example not on disk; append the missing rows' records (see the module docstring)."""
    files, cfg = plan.files, plan.config
    done = {r["example_id"] for r in records}
    todo = pending_batches(batch_groups(plan.prepared, cfg.batch_size), done)
    probe_file = files.root / "noise_probes.jsonl"
    if todo:
        first = todo[0][1]
        seeds = [example_seed(0, p.example.id) for p in first]
        decode_batch(engines, "baseline", first, seeds, WARMUP_TOKENS)  # warm-up: allocations, kernel choice
        decode_batch(engines, "speculative", first, seeds, WARMUP_TOKENS)
        append_jsonl(probe_file, {"after": None, "ms": probe_target(plan.session, plan.prepared[0].prompt_ids)})
    for index, items in todo:
        base, spec = measure_batch(engines, plan, index, items)
        for row, item in enumerate(items):
            if item.example.id in done:
                continue  # written before a kill cut the batch short: measured again for its rows' timing only
            record = row_record(engines, plan, item, base[row], spec[row], index, row, len(items))
            append_record(files.examples, record)
            records.append(asdict(record))
            done.add(item.example.id)
            write_summary(files, cfg, plan.spec, records, plan.manifest, memory)
            on_example(records[-1])
        append_jsonl(
            probe_file, {"after": items[-1].example.id, "ms": probe_target(plan.session, items[-1].prompt_ids)}
        )

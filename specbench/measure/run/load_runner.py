"""The measure loop of a load run (`--concurrency C`, `--request-rate R`): the run's examples served together.

Deployed speculative decoding runs under load: many requests in flight on one engine, batched continuously, where
its extra verify work competes with other requests' tokens. A load run asks the engine (one with the `concurrency`
capability, engines/contract.ServesLoad) to serve every example of the run as one load, first on the plain engine,
then on the speculative one (A B B A over `--repeats`), with the same prompts in the same order and the same
schedule (at most C in flight; a new one as soon as one finishes; Poisson arrivals at R/s when a rate is given, seeded
by --seed). Each pass is one LoadBatch line of load_batches.jsonl (its wall seconds and each request's latencies);
once every pass is done, each example becomes an ordinary ExampleRecord (its times the median over repeats, its
tokens and α counts from the first), so identity, α and the divergence classification read as in any run.

A load pass is one timed unit, so a load run is also resumed as one: a run cut short (examples.jsonl not complete)
is measured again whole, its earlier lines removed first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from specbench.decoding.base import DecodeResult
from specbench.engines.contract import LoadSchedule, ServedLoad
from specbench.errors import SpecbenchError
from specbench.files import append_jsonl
from specbench.measure.results.record_writing import append_record
from specbench.measure.results.run_folder import write_summary
from specbench.measure.results.schema import (
    LOAD_FILE,
    ExampleRecord,
    LoadBatch,
    engine_dict,
)
from specbench.measure.run.arms import (
    Engines,
    Prepared,
    engine_order,
    engine_record,
    example_seed,
    merge_repeats,
    probe_target,
)
from specbench.measure.run.batch_runner import classified_record
from specbench.measure.run.planning import RunPlan
from specbench.measure.stats.load import request_latency


def load_schedule(plan: RunPlan) -> LoadSchedule:
    cfg = plan.config
    return LoadSchedule(cfg.concurrency, cfg.request_rate, cfg.seed)


def serve(engines: Engines, arm: str, items: list[Prepared], max_new: int, schedule: LoadSchedule) -> ServedLoad:
    """One arm over every example as one load (the engine's serve_load)."""
    serve_load = getattr(engines.engine, "serve_load", None)
    if serve_load is None:
        raise SpecbenchError(f"--engine {engines.config.engine} serves no load; run without --concurrency")
    seeds = [example_seed(engines.config.seed, p.example.id) for p in items]
    return serve_load(engines.session, engines.job, arm, [p.prompt_ids for p in items], seeds, max_new, schedule)


def load_batch(arm: str, repeat: int, served: ServedLoad, items: list[Prepared], schedule: LoadSchedule) -> LoadBatch:
    """One pass as its load_batches.jsonl line: each request's TTFT and TPOT (stats/load.request_latency)."""
    latencies = [request_latency(r.prefill_s, r.decode_s, len(r.token_ids)) for r in served.results]
    return LoadBatch(
        arm=arm,
        repeat=repeat,
        concurrency=schedule.concurrency,
        request_rate=schedule.request_rate,
        wall_s=served.wall_s,
        output_tokens=sum(len(r.token_ids) for r in served.results),
        example_ids=[p.example.id for p in items],
        n_tokens=[len(r.token_ids) for r in served.results],
        ttft_s=[ttft for ttft, _ in latencies],
        tpot_s=[tpot for _, tpot in latencies],
        submitted_s=list(served.submitted_s),
    )


def example_record(
    engines: Engines, item: Prepared, base_runs: list[DecodeResult], spec_runs: list[DecodeResult]
) -> ExampleRecord:
    """One example's record from its requests in every repeat of both arms (as the batch-1 loop merges repeats)."""
    t = engines.session.target
    merged, repeat_s = merge_repeats(base_runs)
    base = engine_dict(engine_record(merged, t.tokenizer, repeat_s))
    merged, repeat_s = merge_repeats(spec_runs)
    spec = engine_record(merged, t.tokenizer, repeat_s)
    return classified_record(engines, item, base, spec)


def measure_load(
    plan: RunPlan,
    engines: Engines,
    records: list[dict],
    on_example: Callable[[dict], None],
    memory: Callable[[], dict] | None,
) -> None:
    """Serve the run's examples as one load per arm and repeat, then append every example's record (see the module
    docstring); nothing to do when every example is on disk."""
    files, cfg, items = plan.files, plan.config, plan.prepared
    load_file = files.root / LOAD_FILE
    if {r["example_id"] for r in records} >= {p.example.id for p in items} and load_file.exists():
        return
    for path in (files.examples, load_file):  # a load run cut short is measured again whole
        path.unlink(missing_ok=True)
    records.clear()
    schedule = load_schedule(plan)
    engines.warm_up(items[0].prompt_ids)  # both arms once, untimed: allocations, the speculative engine's load
    probe_file = files.root / "noise_probes.jsonl"
    append_jsonl(probe_file, {"after": None, "ms": probe_target(plan.session, items[0].prompt_ids)})
    runs: dict[str, list[list[DecodeResult]]] = {"baseline": [], "speculative": []}
    for arm in engine_order(cfg.repeats, 0):  # A B B A over whole passes
        served = serve(engines, arm, items, plan.max_new_tokens, schedule)
        batch = load_batch(arm, len(runs[arm]), served, items, schedule)
        append_jsonl(load_file, asdict(batch))
        runs[arm].append(served.results)
    append_jsonl(probe_file, {"after": items[-1].example.id, "ms": probe_target(plan.session, items[-1].prompt_ids)})
    for i, item in enumerate(items):
        record = example_record(engines, item, [r[i] for r in runs["baseline"]], [r[i] for r in runs["speculative"]])
        append_record(files.examples, record)
        records.append(asdict(record))
        on_example(records[-1])
    write_summary(files, cfg, plan.spec, records, plan.manifest, memory)

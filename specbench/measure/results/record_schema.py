"""manifest.json, examples.jsonl and placement.jsonl: every field declared once, its meaning with it as metadata.

The results schema but summary.json's Summary (measure/results/schema.py, which reads every name here back out). Each
field says what it means with `doc(...)` or `documented(...)` (measure/results/field_docs.py) and nowhere else:
docs/results.md's tables are generated from it (measure/results/schema_doc.py). SCHEMA_VERSION is declared here, in
the module schema.py imports, so that the two never import each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from specbench.measure.results.field_docs import doc, documented

SCHEMA_VERSION = 1


@dataclass
class EngineRecord:
    """What one engine (baseline or speculative) did on one example: raw counts and times."""

    text: str = field(metadata=doc("decoded output (special tokens skipped)"))
    token_ids: list[int] = field(metadata=doc("generated token ids, EOS included if emitted"))
    n_tokens: int = field(metadata=doc("len(token_ids)"))
    stop_reason: str = field(metadata=doc('"eos" or "length"'))
    prefill_s: float = field(metadata=doc("time to first token (prompt prefill of all models + first token)"))
    decode_s: float = field(metadata=doc("time from the first token to the last"))
    target_calls: int = field(metadata=doc("target forward passes after prefill"))
    draft_calls: int = field(
        metadata=doc("draft forward passes after prefill (0 for model-free drafts and the baseline)")
    )
    drafted: int = field(
        metadata=doc("draft tokens proposed and verified (a tree step: all its nodes, each fed to the target)")
    )
    accepted: int = field(metadata=doc("of those, accepted (a tree step: its accepted path's length)"))
    trials: int = field(
        metadata=doc(
            "acceptance trials: Σ over steps of min(accepted + 1, γ'); a tree step: every child tried, one trial each"
        )
    )
    accept_lengths: list[int] = field(metadata=doc("accepted count of every verification step"))
    draft_lengths: list[int] = field(
        metadata=doc("drafted count γ' of every verification step (same order as accept_lengths)")
    )
    expected_accept: list[float] = field(
        metadata=doc("Σ_x min(p(x), q(x)) at every verified position (up to each step's first rejection)")
    )
    draft_s: float = field(metadata=doc("decode time spent proposing"))
    verify_s: float = field(metadata=doc("decode time spent in target passes and verification"))
    # added after results existed (older records, e.g. a sweep's stored baselines, lack it):
    proposal_lengths: list[int] = field(
        default_factory=list, metadata=doc("tokens offered at each pass the budget did not shorten (0 = none)")
    )
    pass_lengths: list[int] = field(
        default_factory=list,
        metadata=doc(
            "tokens fed to each target pass after prefill (speculative: 1, g+1, or a tree's nodes + 1), in order"
        ),
    )
    repeat_s: list[float] = field(
        default_factory=list,
        metadata=doc("prefill + decode seconds of each timed repeat (--repeats); the times above are their medians"),
    )
    draft_depths: list[int] = field(
        default_factory=list,
        metadata=doc(
            "depth of every verification step's proposal, same order as accept_lengths: a chain's γ' (= its "
            "draft_lengths entry), a token tree's longest root-to-leaf path (its draft_lengths entry counts its "
            "nodes); empty in records from before it existed and from engines that run their own loop"
        ),
    )
    tree_paths: list[list[int] | None] = field(
        default_factory=list,
        metadata=doc(
            "token trees only (absent when every step was a chain): per verification step, in accept_lengths' order, "
            "the accepted path's nodes (their rows 1 + node in the step's target pass), or null for a chain step; "
            "the numerics classifier replays a tree pass from it"
        ),
    )
    # batches (--batch-size > 1) only; absent from records decoded one at a time:
    batch_s: float | None = documented(
        "batches only (absent from batch-1 records): wall seconds of this engine's whole batch, its prefill to its "
        "last row's stop; shared by the batch's rows (the throughput metrics count it once per batch)"
    )
    batch_pass_rows: list[int] = field(
        default_factory=list,
        metadata=doc("batches only: live rows in each batched target pass after prefill (the batch's, shared)"),
    )
    batch_pass_widths: list[int] = field(
        default_factory=list, metadata=doc("batches only: tokens per row fed to each such pass (the batch's, shared)")
    )
    kept_lengths: list[int] = field(
        default_factory=list,
        metadata=doc(
            "batches only: tokens each verify step kept for this row: accepted + 1, or fewer under `--batch-policy min`"
        ),
    )


ENGINE_BATCH_FIELDS = ("batch_s", "batch_pass_rows", "batch_pass_widths", "kept_lengths")  # left out of batch-1 records


@dataclass
class ExampleRecord:
    """One line of examples.jsonl."""

    schema_version: int = field(metadata=doc("SCHEMA_VERSION when the record was written"))
    example_id: str = field(metadata=doc("the task's id of the example"))
    prompt_tokens: int = field(metadata=doc("prompt length in target tokens"))
    reference: str | None = field(metadata=doc("the task's reference output, if any"))
    baseline: EngineRecord = field(
        metadata=doc(
            "the target alone, timed in this run or cell (in sweeps from before per-cell baselines: the shared one)"
        )
    )
    speculative: EngineRecord = field(metadata=doc("the draft proposing, the target verifying"))
    identical: bool = field(metadata=doc("speculative token ids equal the baseline's (expected at T = 0 only)"))
    first_divergence: int | None = field(metadata=doc("index of the first differing token, None when identical"))
    # added later (older records lack it):
    numerics: dict | None = documented(
        "T = 0 only (measure/stats/numerics.py): floor_positions, floor_flips, seconds, divergence (its class, or null)"
    )
    # batches (--batch-size > 1) only; absent from records decoded one at a time:
    batch_size: int | None = documented("batches only (`--batch-size` B > 1; absent from batch-1 lines): the run's B")
    batch_index: int | None = documented(
        "which batch of the run (0, 1, …): examples grouped by B in the task's seeded order"
    )
    row: int | None = documented("the example's row in its batch (0 .. batch_rows − 1)")
    batch_rows: int | None = documented(
        "rows in this batch: B, or fewer in the last batch when B does not divide the examples"
    )
    # added later still (older records, and greedy runs for nll, lack them):
    nll: dict | None = documented(
        "T > 0 only (evidence/perplexity.py): `baseline` and `speculative`, each output's mean negative "
        "log-likelihood per token under the target's raw law (temperature 1, no filters; null for an empty "
        "output); the report's paired equivalence test of quality reads them (TOST, "
        "evidence/perplexity.nll_equivalence)"
    )
    turns: list[dict] | None = documented(
        "multi-turn questions only (Spec-Bench's MT-bench; measure/run/turns.py), else null: one entry per turn "
        "with that turn's `baseline` and `speculative` EngineRecords (its own timing, α counts and accepted "
        "lengths; `baseline` null for an older sweep's shared baseline) and `baseline_prompt_tokens` / "
        "`speculative_prompt_tokens` (the conversation so far, each engine's own answers in it). The record's "
        "`baseline` and `speculative` then sum the turns: counts and seconds added, token lists concatenated"
    )


BATCH_FIELDS = ("batch_size", "batch_index", "row", "batch_rows")  # ExampleRecord's batch fields, omitted while null


@dataclass
class Manifest:
    """manifest.json: what was run, on what, with what; written once, before the first example, and kept by a resume.

    Keys in this order. The run's own fields come first (what a resume compares), then what loading and calibrating
    found, then the environment. `prompt_length`, `engine`, `auto`, `batch_calibration` are absent from the JSON while
    None, so a manifest without them reads as before they existed; folders written before `models` and later fields read
    with those fields None. Each field's doc says what is inside its mapping.
    """

    schema_version: int = field(default=SCHEMA_VERSION, metadata=doc("SCHEMA_VERSION when the run started"))
    run_id: str | None = documented("the folder's name")
    config: dict = field(
        default_factory=dict,
        metadata=doc(
            "the RunConfig (`specbench/config.py`): `target`, `draft`, `task`, `gamma` (an integer, or a γ policy: "
            "auto, adaptive, heuristic), `sampling` (`temperature`, `top_k`, `top_p`), `limit`, `seed`, "
            "`max_new_tokens` (null: the task's), `device`, `dtype`, `engine` (specbench or hf-assisted), "
            "`trust_remote_code`, `backend` (eager, static, compiled); options added later (`draft_confidence`, "
            "`gamma_max`, `repeats`, `exact_shapes`, `batch_size`, `batch_policy`, `prompt_length`) appear only "
            "when not at their default, so older manifests still match on resume"
        ),
    )
    max_new_tokens: int | None = documented("the budget actually used (the config's, or the task's default)")
    task: dict = field(
        default_factory=dict,
        metadata=doc(
            "`name`, `metric` (bleu, rouge or null), `n_examples`, `examples_hash` (SHA-256 of the selected "
            "examples: a resume refuses other data), `example_ids` (in selection order)"
        ),
    )
    prompt_length: dict | None = documented(
        "only with `--prompt-length short|medium|long` (measure/run/buckets.py): `bucket`, `thresholds` ([t33, "
        "t67], the 33rd/67th percentile of the target-tokenized prompt lengths of the task's first 1000 examples "
        "in its seeded order, the pool), `token_range` ([fewest, most] prompt tokens in the bucket), `available` "
        "(the bucket's candidates; fewer than `--limit` runs those), `pool`"
    )
    models: dict | None = documented("`target`: `spec`, `params`, `dtype`, `vocab_size`, `device`; `draft`: `spec`")
    engine: dict | None = documented(
        "`--engine llama-cpp`: `engine` (its name), `engine_version`, `threads` and the GGUF as loaded; "
        "`--engine vllm`: `name`, `version`, `mode`, `compute_threads`, `kv_space_gib`, `engines` (the settings of "
        "every engine the session loaded) and `speculative` (this run's speculative engine, loaded before the "
        "manifest: `speculative_config` with `method` and `num_speculative_tokens`, `enforce_eager`, `mode`, "
        "`kv_space_gib` or `gpu_memory_utilization`, `load_s`)"
    )
    calibration: dict | None = documented(
        "the target's pass-cost curve measured before the run (measure/auto/calibration.py): `dtype`, `device`, "
        "`context_tokens`, `target_ms` and `target_spread` (per pass length 1..γ+1: median ms and relative "
        "spread), `repeats`, `draft`, `draft_ms` (ms per draft token, model drafts), `seconds` (calibration time), "
        "`extra`, `pass_cost` (target_ms relative to a one-token pass)"
    )
    auto: dict | None = documented(
        "only when something was `auto`: the resolved choice and its evidence (`requested`, `dtype`, `draft`, "
        "`gamma`, `policy_gamma`, `reasons`, `calibrations`, `draft_ms`, `pilots`, `candidates`); a resumed run "
        "keeps it"
    )
    batch_calibration: dict | None = documented(
        "only at `--batch-size` B > 1 (measure/calibration.calibrate_batch_grid at b = 1, 2, 4, … B, timed "
        "interleaved, then batch_calibration_dict): `batch_size`, `context_tokens` (the median over the run's "
        "batches of the longest prompt, plus half the budget: rows are padded to their batch's longest), "
        "`repeats`, `target_ms` / `target_spread` (per k = 1..γ+1: median ms and spread of one batched pass of k "
        "tokens per row, t(B, k)), `verify_cost` (γ → t(B, γ+1)/t(B, 1)), `draft_ms` and `draft_cost` (a model "
        "draft's batched token, and ÷ t(B, 1); null for model-free drafts), `rows` (b → k → ms: t(b, k) at every "
        "calibrated row count b, the table the batch cost model prices passes with; absent before it existed), "
        "`draft_rows_ms` (b → ms of a batched draft token; null for model-free drafts), `seconds`; a resumed run "
        "keeps it"
    )
    versions: dict | None = documented("`python`, `torch`, `transformers`, `specbench`")
    git_commit: str | None = documented("the checkout's commit; null for an installed wheel")
    hardware: dict | None = documented(
        "measure/machine/hardware.py: `cpu_model`, `isa_flags`, `cpu_count`, `usable_cpus`, `torch_threads`, "
        "`memory_gib`, `gpus`, `cuda`, `gpu_driver`, `platform`, `machine`"
    )
    created: str | None = documented(
        "local time the run started (ISO 8601); a resume keeps it and the environment fields above"
    )

    OPTIONAL: ClassVar[tuple[str, ...]] = ("prompt_length", "engine", "auto", "batch_calibration")  # absent while None

    def to_dict(self) -> dict:
        """The manifest.json object, keys in field order, the OPTIONAL ones left out while None."""
        return {k: v for k, v in asdict(self).items() if v is not None or k not in self.OPTIONAL}

    @classmethod
    def from_dict(cls, doc: dict) -> Manifest:
        """A manifest.json object (checked by `manifest_problem`) read by attribute; keys it does not declare are
        dropped. `Manifest.from_dict(d).to_dict() == d` for every manifest this version writes."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


def engine_dict(record: EngineRecord) -> dict:
    """An EngineRecord as JSON: the batch fields left out while batch_s is null (a batch-1 record, or a sweep's stored
    baseline, reads as before batches), and tree_paths while no step was a tree (a chain's record reads as before)."""
    row = asdict(record)
    if row["batch_s"] is None:
        for key in ENGINE_BATCH_FIELDS:
            del row[key]
    if all(path is None for path in row["tree_paths"]):
        del row["tree_paths"]
    return row


def record_dict(record: ExampleRecord) -> dict:
    """The JSON line of a record: batch fields left out while null, so a batch-1 line reads as before batches."""
    row = asdict(record)
    for key in BATCH_FIELDS:
        if row[key] is None:
            del row[key]
    for engine in ("baseline", "speculative"):
        row[engine] = engine_dict(getattr(record, engine))
    return row


@dataclass
class RunFiles:
    """Paths of one run directory."""

    root: Path
    manifest: Path = field(init=False)
    examples: Path = field(init=False)
    summary: Path = field(init=False)

    def __post_init__(self):
        self.manifest = self.root / "manifest.json"
        self.examples = self.root / "examples.jsonl"
        self.summary = self.root / "summary.json"


LOAD_FILE = "load_batches.jsonl"  # in the folder of a load run (--concurrency): one LoadBatch per arm and repeat


@dataclass
class LoadBatch:
    """One arm's pass over a load run's requests (measure/run/load_runner.py): one line of load_batches.jsonl."""

    arm: str = field(metadata=doc("`baseline` (plain decoding) or `speculative`"))
    repeat: int = field(metadata=doc("which repeat (0, 1, …); the arms alternate A B B A over the repeats"))
    concurrency: int = field(metadata=doc("the most requests in flight at once"))
    request_rate: float | None = field(metadata=doc("Poisson arrivals per second (null: all at once up to the cap)"))
    wall_s: float = field(metadata=doc("seconds from the first request's submission to the last request's last token"))
    output_tokens: int = field(metadata=doc("Σ tokens every request generated"))
    example_ids: list[str] = field(metadata=doc("the requests, in submission order (the run's examples)"))
    n_tokens: list[int] = field(metadata=doc("each request's output tokens, in the order of example_ids"))
    ttft_s: list[float] = field(
        metadata=doc("each request's time to first token, from its own submission (queueing in the engine included)")
    )
    tpot_s: list[float | None] = field(
        metadata=doc(
            "each request's time per output token after the first: (last − first arrival) ÷ (n − 1); null "
            "for a request of fewer than 2 tokens"
        )
    )
    submitted_s: list[float] = field(
        metadata=doc(
            "when each request was submitted, seconds after the batch started (its due time, or later when "
            "the concurrency cap held it back)"
        )
    )


PLACEMENT_FILE = "placement.jsonl"  # in a sweep folder run by `--executor ray`: one line per cell started on a worker


@dataclass
class CellPlacement:
    """Which node and device measured a sweep cell (measure/run/executors/ray_cluster.py); one per start of a cell."""

    cell_id: str = field(metadata=doc("the cell's run folder"))
    executor: str = field(metadata=doc("`ray`"))
    node: str = field(metadata=doc("the worker's host name"))
    node_ip: str = field(metadata=doc("the worker node's IP address as Ray knows it"))
    device: str = field(metadata=doc("the target's input device on that worker (`cpu`, `cuda:0`, …)"))
    gpu_ids: list = field(metadata=doc("the GPUs Ray gave the worker (`[]` without `--gpus-per-cell`)"))
    pid: int = field(metadata=doc("the worker process"))

"""The results schema: every field a run writes is declared here, once, with its meaning as a comment.

A run directory `results/<run-id>/` holds:
  manifest.json   one `Manifest`: the full config, task and example hash, models, package versions, git commit,
                  hardware
  examples.jsonl  one `ExampleRecord` per line, appended as each example finishes (a kill loses
                  nothing already measured; a rerun skips the ids already there)
  summary.json    one `Summary` (metrics from specbench.measure.metrics), rewritten atomically after every example
  noise_probes.jsonl, baseline_probes.jsonl   the timing-noise checks (measure/noise.py; the second only in
                  cells of sweeps from before per-cell baselines)
  .lock           held (flock) by the process measuring into the directory, so a second one fails fast
A sweep folder holds sweep.json, placement.jsonl under Ray (one `CellPlacement` per line) and one run directory per
cell (measure/sweep_run.py); sweeps from before per-cell baselines also hold baselines/*.jsonl.

The schema is versioned (SCHEMA_VERSION). It is kept apart from the code that writes it (measure/record_writing.py:
the lock and the appends), checks it on read (measure/record_checks.py) and reads it back (measure/records.py), so
that each of those can change without touching the declaration every one of them shares. measure/field_docs.py and
measure/summary_field_docs.py say each field in words for docs/results.md (measure/schema_doc.py generates it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

SCHEMA_VERSION = 1


@dataclass
class EngineRecord:
    """What one engine (baseline or speculative) did on one example: raw counts and times."""

    text: str  # decoded output (special tokens skipped)
    token_ids: list[int]  # generated token ids, EOS included if emitted
    n_tokens: int  # len(token_ids)
    stop_reason: str  # "eos" or "length"
    prefill_s: float  # time to first token (prompt prefill of all models + first token)
    decode_s: float  # time from the first token to the last
    target_calls: int  # target forward passes after prefill
    draft_calls: int  # draft forward passes after prefill (0 for model-free drafts and the baseline)
    drafted: int  # draft tokens proposed and verified
    accepted: int  # of those, accepted
    trials: int  # acceptance trials: Σ over steps of min(accepted + 1, γ')
    accept_lengths: list[int]  # accepted count of every verification step
    draft_lengths: list[int]  # drafted count γ' of every verification step (same order as accept_lengths)
    expected_accept: list[float]  # Σ_x min(p(x), q(x)) at every verified position (up to each step's first rejection)
    draft_s: float  # decode time spent proposing
    verify_s: float  # decode time spent in target passes and verification
    # added after results existed (older records, e.g. a sweep's stored baselines, lack it):
    proposal_lengths: list[int] = field(
        default_factory=list
    )  # tokens offered at each pass the budget did not shorten (0 = none)
    pass_lengths: list[int] = field(
        default_factory=list
    )  # tokens fed to each target pass after prefill (speculative: 1 or g+1), in order
    repeat_s: list[float] = field(
        default_factory=list
    )  # prefill + decode seconds of each timed repeat (--repeats); the times above are their medians
    # batches (--batch-size > 1) only; absent from records decoded one at a time:
    # wall seconds of this engine's whole batch (its prefill to its last row's stop); shared by the batch's rows
    batch_s: float | None = None
    batch_pass_rows: list[int] = field(
        default_factory=list
    )  # live rows in each batched target pass after prefill (the batch's, shared)
    batch_pass_widths: list[int] = field(
        default_factory=list
    )  # tokens per row fed to each such pass (the batch's, shared)
    kept_lengths: list[int] = field(
        default_factory=list
    )  # tokens each verify step kept for this row: accepted + 1, or fewer under --batch-policy min


ENGINE_BATCH_FIELDS = ("batch_s", "batch_pass_rows", "batch_pass_widths", "kept_lengths")  # left out of batch-1 records


@dataclass
class ExampleRecord:
    """One line of examples.jsonl."""

    schema_version: int  # SCHEMA_VERSION when the record was written
    example_id: str  # the task's id of the example
    prompt_tokens: int  # prompt length in target tokens
    reference: str | None  # the task's reference output, if any
    baseline: EngineRecord  # the target alone, timed in this run or cell (older sweeps: a shared one)
    speculative: EngineRecord  # the draft proposing, the target verifying
    identical: bool  # speculative token ids equal the baseline's (expected at T = 0 only)
    first_divergence: int | None  # index of the first differing token, None when identical
    # added later (older records lack it):
    numerics: dict | None = (
        None  # T = 0 only (measure/numerics.py): floor_positions, floor_flips, seconds, divergence (its class, or null)
    )
    # batches (--batch-size > 1) only; absent from records decoded one at a time:
    batch_size: int | None = None  # the run's --batch-size B
    batch_index: int | None = None  # which batch of the run (0, 1, …: examples grouped by B in the task's seeded order)
    row: int | None = None  # the example's row in its batch (0 .. batch_rows − 1)
    batch_rows: int | None = (
        None  # rows in this batch: B, or fewer in the last batch when B does not divide the examples
    )
    # T > 0 only (evidence/perplexity.py; older records and greedy runs lack it):
    # {"baseline", "speculative"}: each output's mean negative log-likelihood per token under the target's raw law
    # (null: empty output)
    nll: dict | None = None
    # multi-turn questions only (measure/turns.py; null for one turn): the engine records above sum the turns
    # per turn: {"baseline", "speculative"}: that turn's EngineRecord (baseline null: a sweep's shared one),
    # {"baseline_prompt_tokens", "speculative_prompt_tokens"}: the conversation's length
    turns: list[dict] | None = None


BATCH_FIELDS = ("batch_size", "batch_index", "row", "batch_rows")  # ExampleRecord's batch fields, omitted while null


@dataclass
class Summary:
    """summary.json: the run's identity and every metric derived from its records, in this order.

    The one declaration of the summary's keys: run_folder.write_summary fills the run fields,
    metrics.summarize the metric fields (their definitions are in its module docstring), and a
    key that is not declared here fails the writer (`summary_dict`). Fields a run cannot fill
    are null: an empty run has no α, a sampled run no identity line, a plain run no baseline drift.
    """

    schema_version: int = SCHEMA_VERSION  # this module's SCHEMA_VERSION when the summary was written
    # --- the run (run_folder.write_summary)
    run_id: str | None = None  # the run folder's name (a sweep cell: its cell id)
    target: str | None = None  # --target as given (a preset, hub id or local path)
    draft: str | None = None  # --draft as given, or the draft an auto choice resolved to
    engine: str | None = None  # specbench (our loop), hf-assisted (transformers' assisted generation) or llama-cpp
    engine_version: str | None = None  # llama-cpp: llama-cpp-python's version (null for the torch engines)
    threads: int | None = None  # llama-cpp: llama.cpp's CPU threads (null for the torch engines)
    task: str | None = None  # the task's name
    gamma: int | str | None = None  # γ, or the γ policy's name (adaptive, heuristic) drafting up to gamma_max
    dtype: str | None = None  # the models' dtype (float32, bfloat16, ...)
    temperature: float | None = None  # sampling temperature; 0 is greedy
    top_k: int | None = None  # top-k filter applied to p and q alike (0: off)
    top_p: float | None = None  # nucleus filter applied to p and q alike (1: off)
    seed: int | None = None  # the run's seed (each example derives its own from it and its id)
    repeats: int | None = None  # timed repeats per example and engine (the times are their medians)
    exact_shapes: bool | None = None  # every target pass padded to γ+1 tokens (one compiled shape)
    batch_size: int | None = None  # examples decoded together (--batch-size; 1: one at a time)
    batch_policy: str | None = None  # B > 1: ragged (each row its own accepted prefix) or min (all rows by the minimum)
    max_new_tokens: int | None = None  # the generation budget per example
    prompt_length: str | None = None  # --prompt-length: all, or the short / medium / long tertile of prompt tokens
    prompt_length_thresholds: list[float] | None = (
        None  # a bucket's [t33, t67]: prompt-token tertiles of the task's pool
    )
    prompt_length_range: list[int] | None = None  # a bucket's [fewest, most] prompt tokens among its candidates
    complete: bool | None = None  # every selected example is measured (n_examples == the manifest's n_examples)
    # --- measured (metrics.summarize)
    n_examples: int | None = None  # records summarized
    alpha: float | None = None  # Σ accepted / Σ trials: MLE of the per-token acceptance probability
    alpha_expected: float | None = None  # mean over verified positions of Σ_x min(p(x), q(x))
    acceptance_rate: float | None = None  # Σ accepted / Σ drafted (vLLM's draft acceptance rate)
    mean_accepted_length: float | None = None  # mean accepted drafts per verification step (no bonus token)
    # peers' names and conventions (metrics.peer_metrics, metrics.spec_bench_metrics):
    mean_acceptance_length: float | None = (
        None  # vLLM's mean acceptance length: 1 + Σ accepted / drafting steps (the bonus token counted; ~ #MAT)
    )
    acceptance_rate_per_position: list[float | None] | None = (
        None  # vLLM's per-position rates: [i-1] = steps accepting draft i ÷ steps that drafted at least i tokens
    )
    mean_accepted_tokens: float | None = (
        None  # Spec-Bench's #MAT: tokens emitted per target pass, prefill's pass and the bonus/correction token counted
    )
    spec_bench_speedup: float | None = (
        None  # Spec-Bench's speedup: mean over questions of speculative tokens/s ÷ that mean for the baseline
    )
    tokens_per_target_call: float | None = None  # decode tokens / target passes
    c: float | None = None  # draft seconds per drafted token / baseline seconds per decoded token
    verify_cost: float | None = None  # seconds per verification pass / baseline seconds per decoded token
    draft_calls_per_step: float | None = None  # draft forward passes per verification step
    speedup: float | None = None  # speculative tokens/s ÷ baseline tokens/s, prefill + decode
    speedup_ci95: list[float | None] | None = None  # [low, high] 95 % bootstrap interval of speedup over examples
    speedup_median_example: float | None = None  # median of the examples' own speedups
    decode_speedup_ci95: list[float | None] | None = None  # [low, high] 95 % bootstrap interval of decode_speedup
    decode_speedup: float | None = None  # the speedup over decode time and decode tokens only
    # the primary measure and its companions (measure/statistics.py; docs/statistics.md):
    speedup_geomean: float | None = None  # PRIMARY: geometric mean over examples of each one's throughput ratio
    speedup_geomean_ci95: list[float | None] | None = (
        None  # its 95 % Student t interval over examples; null below statistics.MIN_INTERVAL_N (interval_note says so)
    )
    slower_share: float | None = None  # share of examples slower than plain decoding (their own ratio < 1)
    slower_share_ci95: list[float | None] | None = None  # its 95 % Clopper–Pearson interval
    speedup_median_example_ci95: list[float | None] | None = (
        None  # 95 % distribution-free interval of the median example (order statistics; null for n < 6)
    )
    time_ratio: float | None = None  # Σ baseline seconds ÷ Σ speculative seconds, whatever each engine emitted
    time_ratio_ci95: list[float | None] | None = None  # its paired 95 % BCa interval; null below MIN_INTERVAL_N
    identical_examples: int | None = None  # examples whose speculative tokens equal the baseline's (B = 1 only)
    speedup_identical: float | None = None  # the primary measure over the identical examples only
    speedup_identical_ci95: list[float | None] | None = None  # its 95 % t interval; null below MIN_INTERVAL_N
    interval_note: str | None = None  # why the intervals above are null (too few examples), else null
    measures_disagree: list[str] | None = (
        None  # pairs of the measures above (and speedup) whose 95 % intervals do not overlap; [] when none
    )
    baseline_tokens_per_s: float | None = None  # baseline throughput, prefill included
    speculative_tokens_per_s: float | None = None  # speculative throughput, prefill included
    baseline_ttft_s: float | None = None  # baseline mean time to first token
    speculative_ttft_s: float | None = None  # speculative mean time to first token
    baseline_tpot_s: float | None = None  # baseline time per output token after the first: Σ decode s ÷ Σ decode tokens
    speculative_tpot_s: float | None = None  # the same for speculative decoding
    baseline_tpot_p50_s: float | None = None  # median over examples of each one's decode s ÷ its decode tokens
    baseline_tpot_p99_s: float | None = None  # 99th percentile of the same (linear interpolation)
    speculative_tpot_p50_s: float | None = None  # median over examples of each one's speculative time per output token
    speculative_tpot_p99_s: float | None = None  # 99th percentile of the same
    baseline_s: float | None = None  # Σ baseline seconds (prefill + decode)
    speculative_s: float | None = None  # Σ speculative seconds (prefill + decode)
    draft_s: float | None = None  # Σ speculative decode seconds spent proposing
    verify_s: float | None = None  # Σ speculative decode seconds in target passes and verification
    overhead_s: float | None = None  # Σ speculative decode seconds in neither (the loop itself)
    baseline_tokens: int | None = None  # Σ baseline tokens
    speculative_tokens: int | None = None  # Σ speculative tokens
    drafted: int | None = None  # Σ drafts proposed and verified
    accepted: int | None = None  # Σ drafts accepted
    trials: int | None = None  # Σ acceptance trials (the denominator of alpha)
    full_gamma_steps: int | None = None  # verification steps that drafted all γ tokens
    target_calls: int | None = None  # Σ speculative target passes after prefill
    accepted_length_histogram: list[int] | None = (
        None  # steps with 0..γ accepted among full_gamma_steps ([] without any)
    )
    identical_rate: float | None = None  # share of examples whose speculative tokens equal the baseline's
    greedy_identity: float | None = None  # identical_rate at T = 0 (must be 1.0); null when sampling
    first_divergences: list[int] | None = None  # first differing index of every non-identical example
    predicted_tokens_per_call: float | None = None  # Eq. 1 from the measured α over the proposals made
    predicted_speedup: float | None = None  # the paper's Theorem 3.8 from the measured α and c
    predicted_speedup_extended: float | None = None  # Theorem 3.8 with the measured verify cost and proposal lengths
    predicted_target_calls: float | None = None  # the cost model's expected target passes for these outputs
    predicted_decode_speedup: float | None = None  # the cost model's decode_speedup for these outputs
    suspect_timing: bool | None = None  # the noise moved (or may have moved) the speedup: rerun on an idle machine
    timing_notes: list[str] | None = None  # what the noise checks saw, one sentence per check (also when harmless)
    speedup_stability: str | None = None  # stable / moved / unsure: the two A B B A halves' speedups (--repeats 2)
    repeat_halves_ratio: float | None = None  # first pairs' geometric-mean speedup ÷ second pairs'
    repeat_halves_ci90: list[float | None] | None = None  # its paired 90 % Student t interval (TOST against ±δ)
    identity_line: str | None = None  # at T = 0: "n/N identical" and how divergences were classified
    divergences_numerics: int | None = None  # at T = 0: divergences at near-ties the verify-shaped pass flips
    divergences_unexplained: int | None = None  # at T = 0: divergences numerics do not explain (candidate bugs)
    divergences_unclassified: int | None = None  # at T = 0: divergences without a classification
    numerics_explained_share: float | None = None  # divergences_numerics / divergences
    numerics_floor: float | None = None  # share of baseline positions whose argmax a (γ+1)-token pass flips
    numerics_floor_flips: int | None = None  # those flips
    numerics_floor_positions: int | None = None  # the positions checked
    numerics_cost_share: float | None = None  # the classifier's seconds ÷ the timed seconds
    numerics_margin_range: list[float] | None = None  # [0, largest baseline margin the floor saw flip]: numerics' range
    divergences_above_margin_range: int | None = None  # replay said numerics, margin above that range: unexplained
    # --- batches (metrics.batch_metrics; null at batch size 1 except the row throughputs and row α)
    baseline_row_tokens_per_s: float | None = (
        None  # mean over examples of each one's tokens ÷ its own seconds, baseline
    )
    speculative_row_tokens_per_s: float | None = None  # the same for speculative decoding (what one request sees)
    alpha_row_mean: float | None = None  # mean over examples (rows) of each one's own α (alpha is the pooled one)
    alpha_row_range: list[float | None] | None = None  # [lowest, highest] α of one example (row)
    tokens_per_batch_pass: float | None = (
        None  # B > 1: Σ decode tokens of all rows ÷ Σ batched target passes (a batch's passes: its longest row's)
    )
    # B > 1: calibrated t(B, γ+1) ÷ t(B, 1), a batched pass over γ+1 tokens per row in one-token batched passes
    batch_verify_cost: float | None = None
    batch_draft_cost: float | None = (
        None  # B > 1: calibrated batched draft-model token ÷ batched one-token target pass (0: model-free)
    )
    # B > 1: the batch cost model's decode speedup (measure/batch_model.py): each row's measured steps drawn at random,
    # rows leaving as they finish, passes priced by the calibrated t(b, k)
    predicted_speedup_batch: float | None = None
    # B > 1: both engines' measured pass shapes priced by the calibrated t(b, k): what target passes alone explain of
    # decode_speedup
    replayed_speedup_batch: float | None = None
    # --- the run's context (run_folder.write_summary)
    baseline_drift: float | None = None  # older sweep cells: re-timed ÷ stored s of their shared baseline (worst)
    auto: dict | None = None  # auto choices: requested, reasons, pilot_alpha, predicted speedups
    auto_predicted_speedup: float | None = (
        None  # auto (replay pilot): the choice's end-to-end speedup predicted before timing (measure/prediction.py)
    )
    auto_predicted_interval: list[float] | None = (
        None  # its 95 % prediction interval for the run's geometric mean over its examples
    )
    auto_prediction_ratio: float | None = None  # measured speedup_geomean ÷ auto_predicted_speedup
    auto_predicts_slower: bool | None = None  # auto's chosen configuration was predicted below 1× (timed anyway)
    hardware: str | None = None  # one sentence naming the machine (measure/hardware.describe)
    quality: dict | None = None  # metric, baseline and speculative scores (BLEU or ROUGE), CIs at T > 0
    peak_memory_mb: float | None = (
        None  # peak memory while this call measured (MiB): CUDA max allocated, else resident set size
    )
    peak_memory_kind: str | None = (
        None  # what peak_memory_mb is: cuda_max_allocated, rss_since_start (Linux, reset per run) or rss_process_peak
    )

    @classmethod
    def from_dict(cls, doc: dict) -> Summary:
        """A summary.json (checked by `summary_problem`) as a Summary, read by attribute: keys it does not declare (a
        newer writer's, or the `run_dir` a reader adds) are dropped; fields an older writer did not know stay null."""
        return cls(**{k: v for k, v in doc.items() if k in SUMMARY_NAMES})


SUMMARY_NAMES = frozenset(f.name for f in fields(Summary))  # the keys summary.json declares


def summary_dict(values: dict) -> dict:
    """`values` as a complete summary: every Summary field in schema order, null where absent.
    A key Summary does not declare is a writer's bug and raises TypeError."""
    return asdict(Summary(**values))


@dataclass
class Manifest:
    """manifest.json: what was run, on what, with what; written once, before the first example, and kept by a resume.

    Keys in this order. The run's own fields come first (what a resume compares), then what loading and calibrating
    found, then the environment. `prompt_length`, `engine`, `auto`, `batch_calibration` are absent from the JSON while
    None, so a manifest without them reads as before they existed; folders written before `models` and later fields read
    with those fields None. docs/results.md (measure/field_docs.py) says what is inside each mapping.
    """

    schema_version: int = SCHEMA_VERSION  # this module's SCHEMA_VERSION when the run started
    run_id: str | None = None  # the run folder's name
    config: dict = field(default_factory=dict)  # the RunConfig as requested (auto values unresolved): config.to_dict()
    max_new_tokens: int | None = None  # the budget actually used (the config's, or the task's default)
    task: dict = field(default_factory=dict)  # name, metric, n_examples, examples_hash, example_ids
    prompt_length: dict | None = None  # --prompt-length short|medium|long only: the bucket (measure/buckets.py)
    models: dict | None = None  # target: spec, params, dtype, vocab_size, device; draft: spec
    engine: dict | None = None  # --engine llama-cpp only: its name, version, threads and the GGUF as loaded
    calibration: dict | None = None  # the target's pass-cost curve measured before the run (measure/calibration.py)
    auto: dict | None = None  # something was auto: the resolved choice and its evidence (measure/choose.py)
    batch_calibration: dict | None = None  # --batch-size B > 1 only: the batched pass costs t(b, k)
    versions: dict | None = None  # python, torch, transformers, specbench
    git_commit: str | None = None  # the checkout's commit; null for an installed wheel
    hardware: dict | None = None  # measure/hardware.py's identity of the machine
    created: str | None = None  # local time the run started (ISO 8601)

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
    baseline, reads as before batches)."""
    row = asdict(record)
    if row["batch_s"] is None:
        for key in ENGINE_BATCH_FIELDS:
            del row[key]
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


PLACEMENT_FILE = "placement.jsonl"  # in a sweep folder run by `--executor ray`: one line per cell started on a worker


@dataclass
class CellPlacement:
    """Which node and device measured a sweep cell (measure/executors/ray_cluster.py); one per start of a cell."""

    cell_id: str  # the cell's run folder
    executor: str  # "ray" (local sweeps write no placement: every cell ran in the sweep's own process)
    node: str  # the worker's host name
    node_ip: str  # the worker node's IP address as Ray knows it
    device: str  # the torch device of the target's input layer, e.g. cpu or cuda:0
    gpu_ids: list  # the GPUs Ray gave the worker ([] without --gpus-per-cell)
    pid: int  # the worker process

"""The results schema, and reading results back: every field a run writes is declared here, once.

A run directory `results/<run-id>/` holds:
  manifest.json   the full config, task and example hash, models, package versions, git commit, hardware
  examples.jsonl  one `ExampleRecord` per line, appended as each example finishes (a kill loses
                  nothing already measured; a rerun skips the ids already there)
  summary.json    one `Summary` (metrics from specbench.measure.metrics), rewritten atomically after every example
  noise_probes.jsonl, baseline_probes.jsonl   the timing-noise checks (measure/noise.py, a sweep's baseline drift)
  .lock           held (flock) by the process measuring into the directory, so a second one fails fast
A sweep folder holds sweep.json, baselines/*.jsonl and one run directory per cell (measure/sweep_run.py).
The schema is versioned; each field carries its meaning as a comment here, and measure/schema_doc.py
says it in words for docs/results.md (generated from it).

Results are read back by hand-edited, half-copied or foreign files too, so no reader here raises
anything but a one-line SpecbenchError: the `scan_*` readers return what they could use plus a
reason for each thing they skipped, `read_records` turns those reasons into warnings (what the
report lists as skipped), and `load_json_object` fails a run or resume with one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import warnings
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from specbench.errors import SpecbenchError
from specbench.files import append_jsonl, disk_error, open_nofollow, remove_stale_temps, truncate_torn_tail

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
    baseline: EngineRecord  # the target alone (a sweep cell: the shared baseline from baselines/)
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
        None  # its 95 % BCa interval over examples; null below statistics.MIN_INTERVAL_N (interval_note says so)
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
    speedup_identical_ci95: list[float | None] | None = None  # its 95 % BCa interval; null below MIN_INTERVAL_N
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
    suspect_timing: bool | None = None  # a noise check fired: the machine looked busy
    timing_notes: list[str] | None = None  # why suspect_timing is set, one sentence per check
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
    baseline_drift: float | None = None  # a sweep cell: re-timed ÷ stored seconds of a shared baseline (worst)
    auto: dict | None = None  # auto choices: requested, reasons, pilot_alpha, predicted speedups
    auto_predicted_speedup: float | None = (
        None  # auto at T = 0: the choice's end-to-end speedup predicted before timing (measure/prediction.py)
    )
    auto_predicted_interval: list[float] | None = (
        None  # its 95 % prediction interval for the run's geometric mean over its examples
    )
    auto_prediction_ratio: float | None = None  # measured speedup_geomean ÷ auto_predicted_speedup
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
    with those fields None. docs/results.md (measure/schema_doc.py) says what is inside each mapping.
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


def prepare_run_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        os.close(open_nofollow(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
        probe.unlink()
    except OSError as exc:
        raise disk_error(exc, path) from exc
    return path


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


def append_record(path: Path, record: ExampleRecord) -> None:
    append_jsonl(path, record_dict(record))


_HELD_LOCKS: dict[str, int] = {}  # run folders this process holds the lock of → how many run_lock calls hold it


@contextmanager
def run_lock(root: Path):
    """Hold an exclusive lock on a run directory while measuring into it.

    Two processes appending to one examples.jsonl (the same command started twice, or two
    sweeps over one grid) would measure examples twice and interleave their lines; the second
    one fails fast instead. flock locks die with their process, so a killed run leaves no stale
    lock behind. (On a system without fcntl the lock is skipped.) Re-entrant within a process:
    the run is claimed before its models load (claimed_run_dir) and measured under the same lock.
    """
    key = str(Path(root).resolve())
    if key in _HELD_LOCKS:
        _HELD_LOCKS[key] += 1
        try:
            yield
        finally:
            _HELD_LOCKS[key] -= 1
        return
    with flock_run_dir(root):
        _HELD_LOCKS[key] = 1
        try:
            yield
        finally:
            del _HELD_LOCKS[key]


@contextmanager
def claimed_run_dir(root: Path):
    """Make the run folder and hold its lock from before anything is loaded or written until the run ends, so a
    second process with the same run id fails at once (not after loading and calibrating) and never writes the
    manifest. A folder made here that still holds nothing but its lock at the end (a refused run) is removed."""
    made = not root.exists()
    prepare_run_dir(root)
    try:
        with run_lock(root):
            remove_stale_temps(root)  # a kill at a rename left .summary.json.tmp<pid>; only the lock holder sweeps
            yield
    finally:
        if made and [p.name for p in root.iterdir()] in ([], [".lock"]):
            (root / ".lock").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                root.rmdir()


@contextmanager
def flock_run_dir(root: Path):
    """The lock itself, not re-entrant: what another process measuring into `root` holds (run_lock wraps it).
    filelock's FileLock (flock on Unix, msvcrt on Windows; it dies with its process, so a kill leaves no stale
    lock); `.lock` holds who has it, for the refusal's message. A link planted at `.lock` is refused first (our
    open_nofollow, one line), never followed to truncate the file it points to."""
    from filelock import FileLock, Timeout

    path = root / ".lock"
    try:  # never through a link: refused here, before the lock library opens the path
        os.close(open_nofollow(path, os.O_RDWR | os.O_CREAT))
    except OSError as exc:
        raise disk_error(exc, path) from exc
    lock = FileLock(path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise SpecbenchError(
            f"{root} is being measured by {_lock_holder(path)}; wait for it to finish, or give this run "
            f"another --run-id (a sweep: another --sweep-id)"
        ) from None
    except OSError as exc:
        raise disk_error(exc, path) from exc
    try:
        with contextlib.suppress(OSError):  # who holds the lock, for the message above; a full disk must not stop
            fd = open_nofollow(path, os.O_WRONLY | os.O_TRUNC)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(f"specbench process {os.getpid()} on {platform.node()}")
        yield
    finally:
        lock.release()


def _lock_holder(path: Path) -> str:
    """What the holder of a run folder's lock wrote into it ("another process" if unreadable)."""
    try:
        with os.fdopen(open_nofollow(path, os.O_RDONLY), encoding="utf-8", errors="replace") as fh:
            return fh.read().strip() or "another process"
    except (OSError, SpecbenchError):
        return "another process"


def repair_jsonl(path: Path) -> None:
    """Drop a partial last line left by a kill, so appends start on a clean line: the file is truncated to its
    last whole line (files.truncate_torn_tail), never rewritten, so a kill during the repair loses nothing."""
    truncate_torn_tail(path)


def git_commit() -> str | None:
    """The checkout's commit when specbench runs from a git clone; None for an installed wheel (whose
    site-packages may sit inside some unrelated repository: that repository's HEAD would be a lie)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment_info() -> dict:
    """Package versions and hardware, for the manifest."""
    import torch
    import transformers

    import specbench
    from specbench.measure.hardware import hardware_identity

    hw = hardware_identity()
    return {
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "specbench": specbench.__version__,
        },
        "git_commit": git_commit(),
        "hardware": hw,
    }


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


# --------------------------------------------------------------------------- reading results back


def _split_union(annotation: str) -> list[str]:
    """'list[int | None] | None' → ['list[int | None]', 'None']: split on the '|' outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(annotation):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            parts.append(annotation[start:i].strip())
            start = i + 1
    return parts + [annotation[start:].strip()]


_SCALARS = {"str": (str,), "bool": (bool,), "dict": (dict,), "int": (int,), "float": (int, float)}


def conforms(value, annotation: str) -> bool:
    """Whether a JSON value has the type a schema field declares ('int', 'float | None', 'list[int]', ...)."""
    for kind in _split_union(annotation):
        if kind == "None" and value is None:
            return True
        if kind.startswith("list[") and isinstance(value, list):
            if all(conforms(v, kind[5:-1]) for v in value):
                return True
        elif kind in _SCALARS and isinstance(value, _SCALARS[kind]):
            if kind not in ("int", "float") or not isinstance(value, bool):  # JSON true is no number
                return True
    return False


def _field_problem(doc: dict, schema, where: str = "") -> str | None:
    """The first field of `schema` (a dataclass) missing without a default, or of the wrong type; None if none."""
    for f in fields(schema):
        if f.name not in doc:
            if f.default is MISSING and f.default_factory is MISSING:
                return f"{where}{f.name} is missing"
            continue
        if f.type == "EngineRecord":
            continue  # engine_problem checks it
        if not conforms(doc[f.name], str(f.type)):  # a str under `from __future__ import annotations`
            return f"{where}{f.name} is {type(doc[f.name]).__name__}, not {f.type}"
    return None


def engine_problem(doc, where: str) -> str | None:
    """Why `doc` is not an EngineRecord (types, and the invariants the metrics rely on), or None."""
    if not isinstance(doc, dict):
        return f"{where} is {type(doc).__name__}, not an object"
    problem = _field_problem(doc, EngineRecord, f"{where}.")
    if problem:
        return problem
    if doc["n_tokens"] != len(doc["token_ids"]):
        return f"{where}.n_tokens is {doc['n_tokens']} but token_ids holds {len(doc['token_ids'])}"
    steps = zip(doc["accept_lengths"], doc["draft_lengths"])
    if len(doc["accept_lengths"]) != len(doc["draft_lengths"]) or any(not 0 <= n <= g for n, g in steps):
        return f"{where}.accept_lengths do not pair with draft_lengths (0 <= accepted <= drafted at every step)"
    return engine_value_problem(doc, where)


ENGINE_TIMES = ("prefill_s", "decode_s", "draft_s", "verify_s")  # seconds: finite, >= 0
ENGINE_COUNTS = ("n_tokens", "target_calls", "draft_calls", "drafted", "accepted", "trials")  # >= 0


def _finite_non_negative(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < float("inf")


def engine_value_problem(doc: dict, where: str) -> str | None:
    """Values no run writes (a hand edit, a foreign tool): NaN, infinite or negative times, negative counts, more
    accepted than drafted, an acceptance expectation outside [0, 1]. Shared by every reader (report, export)."""
    for key in ENGINE_TIMES:
        if not _finite_non_negative(doc[key]):
            return f"{where}.{key} is {doc[key]}, not a finite number of seconds >= 0"
    for key in ("repeat_s", "batch_s"):
        value = doc.get(key)
        values = value if isinstance(value, list) else [] if value is None else [value]
        if not all(_finite_non_negative(v) for v in values):
            return f"{where}.{key} holds a value that is not a finite number of seconds >= 0"
    for key in ENGINE_COUNTS:
        if doc[key] < 0:
            return f"{where}.{key} is {doc[key]}, a negative count"
    if doc["accepted"] > doc["drafted"]:
        return f"{where}.accepted is {doc['accepted']}, more than the {doc['drafted']} drafted"
    if any(v < 0 for v in doc["token_ids"]):
        return f"{where}.token_ids holds a negative id"
    if not all(_finite_non_negative(v) and v <= 1 + 1e-6 for v in doc["expected_accept"]):
        return f"{where}.expected_accept holds a value outside [0, 1]"
    return None


# the `numerics` field of an ExampleRecord (evidence/numerics.explain_example), as identity_line reads it
NUMERICS_FIELDS = {
    "floor_positions": "int",
    "floor_flips": "int",
    "floor_flip_margins": "list[float]",  # optional: the baseline's top-2 margin at each flip (the margin gate's range)
    "seconds": "float",
    "divergence": "dict | None",
}


def numerics_problem(value) -> str | None:
    """Why an ExampleRecord's `numerics` is neither null nor the classifier's dict, or None."""
    if value is None:
        return None
    for key, annotation in NUMERICS_FIELDS.items():
        if key in value and not conforms(value[key], annotation):
            return f"numerics.{key} is {type(value[key]).__name__}, not {annotation}"
    divergence = value.get("divergence")
    if divergence is not None and not isinstance(divergence.get("kind"), str):
        return "numerics.divergence has no kind"
    return None


def example_problem(row) -> str | None:
    """Why a line of examples.jsonl is not an ExampleRecord the metrics can use, or None."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an example record"
    return (
        _field_problem(row, ExampleRecord)
        or engine_problem(row["baseline"], "baseline")
        or engine_problem(row["speculative"], "speculative")
        or numerics_problem(row.get("numerics"))
        or turns_problem(row.get("turns"))
    )


def turns_problem(value) -> str | None:
    """Why an ExampleRecord's `turns` is neither null nor a list of per-turn engine records, or None."""
    for j, turn in enumerate(value or []):
        if not isinstance(turn, dict):
            return f"turns[{j}] is {type(turn).__name__}, not an object"
        for engine in ("baseline", "speculative"):
            if turn.get(engine) is not None and (problem := engine_problem(turn[engine], f"turns[{j}].{engine}")):
                return problem
    return None


def baseline_row_problem(row) -> str | None:
    """Why a line of a sweep's baselines/*.jsonl is not {"example_id": str, "baseline": EngineRecord}, or None."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not a stored baseline"
    if not isinstance(row.get("example_id"), str):
        return "example_id is missing or not a string"
    return engine_problem(row.get("baseline"), "baseline")


def object_problem(row) -> str | None:
    """Every results JSONL line is a JSON object (the probes' files are checked no further)."""
    return None if isinstance(row, dict) else f"a JSON {type(row).__name__}, not an object"


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < float("inf")


def noise_probe_problem(row) -> str | None:
    """A line of noise_probes.jsonl: {"after": example id or null, "ms": positive milliseconds}."""
    return object_problem(row) or (None if _positive(row.get("ms")) else "ms is not a positive number")


def baseline_probe_problem(row) -> str | None:
    """A line of baseline_probes.jsonl: {"example_id", "stored_s", "fresh_s", "ratio": positive or null,
    "same_tokens"}."""
    if object_problem(row):
        return object_problem(row)
    return None if row.get("ratio") is None or _positive(row["ratio"]) else "ratio is not a positive number or null"


def scan_jsonl(path: Path, check=object_problem) -> tuple[list[dict], list[str]]:
    """Every line of a JSONL file that `check` accepts, and "<path>:<line>: skipped ..." for each other line.

    Lines are split and decoded one by one, so a torn last line (a kill mid-write), stray
    non-UTF-8 bytes or a hand-edited line costs that line only. A missing file has no lines."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"{path}: skipped, unreadable ({exc.strerror or exc})"]
    rows, skipped = [], []
    for i, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            skipped.append(f"{path}:{i}: skipped a line that is not UTF-8 text")
            continue
        except (json.JSONDecodeError, RecursionError):
            skipped.append(f"{path}:{i}: skipped a malformed line (an interrupted write?)")
            continue
        problem = check(row)
        if problem:
            skipped.append(f"{path}:{i}: skipped a line of the wrong shape ({problem})")
        else:
            rows.append(row)
    return rows, skipped


def _warn_all(messages: list[str]) -> None:
    for message in messages:
        warnings.warn(message, stacklevel=3)


def read_records(path: Path, check=object_problem) -> list[dict]:
    """scan_jsonl with each skipped line as a warning (the report lists those as skipped)."""
    rows, skipped = scan_jsonl(path, check)
    _warn_all(skipped)
    return rows


def read_examples(path: Path) -> list[dict]:
    """The ExampleRecords of an examples.jsonl that the metrics can use; every other line is warned about."""
    return read_records(path, example_problem)


def read_json_object(path: Path, what: str) -> tuple[dict | None, str | None]:
    """A JSON object file → (its dict, None), or (None, why it cannot be used). Never raises."""
    try:
        doc = json.loads(Path(path).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return None, f"{path}: no {what}"
    except OSError as exc:
        return None, f"{path}: {what} unreadable ({exc.strerror or exc})"
    except UnicodeDecodeError:
        return None, f"{path}: {what} is not UTF-8 text"
    except (json.JSONDecodeError, RecursionError) as exc:
        return None, f"{path}: {what} is not valid JSON ({str(exc)[:80]})"
    if not isinstance(doc, dict):
        return None, f"{path}: {what} is a JSON {type(doc).__name__}, not an object"
    return doc, None


def load_json_object(path: Path, what: str, fix: str) -> dict:
    """read_json_object for a command that cannot go on without the file: one-line SpecbenchError naming `fix`."""
    doc, problem = read_json_object(path, what)
    if problem or doc is None:
        raise SpecbenchError(f"{problem}; {fix}")
    return doc


def manifest_problem(doc: dict) -> str | None:
    """Why a manifest cannot be compared with a run's, or None (the fields a resume and an export read)."""
    for key, kind in (("config", dict), ("task", dict)):
        if not isinstance(doc.get(key), kind):
            return f"its {key} is missing or not an object"
    return None


def load_manifest(path: Path, fix: str) -> Manifest:
    """A run's manifest.json read by attribute: a one-line SpecbenchError naming `fix` if it is not one."""
    doc = load_json_object(path, "manifest.json", fix)
    problem = manifest_problem(doc)
    if problem:
        raise SpecbenchError(f"{path}: not a specbench manifest ({problem}); {fix}")
    return Manifest.from_dict(doc)


def summary_problem(doc: dict) -> str | None:
    """Why a summary.json cannot be read as a Summary, or None. Keys Summary does not know are kept (a newer
    or older writer's); the ones it declares must have their declared type."""
    declared = {f.name: f.type for f in fields(Summary)}
    for key, value in doc.items():
        if key in declared and not conforms(value, str(declared[key])):
            return f"{key} is {type(value).__name__}, not {declared[key]}"
    if isinstance(doc.get("n_examples"), int) and doc["n_examples"] < 0:
        return "n_examples is negative"
    return summary_value_problem(doc, declared)


SIGNED_SUMMARY_FIELDS = ("seed", "overhead_s", "numerics_margin_range")  # may be below 0; every other number may not


def summary_value_problem(doc: dict, declared: dict) -> str | None:
    """Values no run writes: a NaN or infinite number (the writer stores null), a negative one where the field
    cannot be (times, rates, counts, speedups), γ below 1. One check for every reader (report, export)."""
    for key, value in doc.items():
        if key not in declared:
            continue
        for x in value if isinstance(value, list) else [value]:
            if not isinstance(x, (int, float)) or isinstance(x, bool):
                continue
            if x != x or x in (float("inf"), float("-inf")):
                return f"{key} is {x}, not a finite number (a hand edit?)"
            if x < 0 and key not in SIGNED_SUMMARY_FIELDS:
                return f"{key} is {x}, which cannot be negative"
    if isinstance(doc.get("gamma"), int) and not isinstance(doc["gamma"], bool) and doc["gamma"] < 1:
        return f"gamma is {doc['gamma']}, below 1"
    return None


def read_summary(path: Path) -> tuple[dict | None, str | None]:
    """A summary.json → (its dict, None) or (None, why it was skipped)."""
    doc, problem = read_json_object(path, "summary.json")
    if doc is not None and (shape := summary_problem(doc)):
        return None, f"{path}: skipped, {shape}"
    return doc, problem


def _found(paths: list[Path], name: str) -> list[Path]:
    """Every file called `name` at or under `paths` (a path may be that file itself), sorted, once each."""
    out = set()
    for p in map(Path, paths):
        if p.name == name and p.is_file():
            out.add(p)
        elif p.is_dir():
            out.update(f for f in p.rglob(name) if f.is_file() and not f.is_symlink())  # a link may lead outside
    return sorted(out)


def scan_runs(paths: list[Path]) -> tuple[list[dict], list[str]]:
    """The summary of every run under `paths` (run folders, sweep folders, results/ or summary.json files),
    each with `run_dir` added, and a reason for every summary skipped."""
    rows, notes = [], []
    for path in _found(paths, "summary.json"):
        doc, problem = read_summary(path)
        if problem:
            notes.append(problem)
        elif doc is not None:
            rows.append({**doc, "run_dir": str(path.parent)})
    return rows, notes


def unsummarized_runs(paths: list[Path]) -> list[str]:
    """A note for every run folder under `paths` with a manifest but no summary.json."""
    have = {s.parent for s in _found(paths, "summary.json")}
    return [_unsummarized_note(m.parent) for m in _found(paths, "manifest.json") if m.parent not in have]


def _unsummarized_note(run_dir: Path) -> str:
    return f"{run_dir}: skipped, {unsummarized_reason(run_dir)}"


def unsummarized_reason(run_dir: Path) -> str:
    """Why a run folder with a manifest or records but no summary.json is skipped, and how to repair it (report and
    export say the same)."""
    if (run_dir / "summary.json").is_symlink():
        return "its summary.json is a symbolic link (not followed out of a results folder)"
    records, _ = scan_jsonl(run_dir / "examples.jsonl", example_problem)
    if records:  # killed between a record's append and its summary's write: the resume rebuilds the summary first
        return (
            f"a run folder without summary.json but with {len(records)} example record(s) (killed before the "
            f"summary was written); rerun its command to rebuild the summary and resume"
        )
    return (
        "a run folder without summary.json (killed before its first example finished?); rerun its command to resume it"
    )


def load_runs(paths: list[Path]):
    """Summaries of every run under `paths` (run dirs, sweep dirs or results/) → pandas DataFrame, one row per
    run; each summary skipped is a warning."""
    import pandas as pd

    rows, notes = scan_runs(paths)
    _warn_all(notes)
    return pd.json_normalize(rows) if rows else pd.DataFrame()


def run_identity(run_dir: Path) -> dict:
    """run_id (the folder's name) and sweep_id (the parent's name when it holds sweep.json, else None)."""
    run_dir = Path(run_dir)
    in_sweep = (run_dir.parent / "sweep.json").is_file()
    return {"run_id": run_dir.name, "sweep_id": run_dir.parent.name if in_sweep else None}


def scan_examples(paths: list[Path]) -> tuple[list[dict], list[str]]:
    """Every usable ExampleRecord under `paths` (run folders, sweep folders, results/), each with its
    run_id, sweep_id and run_dir, and a reason for every line skipped."""
    rows, notes = [], []
    for path in _found(paths, "examples.jsonl"):
        records, skipped = scan_jsonl(path, example_problem)
        ids = {**run_identity(path.parent), "run_dir": str(path.parent)}
        rows += [{**ids, **r} for r in records]
        notes += skipped
    return rows, notes


def load_examples(path: Path):
    """examples.jsonl of a run folder, or of every run in a sweep folder or results/ → pandas DataFrame,
    one row per example with run_id, sweep_id and run_dir and nested fields flattened (baseline.*, speculative.*).
    Each line skipped is a warning."""
    import pandas as pd

    rows, notes = scan_examples([Path(path)])
    _warn_all(notes)
    return pd.json_normalize(rows)


# --------------------------------------------------------------------------- where sweep cells ran (executors)

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


def placement_problem(row) -> str | None:
    """A line of placement.jsonl: an object with a string cell_id, node and device."""
    problem = object_problem(row)
    if problem:
        return problem
    bad = [k for k in ("cell_id", "node", "device") if not isinstance(row.get(k), str)]
    return f"{bad[0]} is missing or not a string" if bad else None


def read_placements(sweep_dir: Path) -> dict[str, list[dict]]:
    """cell id → its placements, in the order the cells were started ({} for a sweep run locally)."""
    out: dict[str, list[dict]] = {}
    for row in read_records(Path(sweep_dir) / PLACEMENT_FILE, placement_problem):
        out.setdefault(row["cell_id"], []).append(row)
    return out

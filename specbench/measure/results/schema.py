"""The results schema: every field a run writes is declared once, with its meaning, unit and label as metadata.

A run directory `results/<run-id>/` holds:
  manifest.json   one `Manifest`: the full config, task and example hash, models, package versions, git commit,
                  hardware
  examples.jsonl  one `ExampleRecord` per line, appended as each example finishes (a kill loses
                  nothing already measured; a rerun skips the ids already there)
  summary.json    one `Summary` (metrics from specbench.measure.stats.metrics), rewritten atomically after every example
  load_batches.jsonl  a load run (--concurrency) only: one `LoadBatch` per arm and repeat, the batch's wall time and
                  each request's latencies (the summary's load fields derive from it)
  noise_probes.jsonl, baseline_probes.jsonl   the timing-noise checks (measure/machine/noise.py; the second only in
                  cells of sweeps from before per-cell baselines)
  .lock           held (flock) by the process measuring into the directory, so a second one fails fast
A sweep folder holds sweep.json, placement.jsonl under Ray (one `CellPlacement` per line) and one run directory per
cell (measure/run/sweep_run.py); sweeps from before per-cell baselines also hold baselines/*.jsonl.

Summary is declared below; SCHEMA_VERSION, Manifest, ExampleRecord, EngineRecord, LoadBatch and CellPlacement in
results/record_schema.py, and read from here too. Each field says what it means as its metadata (`doc(...)`,
`documented(...)`: results/field_docs.py), the one place that says it: results/schema_doc.py generates
docs/results.md and the `run` command's rows and units from it. The schema is versioned (SCHEMA_VERSION). It is kept
apart from the code that writes it (results/record_writing.py: the lock and the appends), checks it on read
(results/record_checks.py) and reads it back (results/records.py), so that each of those can change without touching
the declaration every one of them shares.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from specbench.measure.results.field_docs import doc, documented
from specbench.measure.results.record_schema import (
    BATCH_FIELDS,
    ENGINE_BATCH_FIELDS,
    LOAD_FILE,
    PLACEMENT_FILE,
    SCHEMA_VERSION,
    CellPlacement,
    EngineRecord,
    ExampleRecord,
    LoadBatch,
    Manifest,
    RunFiles,
    engine_dict,
    record_dict,
)
from specbench.measure.results.summary_groups import BatchFields, LoadFields

__all__ = [
    "BATCH_FIELDS",
    "ENGINE_BATCH_FIELDS",
    "LOAD_FILE",
    "PLACEMENT_FILE",
    "SCHEMA_VERSION",
    "SUMMARY_NAMES",
    "CellPlacement",
    "EngineRecord",
    "ExampleRecord",
    "LoadBatch",
    "Manifest",
    "RunFiles",
    "Summary",
    "engine_dict",
    "record_dict",
    "summary_dict",
]


@dataclass
class SummaryHead:
    """The run's identity and what its records measure: the first of the summary's field groups."""

    schema_version: int = field(
        default=SCHEMA_VERSION, metadata=doc("this module's SCHEMA_VERSION when the summary was written")
    )
    # --- the run (run_folder.write_summary)
    run_id: str | None = documented("the run folder's name (a sweep cell: its cell id)")
    target: str | None = documented("--target as given (a preset, hub id or local path)")
    draft: str | None = documented("--draft as given, or the draft an auto choice resolved to")
    engine: str | None = documented(
        "specbench (our loop), hf-assisted (transformers' assisted generation) or llama-cpp"
    )
    engine_version: str | None = documented("llama-cpp: llama-cpp-python's version (null for the torch engines)")
    threads: int | None = documented("llama-cpp: llama.cpp's CPU threads (null for the torch engines)")
    task: str | None = documented("the task's name")
    gamma: int | str | None = documented("γ, or the γ policy's name (adaptive, heuristic) drafting up to gamma_max")
    dtype: str | None = documented("the models' dtype (float32, bfloat16, ...)")
    temperature: float | None = documented("sampling temperature; 0 is greedy")
    top_k: int | None = documented("top-k filter applied to p and q alike (0: off)")
    top_p: float | None = documented("nucleus filter applied to p and q alike (1: off)")
    seed: int | None = documented("the run's seed (each example derives its own from it and its id)")
    repeats: int | None = documented("timed repeats per example and engine (the times are their medians)")
    exact_shapes: bool | None = documented("every target pass padded to γ+1 tokens (one compiled shape)")
    batch_size: int | None = documented("examples decoded together (`--batch-size`; 1: one at a time)")
    batch_policy: str | None = documented(
        "B > 1: ragged (each row its own accepted prefix) or min (all rows by the minimum)"
    )
    max_new_tokens: int | None = documented("the generation budget per example", unit="tokens")
    prompt_length: str | None = documented(
        "`--prompt-length`: all, or the short / medium / long tertile of prompt tokens"
    )
    prompt_length_thresholds: list[float] | None = documented(
        "a bucket's [t33, t67]: prompt-token tertiles of the task's pool (null for all)"
    )
    prompt_length_range: list[int] | None = documented(
        "a bucket's [fewest, most] prompt tokens among its candidates (null for all)"
    )
    complete: bool | None = documented("every selected example is measured (n_examples == the manifest's n_examples)")
    # --- measured (metrics.summarize)
    n_examples: int | None = documented("records summarized")
    alpha: float | None = documented(
        "Σ accepted / Σ trials: MLE of the per-token acceptance probability",
        unit="share",
        label="α: accepted / acceptance trials",
    )
    alpha_expected: float | None = documented(
        "mean over verified positions of Σ_x min(p(x), q(x))",
        unit="share",
        label="α expected: mean Σ min(p, q) over verified positions",
    )
    acceptance_rate: float | None = documented("Σ accepted / Σ drafted (vLLM's draft acceptance rate)", unit="share")
    mean_accepted_length: float | None = documented(
        "mean accepted drafts per verification step, the bonus token not counted (`mean_acceptance_length` − 1)",
        unit="tokens/step",
    )
    # peers' names and conventions (metrics.peer_metrics, metrics.spec_bench_metrics):
    mean_acceptance_length: float | None = documented(
        "vLLM's mean acceptance length: 1 + Σ accepted ÷ verification steps that drafted, so the bonus or "
        "correction token counts (Spec-Bench's #MAT counts the same way, over every target pass)",
        unit="tokens/step",
        label="mean acceptance length (#MAT)",
    )
    acceptance_rate_per_position: list[float | None] | None = documented(
        "vLLM's per-position acceptance: entry i−1 is the share of verification steps that drafted at least i "
        "tokens whose i-th draft was accepted (at a fixed γ, vLLM's accepted-per-position ÷ drafts); for a token "
        "tree position i is depth i: `accepted_depth_counts` ÷ `draft_depth_counts`",
        unit="share",
        label="acceptance rate of draft positions 1, 2, …",
    )
    draft_depth_counts: list[int] | None = documented(
        "per-depth acceptance's denominators: entry d−1 counts the verification steps whose proposal reached "
        "depth d (a chain: drafted at least d tokens; a token tree: its longest path is at least d deep), from the "
        "records' `draft_depths`",
        unit="passes",
    )
    accepted_depth_counts: list[int] | None = documented(
        "per-depth acceptance: entry d−1 counts the verification steps that accepted at least d drafted tokens "
        "(a tree: whose accepted path reached depth d), d = 1 .. the deepest proposal. Their sum is Σ accepted: "
        "Spec-Bench's #MAT (`mean_accepted_tokens`, the bonus token counted) is 1 + that sum ÷ the target passes "
        "with each turn's prefill pass, less accepted tokens cut after an EOS",
        unit="passes",
    )
    mean_accepted_tokens: float | None = documented(
        "Spec-Bench's #MAT (its evaluation/speed.py's \"#Mean accepted tokens\"): tokens emitted per target pass, "
        "the prefill pass of each turn and the bonus or correction token counted; Σ speculative tokens ÷ Σ "
        "(target_calls + turns)",
        unit="tokens/pass",
    )
    spec_bench_speedup: float | None = documented(
        "Spec-Bench's speedup: mean over questions of speculative tokens ÷ seconds (turns summed, prefill "
        "included) ÷ the same mean for the baseline; a mean of rates, where `speedup` is a ratio of sums",
        unit="×",
    )
    tokens_per_target_call: float | None = documented(
        "decode tokens / target passes (a tree step is one pass)",
        unit="tokens/pass",
        label="decode tokens per target pass",
    )
    c: float | None = documented(
        "draft seconds per drafted token / baseline seconds per decoded token",
        unit="ratio",
        label="draft cost per token / target cost per token",
    )
    verify_cost: float | None = documented(
        "seconds per verification pass / baseline seconds per decoded token",
        unit="ratio",
        label="target pass over γ+1 tokens / one-token pass",
    )
    draft_calls_per_step: float | None = documented("draft forward passes per verification step", unit="passes/step")
    speedup: float | None = documented(
        "speculative tokens/s ÷ baseline tokens/s, prefill + decode",
        unit="×",
        label="speedup, ratio of sums (Σ tokens ÷ Σ s)",
    )
    speedup_ci95: list[float | None] | None = documented(
        "[low, high] 95 % interval of speedup over examples (Student t on its log, delta-method standard error)",
        unit="[low, high]",
    )
    speedup_median_example: float | None = documented(
        "median of the examples' own speedups", unit="×", label="median of the examples' own speedups"
    )
    decode_speedup_ci95: list[float | None] | None = documented(
        "[low, high] 95 % interval of decode_speedup (Student t on its log, delta-method standard error)",
        unit="[low, high]",
    )
    decode_speedup: float | None = documented(
        "the speedup over decode time and decode tokens only",
        unit="×",
        label="speedup of the decode phase (prefill excluded)",
    )
    # the primary measure and its companions (measure/stats/statistics.py; docs/statistics.md):
    speedup_geomean: float | None = documented(
        "PRIMARY: geometric mean over examples of each one's throughput ratio",
        unit="×",
        label="speedup (geometric mean over examples)",
    )
    speedup_geomean_ci95: list[float | None] | None = documented(
        "its 95 % Student t interval over examples; null below statistics.MIN_INTERVAL_N (interval_note says so)",
        unit="[low, high]",
    )
    slower_share: float | None = documented(
        "share of examples slower than plain decoding (their own ratio < 1)", unit="share"
    )
    slower_share_ci95: list[float | None] | None = documented("its 95 % Clopper–Pearson interval", unit="[low, high]")
    speedup_median_example_ci95: list[float | None] | None = documented(
        "95 % distribution-free interval of the median example (order statistics; null for n < 6)", unit="[low, high]"
    )
    time_ratio: float | None = documented(
        "Σ baseline seconds ÷ Σ speculative seconds, whatever each engine emitted", unit="×"
    )
    time_ratio_ci95: list[float | None] | None = documented(
        "its paired 95 % BCa interval; null below MIN_INTERVAL_N", unit="[low, high]"
    )
    identical_examples: int | None = documented("examples whose speculative tokens equal the baseline's (B = 1 only)")
    speedup_identical: float | None = documented("the primary measure over the identical examples only", unit="×")
    speedup_identical_ci95: list[float | None] | None = documented(
        "its 95 % t interval; null below MIN_INTERVAL_N", unit="[low, high]"
    )
    interval_note: str | None = documented("why the intervals above are null (too few examples), else null")
    measures_disagree: list[str] | None = documented(
        "pairs of the measures above (and speedup) that differ by a paired test on the same examples, Holm over the "
        "pairs at 5 %; [] when none"
    )
    baseline_tokens_per_s: float | None = documented(
        "baseline throughput, prefill included", unit="tokens/s", label="baseline throughput"
    )
    speculative_tokens_per_s: float | None = documented(
        "speculative throughput, prefill included", unit="tokens/s", label="speculative throughput"
    )
    baseline_ttft_s: float | None = documented(
        "baseline mean time to first token", unit="s", label="time to first token, baseline"
    )
    speculative_ttft_s: float | None = documented(
        "speculative mean time to first token", unit="s", label="time to first token, speculative"
    )
    baseline_tpot_s: float | None = documented(
        "baseline time per output token after the first (vLLM's TPOT): Σ decode seconds ÷ Σ decode tokens", unit="s"
    )
    speculative_tpot_s: float | None = documented("the same for speculative decoding", unit="s")
    baseline_tpot_p50_s: float | None = documented(
        "median over examples of each one's decode seconds ÷ its decode tokens",
        unit="s",
        label="time per output token p50, baseline",
    )
    baseline_tpot_p99_s: float | None = documented(
        "99th percentile over examples of the same (linear interpolation)",
        unit="s",
        label="time per output token p99, baseline",
    )
    speculative_tpot_p50_s: float | None = documented(
        "median over examples of each one's speculative decode seconds ÷ its decode tokens",
        unit="s",
        label="time per output token p50, speculative",
    )
    speculative_tpot_p99_s: float | None = documented(
        "99th percentile over examples of the same (linear interpolation)",
        unit="s",
        label="time per output token p99, speculative",
    )
    baseline_s: float | None = documented("Σ baseline seconds (prefill + decode)", unit="s")
    speculative_s: float | None = documented("Σ speculative seconds (prefill + decode)", unit="s")
    draft_s: float | None = documented("Σ speculative decode seconds spent proposing", unit="s")
    verify_s: float | None = documented("Σ speculative decode seconds in target passes and verification", unit="s")
    overhead_s: float | None = documented("Σ speculative decode seconds in neither (the loop itself)", unit="s")
    baseline_tokens: int | None = documented("Σ baseline tokens", unit="tokens")
    speculative_tokens: int | None = documented("Σ speculative tokens", unit="tokens")
    drafted: int | None = documented("Σ drafts proposed and verified", unit="tokens")
    accepted: int | None = documented("Σ drafts accepted", unit="tokens")
    trials: int | None = documented("Σ acceptance trials (the denominator of alpha)", unit="tokens")
    full_gamma_steps: int | None = documented("verification steps that drafted all γ tokens", unit="passes")
    target_calls: int | None = documented("Σ speculative target passes after prefill", unit="passes")
    accepted_length_histogram: list[int] | None = documented(
        "steps with 0..γ accepted among full_gamma_steps ([] without any)"
    )
    identical_rate: float | None = documented(
        "share of examples whose speculative tokens equal the baseline's", unit="share"
    )
    greedy_identity: float | None = documented(
        "identical_rate at T = 0 (must be 1.0); null when sampling",
        unit="share",
        label="token-identical to the baseline",
    )
    first_divergences: list[int] | None = documented("first differing index of every non-identical example")
    verified_trees: bool | None = documented(
        "some step verified a token tree (more drafted nodes than depth): the chain formulas below are null, "
        "predicted_speedup_extended prices the tree at its measured tokens per pass"
    )
    predicted_tokens_per_call: float | None = documented(
        "Eq. 1 from the measured α over the proposals made (a tree: the measured tokens per pass)", unit="tokens/pass"
    )
    predicted_speedup: float | None = documented(
        "the paper's Theorem 3.8 from the measured α and c", unit="×", label="paper's Thm 3.8 from measured α, c"
    )
    predicted_speedup_extended: float | None = documented(
        "Theorem 3.8 with the measured verify cost and proposal lengths",
        unit="×",
        label="with the measured verify cost (endless output)",
    )
    predicted_target_calls: float | None = documented(
        "the cost model's expected target passes for these outputs", unit="passes"
    )
    predicted_decode_speedup: float | None = documented(
        "the cost model's decode_speedup for these outputs",
        unit="×",
        label="cost model for these output lengths; compare with decode_speedup",
    )
    suspect_timing: bool | None = documented(
        "the noise moved (or may have moved) the speedup: rerun on an idle machine"
    )
    timing_notes: list[str] | None = documented(
        "what the noise checks saw, one sentence per check (also when harmless)"
    )
    speedup_stability: str | None = documented(
        "stable / moved / unsure: the two A B B A halves' speedups (--repeats 2)"
    )
    repeat_halves_ratio: float | None = documented("first pairs' geometric-mean speedup ÷ second pairs'", unit="×")
    repeat_halves_ci90: list[float | None] | None = documented(
        "its paired 90 % Student t interval (TOST against ±δ)", unit="[low, high]"
    )
    identity_line: str | None = documented('at T = 0: "n/N identical" and how divergences were classified')
    divergences_numerics: int | None = documented("at T = 0: divergences at near-ties the verify-shaped pass flips")
    divergences_unexplained: int | None = documented("at T = 0: divergences numerics do not explain (candidate bugs)")
    divergences_unclassified: int | None = documented("at T = 0: divergences without a classification")
    numerics_explained_share: float | None = documented("divergences_numerics / divergences", unit="share")
    numerics_floor: float | None = documented(
        "share of baseline positions whose argmax a (γ+1)-token pass flips", unit="share"
    )
    numerics_floor_flips: int | None = documented("those flips")
    numerics_floor_positions: int | None = documented("the positions checked")
    numerics_cost_share: float | None = documented("the classifier's seconds ÷ the timed seconds", unit="share")
    numerics_margin_range: list[float] | None = documented(
        "[0, largest baseline margin the floor saw flip]: numerics' range"
    )
    divergences_above_margin_range: int | None = documented(
        "replay said numerics, margin above that range: unexplained"
    )


@dataclass
class SummaryContext:
    """The run's context: drift, the auto choices and their predictions, hardware, quality, memory."""

    # --- the run's context (run_folder.write_summary)
    baseline_drift: float | None = documented(
        "a cell of a sweep from before per-cell baselines: re-timed ÷ stored seconds of its shared baseline (worst)",
        unit="ratio",
    )
    auto: dict | None = documented("auto choices: requested, reasons, pilot_alpha, predicted speedups")
    auto_predicted_speedup: float | None = documented(
        "auto (replay pilot), predicted (held out): the chosen configuration's end-to-end speedup (geometric mean "
        "over examples, prefill included) predicted before any timing from the pilot examples' acceptance (none of "
        "them timed) applied to the timed examples' prompts, lengths and plain steps through the cost model of real "
        "decode-loop step costs; none of the timed examples' acceptance enters (measure/auto/prediction.py). Null "
        "for runs from before issue 40, whose one number is `auto_check_speedup`",
        unit="×",
        label="speedup predicted (held out) by the auto choice",
    )
    auto_predicted_interval: list[float] | None = documented(
        "its 95 % interval: the spread of acceptance between two sets of examples (t over the pilot examples, for "
        "the difference of the pilot's and the timed set's means) and the step pricing's recorded error "
        "(prediction.MODEL_LOG_SD), added in quadrature on the log scale (docs/statistics.md)",
        unit="×",
    )
    auto_prediction_ratio: float | None = documented(
        "measured speedup_geomean ÷ auto_predicted_speedup: how far the held-out prediction was off",
        unit="ratio",
        label="measured ÷ predicted (held out, auto)",
    )
    auto_predicted_n_pilot: int | None = documented(
        "the pilot examples whose acceptance the held-out prediction carries", unit="examples"
    )
    auto_check_speedup: float | None = documented(
        "auto (replay pilot), cost-model check (known acceptance): the same cost model on the timed examples' own "
        "replayed steps (decoded once, untimed, before timing; at T = 0 their exact acceptance path), so measured ÷ "
        "this tests the step prices, not a prediction",
        unit="×",
        label="cost-model check at known acceptance (auto)",
    )
    auto_check_interval: list[float] | None = documented(
        "its 95 % interval from the step pricing's recorded error alone (prediction.MODEL_LOG_SD; the examples are "
        "the timed ones, so none are sampled)",
        unit="×",
    )
    auto_check_ratio: float | None = documented(
        "measured speedup_geomean ÷ auto_check_speedup: the cost model's error at known acceptance",
        unit="ratio",
        label="measured ÷ cost-model check (auto)",
    )
    auto_replay_s: float | None = documented(
        "seconds the cost-model check's untimed decode and replay of the timed examples took (before timing)",
        unit="s",
    )
    auto_predicts_slower: bool | None = documented(
        "auto: the chosen configuration's predicted (held-out) speedup was below 1× (no candidate predicted faster "
        "than plain decoding); the run timed it anyway and said so before timing"
    )
    hardware: str | None = documented("one sentence naming the machine (measure/hardware.describe)")
    quality: dict | None = documented("metric, baseline and speculative scores (BLEU or ROUGE), CIs at T > 0")
    peak_memory_mb: float | None = documented(
        "peak memory while this call measured (MiB): CUDA max allocated, else resident set size; a call that "
        "measured nothing keeps the earlier value",
        unit="MiB",
        label="peak memory while measuring, MiB (peak_memory_kind says which)",
    )
    peak_memory_kind: str | None = documented(
        "what `peak_memory_mb` is: `cuda_max_allocated`, `rss_since_start` (Linux: the high-water mark reset when "
        "measuring starts) or `rss_process_peak` (the process's lifetime peak, elsewhere)"
    )


@dataclass
class Summary(SummaryContext, LoadFields, BatchFields, SummaryHead):
    """summary.json: the run's identity and every metric derived from its records, in this order.

    The one declaration of the summary's keys: run_folder.write_summary fills the run fields,
    metrics.summarize the metric fields (their definitions are in its module docstring), and a
    key that is not declared here fails the writer (`summary_dict`). Fields a run cannot fill
    are null: an empty run has no α, a sampled run no identity line, a plain run no baseline drift.
    """

    # the groups' fields in this order: SummaryHead's, BatchFields', LoadFields', SummaryContext's (a dataclass
    # collects its bases' fields in reverse order), so summary.json keeps one order of keys

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

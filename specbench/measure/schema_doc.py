"""The results schema in words: one table per file of what each field means, and the doc made from them.

The fields themselves are declared once, in measure/records.py (Summary, Manifest, ExampleRecord, EngineRecord);
this module says what each one means (and, for the summary, its unit), in the same order, so that
docs/results.md and the `run` command's table are generated rather than written by hand:

    python -m specbench.measure.schema_doc [PATH]   # writes docs/results.md (or PATH; "-" prints it)

tests/test_schema_doc.py keeps each table equal to its dataclass's fields and docs/results.md equal to
`results_doc()`. The module ships in the wheel, so an installed specbench can print its own schema.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from specbench.measure.schema import SCHEMA_VERSION, EngineRecord, ExampleRecord, Manifest, Summary

DOC_PATH = Path("docs") / "results.md"  # relative to the repository root
PACKAGED_DOC = Path(__file__).with_name("results.md")  # the same text inside the wheel (pyproject package-data)


@dataclass(frozen=True)
class FieldDoc:
    """One field of a results file."""

    name: str  # the JSON key (the dataclass field)
    unit: str  # what its number counts: s, tokens/s, MiB, × (a ratio of throughputs), share, ... ("" for none)
    meaning: str  # one sentence (markdown): what it is and where it comes from
    label: str = ""  # the `run` table's short meaning; "" for a field the table does not show


SUMMARY_FIELDS: tuple[FieldDoc, ...] = (
    FieldDoc("schema_version", "", "this module's SCHEMA_VERSION when the summary was written"),
    FieldDoc("run_id", "", "the run folder's name (a sweep cell: its cell id)"),
    FieldDoc("target", "", "--target as given (a preset, hub id or local path)"),
    FieldDoc("draft", "", "--draft as given, or the draft an auto choice resolved to"),
    FieldDoc("engine", "", "specbench (our loop), hf-assisted (transformers' assisted generation) or llama-cpp"),
    FieldDoc("engine_version", "", "llama-cpp: llama-cpp-python's version (null for the torch engines)"),
    FieldDoc("threads", "", "llama-cpp: llama.cpp's CPU threads (null for the torch engines)"),
    FieldDoc("task", "", "the task's name"),
    FieldDoc("gamma", "", "γ, or the γ policy's name (adaptive, heuristic) drafting up to gamma_max"),
    FieldDoc("dtype", "", "the models' dtype (float32, bfloat16, ...)"),
    FieldDoc("temperature", "", "sampling temperature; 0 is greedy"),
    FieldDoc("top_k", "", "top-k filter applied to p and q alike (0: off)"),
    FieldDoc("top_p", "", "nucleus filter applied to p and q alike (1: off)"),
    FieldDoc("seed", "", "the run's seed (each example derives its own from it and its id)"),
    FieldDoc("repeats", "", "timed repeats per example and engine (the times are their medians)"),
    FieldDoc("exact_shapes", "", "every target pass padded to γ+1 tokens (one compiled shape)"),
    FieldDoc("batch_size", "", "examples decoded together (`--batch-size`; 1: one at a time)"),
    FieldDoc("batch_policy", "", "B > 1: ragged (each row its own accepted prefix) or min (all rows by the minimum)"),
    FieldDoc("max_new_tokens", "tokens", "the generation budget per example"),
    FieldDoc("prompt_length", "", "`--prompt-length`: all, or the short / medium / long tertile of prompt tokens"),
    FieldDoc(
        "prompt_length_thresholds", "", "a bucket's [t33, t67]: prompt-token tertiles of the task's pool (null for all)"
    ),
    FieldDoc("prompt_length_range", "", "a bucket's [fewest, most] prompt tokens among its candidates (null for all)"),
    FieldDoc("complete", "", "every selected example is measured (n_examples == the manifest's n_examples)"),
    FieldDoc("n_examples", "", "records summarized"),
    FieldDoc(
        "alpha",
        "share",
        "Σ accepted / Σ trials: MLE of the per-token acceptance probability",
        "α: accepted / acceptance trials",
    ),
    FieldDoc(
        "alpha_expected",
        "share",
        "mean over verified positions of Σ_x min(p(x), q(x))",
        "α expected: mean Σ min(p, q) over verified positions",
    ),
    FieldDoc("acceptance_rate", "share", "Σ accepted / Σ drafted (vLLM's draft acceptance rate)"),
    FieldDoc(
        "mean_accepted_length",
        "tokens/step",
        "mean accepted drafts per verification step, the bonus token not counted (`mean_acceptance_length` − 1)",
    ),
    FieldDoc(
        "mean_acceptance_length",
        "tokens/step",
        (
            "vLLM's mean acceptance length: 1 + Σ accepted ÷ verification steps that drafted, so the bonus or "
            "correction token counts (Spec-Bench's #MAT counts the same way, over every target pass)"
        ),
        "mean acceptance length (#MAT)",
    ),
    FieldDoc(
        "acceptance_rate_per_position",
        "share",
        (
            "vLLM's per-position acceptance: entry i−1 is the share of verification steps that drafted at least "
            "i tokens whose i-th draft was accepted (at a fixed γ, vLLM's accepted-per-position ÷ drafts)"
        ),
        "acceptance rate of draft positions 1, 2, …",
    ),
    FieldDoc(
        "mean_accepted_tokens",
        "tokens/pass",
        (
            "Spec-Bench's #MAT (its evaluation/speed.py's \"#Mean accepted tokens\"): tokens emitted per target"
            " pass, the prefill pass of each turn and the bonus or correction token counted; Σ speculative "
            "tokens ÷ Σ (target_calls + turns)"
        ),
    ),
    FieldDoc(
        "spec_bench_speedup",
        "×",
        (
            "Spec-Bench's speedup: mean over questions of speculative tokens ÷ seconds (turns summed, prefill"
            " included) ÷ the same mean for the baseline; a mean of rates, where `speedup` is a ratio of sums"
        ),
    ),
    FieldDoc("tokens_per_target_call", "tokens/pass", "decode tokens / target passes", "decode tokens per target pass"),
    FieldDoc(
        "c",
        "ratio",
        "draft seconds per drafted token / baseline seconds per decoded token",
        "draft cost per token / target cost per token",
    ),
    FieldDoc(
        "verify_cost",
        "ratio",
        "seconds per verification pass / baseline seconds per decoded token",
        "target pass over γ+1 tokens / one-token pass",
    ),
    FieldDoc("draft_calls_per_step", "passes/step", "draft forward passes per verification step"),
    FieldDoc(
        "speedup",
        "×",
        "speculative tokens/s ÷ baseline tokens/s, prefill + decode",
        "speedup, ratio of sums (Σ tokens ÷ Σ s)",
    ),
    FieldDoc(
        "speedup_ci95",
        "[low, high]",
        "[low, high] 95 % bootstrap interval of speedup over examples",
    ),
    FieldDoc(
        "speedup_median_example", "×", "median of the examples' own speedups", "median of the examples' own speedups"
    ),
    FieldDoc("decode_speedup_ci95", "[low, high]", "[low, high] 95 % bootstrap interval of decode_speedup"),
    FieldDoc(
        "decode_speedup",
        "×",
        "the speedup over decode time and decode tokens only",
        "speedup of the decode phase (prefill excluded)",
    ),
    FieldDoc(
        "speedup_geomean",
        "×",
        "PRIMARY: geometric mean over examples of each one's throughput ratio",
        "speedup (geometric mean over examples)",
    ),
    FieldDoc(
        "speedup_geomean_ci95",
        "[low, high]",
        ("its 95 % BCa interval over examples; null below statistics.MIN_INTERVAL_N (interval_note says so)"),
    ),
    FieldDoc("slower_share", "share", "share of examples slower than plain decoding (their own ratio < 1)"),
    FieldDoc("slower_share_ci95", "[low, high]", "its 95 % Clopper–Pearson interval"),
    FieldDoc(
        "speedup_median_example_ci95",
        "[low, high]",
        "95 % distribution-free interval of the median example (order statistics; null for n < 6)",
    ),
    FieldDoc("time_ratio", "×", "Σ baseline seconds ÷ Σ speculative seconds, whatever each engine emitted"),
    FieldDoc("time_ratio_ci95", "[low, high]", "its paired 95 % BCa interval; null below MIN_INTERVAL_N"),
    FieldDoc("identical_examples", "", "examples whose speculative tokens equal the baseline's (B = 1 only)"),
    FieldDoc("speedup_identical", "×", "the primary measure over the identical examples only"),
    FieldDoc("speedup_identical_ci95", "[low, high]", "its 95 % BCa interval; null below MIN_INTERVAL_N"),
    FieldDoc("interval_note", "", "why the intervals above are null (too few examples), else null"),
    FieldDoc(
        "measures_disagree",
        "",
        ("pairs of the measures above (and speedup) whose 95 % intervals do not overlap; [] when none"),
    ),
    FieldDoc("baseline_tokens_per_s", "tokens/s", "baseline throughput, prefill included", "baseline throughput"),
    FieldDoc(
        "speculative_tokens_per_s", "tokens/s", "speculative throughput, prefill included", "speculative throughput"
    ),
    FieldDoc("baseline_ttft_s", "s", "baseline mean time to first token", "time to first token, baseline"),
    FieldDoc("speculative_ttft_s", "s", "speculative mean time to first token", "time to first token, speculative"),
    FieldDoc(
        "baseline_tpot_s",
        "s",
        "baseline time per output token after the first (vLLM's TPOT): Σ decode seconds ÷ Σ decode tokens",
    ),
    FieldDoc("speculative_tpot_s", "s", "the same for speculative decoding"),
    FieldDoc(
        "baseline_tpot_p50_s",
        "s",
        "median over examples of each one's decode seconds ÷ its decode tokens",
        "time per output token p50, baseline",
    ),
    FieldDoc(
        "baseline_tpot_p99_s",
        "s",
        "99th percentile over examples of the same (linear interpolation)",
        "time per output token p99, baseline",
    ),
    FieldDoc(
        "speculative_tpot_p50_s",
        "s",
        "median over examples of each one's speculative decode seconds ÷ its decode tokens",
        "time per output token p50, speculative",
    ),
    FieldDoc(
        "speculative_tpot_p99_s",
        "s",
        "99th percentile over examples of the same (linear interpolation)",
        "time per output token p99, speculative",
    ),
    FieldDoc("baseline_s", "s", "Σ baseline seconds (prefill + decode)"),
    FieldDoc("speculative_s", "s", "Σ speculative seconds (prefill + decode)"),
    FieldDoc("draft_s", "s", "Σ speculative decode seconds spent proposing"),
    FieldDoc("verify_s", "s", "Σ speculative decode seconds in target passes and verification"),
    FieldDoc("overhead_s", "s", "Σ speculative decode seconds in neither (the loop itself)"),
    FieldDoc("baseline_tokens", "tokens", "Σ baseline tokens"),
    FieldDoc("speculative_tokens", "tokens", "Σ speculative tokens"),
    FieldDoc("drafted", "tokens", "Σ drafts proposed and verified"),
    FieldDoc("accepted", "tokens", "Σ drafts accepted"),
    FieldDoc("trials", "tokens", "Σ acceptance trials (the denominator of alpha)"),
    FieldDoc("full_gamma_steps", "passes", "verification steps that drafted all γ tokens"),
    FieldDoc("target_calls", "passes", "Σ speculative target passes after prefill"),
    FieldDoc("accepted_length_histogram", "", "steps with 0..γ accepted among full_gamma_steps ([] without any)"),
    FieldDoc("identical_rate", "share", "share of examples whose speculative tokens equal the baseline's"),
    FieldDoc(
        "greedy_identity",
        "share",
        "identical_rate at T = 0 (must be 1.0); null when sampling",
        "token-identical to the baseline",
    ),
    FieldDoc("first_divergences", "", "first differing index of every non-identical example"),
    FieldDoc("predicted_tokens_per_call", "tokens/pass", "Eq. 1 from the measured α over the proposals made"),
    FieldDoc(
        "predicted_speedup",
        "×",
        "the paper's Theorem 3.8 from the measured α and c",
        "paper's Thm 3.8 from measured α, c",
    ),
    FieldDoc(
        "predicted_speedup_extended",
        "×",
        "Theorem 3.8 with the measured verify cost and proposal lengths",
        "with the measured verify cost (endless output)",
    ),
    FieldDoc("predicted_target_calls", "passes", "the cost model's expected target passes for these outputs"),
    FieldDoc(
        "predicted_decode_speedup",
        "×",
        "the cost model's decode_speedup for these outputs",
        "cost model for these output lengths; compare with decode_speedup",
    ),
    FieldDoc("suspect_timing", "", "a noise check fired: the machine looked busy"),
    FieldDoc("timing_notes", "", "why suspect_timing is set, one sentence per check"),
    FieldDoc("identity_line", "", 'at T = 0: "n/N identical" and how divergences were classified'),
    FieldDoc("divergences_numerics", "", "at T = 0: divergences at near-ties the verify-shaped pass flips"),
    FieldDoc("divergences_unexplained", "", "at T = 0: divergences numerics do not explain (candidate bugs)"),
    FieldDoc("divergences_unclassified", "", "at T = 0: divergences without a classification"),
    FieldDoc("numerics_explained_share", "share", "divergences_numerics / divergences"),
    FieldDoc("numerics_floor", "share", "share of baseline positions whose argmax a (γ+1)-token pass flips"),
    FieldDoc("numerics_floor_flips", "", "those flips"),
    FieldDoc("numerics_floor_positions", "", "the positions checked"),
    FieldDoc("numerics_cost_share", "share", "the classifier's seconds ÷ the timed seconds"),
    FieldDoc("numerics_margin_range", "", "[0, largest baseline margin the floor saw flip]: numerics' range"),
    FieldDoc("divergences_above_margin_range", "", "replay said numerics, margin above that range: unexplained"),
    FieldDoc(
        "baseline_row_tokens_per_s",
        "tokens/s",
        (
            "mean over examples of each one's tokens ÷ its own prefill + decode seconds, baseline (at B > 1 a"
            " row's seconds run to its own stop)"
        ),
    ),
    FieldDoc(
        "speculative_row_tokens_per_s",
        "tokens/s",
        "the same for speculative decoding (what one request sees)",
        "per row: a row's tokens ÷ its own seconds, mean (batches)",
    ),
    FieldDoc("alpha_row_mean", "share", "mean over examples (rows) of each one's own α (`alpha` is the pooled one)"),
    FieldDoc("alpha_row_range", "[low, high]", "[lowest, highest] α of one example (row)"),
    FieldDoc(
        "tokens_per_batch_pass",
        "tokens/pass",
        ("B > 1: Σ decode tokens of all rows ÷ Σ batched target passes (a batch's passes: its longest row's)"),
        "decode tokens of all rows per batched target pass (B > 1)",
    ),
    FieldDoc(
        "batch_verify_cost",
        "ratio",
        "B > 1: calibrated t(B, γ+1) ÷ t(B, 1), the manifest's `batch_calibration`",
        "calibrated t(B, γ+1) / t(B, 1) (B > 1)",
    ),
    FieldDoc(
        "batch_draft_cost",
        "ratio",
        ("B > 1: calibrated batched draft-model token ÷ batched one-token target pass (0: model-free)"),
    ),
    FieldDoc(
        "predicted_speedup_batch",
        "×",
        (
            "B > 1: the batch cost model's decode speedup (measure/batch_model.py): a Monte Carlo of each "
            "batch in which every live row draws one of its own measured steps (tokens offered, accepted) per"
            " pass, rows leave as they reach their length, the policy sets how far rows advance, and each "
            "pass costs the calibrated t(b, widest + 1) for its b live rows (plus the draft model's batched "
            "tokens); the baseline's steps cost t(b, 1). Compare with `decode_speedup`"
        ),
        "batch cost model (rows' steps, t(b, k)); compare with decode_speedup (B > 1)",
    ),
    FieldDoc(
        "replayed_speedup_batch",
        "×",
        (
            "B > 1: both engines' measured pass shapes (`batch_pass_rows`, `batch_pass_widths`) priced by the"
            " same calibrated t(b, k): the decode speedup target passes alone explain. Near `decode_speedup` "
            "but far from `predicted_speedup_batch`: the step law was wrong; far from `decode_speedup`: time "
            "outside the calibrated passes"
        ),
        "the measured pass shapes priced by t(b, k) (B > 1)",
    ),
    FieldDoc("baseline_drift", "ratio", "a sweep cell: re-timed ÷ stored seconds of a shared baseline (worst)"),
    FieldDoc("auto", "", "auto choices: requested, reasons, pilot_alpha, predicted speedups"),
    FieldDoc(
        "auto_predicted_speedup",
        "×",
        (
            "auto (replay pilot): the chosen configuration's end-to-end speedup (geometric mean over examples, prefill "
            "included) predicted before any timing from real decode-loop step costs and the pilot's replayed steps, "
            "on pilot examples that did not choose it (measure/prediction.py)"
        ),
        "speedup predicted by the auto choice",
    ),
    FieldDoc(
        "auto_predicted_interval",
        "×",
        "its 95 % prediction interval for the run's geometric mean over its examples",
    ),
    FieldDoc(
        "auto_prediction_ratio",
        "ratio",
        "measured speedup_geomean ÷ auto_predicted_speedup: how far the auto choice's prediction was off",
        "measured ÷ predicted (auto)",
    ),
    FieldDoc(
        "auto_predicts_slower",
        "",
        (
            "auto: the chosen configuration's predicted speedup was below 1× (no candidate predicted faster than plain "
            "decoding); the run timed it anyway and said so before timing"
        ),
    ),
    FieldDoc("hardware", "", "one sentence naming the machine (measure/hardware.describe)"),
    FieldDoc("quality", "", "metric, baseline and speculative scores (BLEU or ROUGE), CIs at T > 0"),
    FieldDoc(
        "peak_memory_mb",
        "MiB",
        (
            "peak memory while this call measured (MiB): CUDA max allocated, else resident set size; a call "
            "that measured nothing keeps the earlier value"
        ),
        "peak memory while measuring, MiB (peak_memory_kind says which)",
    ),
    FieldDoc(
        "peak_memory_kind",
        "",
        (
            "what `peak_memory_mb` is: `cuda_max_allocated`, `rss_since_start` (Linux: the high-water mark "
            "reset when measuring starts) or `rss_process_peak` (the process's lifetime peak, elsewhere)"
        ),
    ),
)
EXAMPLE_FIELDS: tuple[FieldDoc, ...] = (
    FieldDoc("schema_version", "", "SCHEMA_VERSION when the record was written"),
    FieldDoc("example_id", "", "the task's id of the example"),
    FieldDoc("prompt_tokens", "", "prompt length in target tokens"),
    FieldDoc("reference", "", "the task's reference output, if any"),
    FieldDoc("baseline", "", "the target alone (a sweep cell: the shared baseline from baselines/)"),
    FieldDoc("speculative", "", "the draft proposing, the target verifying"),
    FieldDoc("identical", "", "speculative token ids equal the baseline's (expected at T = 0 only)"),
    FieldDoc("first_divergence", "", "index of the first differing token, None when identical"),
    FieldDoc(
        "numerics",
        "",
        ("T = 0 only (measure/numerics.py): floor_positions, floor_flips, seconds, divergence (its class, or null)"),
    ),
    FieldDoc("batch_size", "", "batches only (`--batch-size` B > 1; absent from batch-1 lines): the run's B"),
    FieldDoc("batch_index", "", "which batch of the run (0, 1, …): examples grouped by B in the task's seeded order"),
    FieldDoc("row", "", "the example's row in its batch (0 .. batch_rows − 1)"),
    FieldDoc("batch_rows", "", "rows in this batch: B, or fewer in the last batch when B does not divide the examples"),
    FieldDoc(
        "nll",
        "",
        (
            "T > 0 only (evidence/perplexity.py): `baseline` and `speculative`, each output's mean negative "
            "log-likelihood per token under the target's raw law (temperature 1, no filters; null for an "
            "empty output); the report's perplexity equality test (Mann-Whitney U) reads them"
        ),
    ),
    FieldDoc(
        "turns",
        "",
        (
            "multi-turn questions only (Spec-Bench's MT-bench; measure/turns.py), else null: one entry per "
            "turn with that turn's `baseline` and `speculative` EngineRecords (its own timing, α counts and "
            "accepted lengths; `baseline` null for a sweep's shared baseline) and `baseline_prompt_tokens` / "
            "`speculative_prompt_tokens` (the conversation so far, each engine's own answers in it). The "
            "record's `baseline` and `speculative` then sum the turns: counts and seconds added, token lists "
            "concatenated"
        ),
    ),
)
ENGINE_FIELDS: tuple[FieldDoc, ...] = (
    FieldDoc("text", "", "decoded output (special tokens skipped)"),
    FieldDoc("token_ids", "", "generated token ids, EOS included if emitted"),
    FieldDoc("n_tokens", "", "len(token_ids)"),
    FieldDoc("stop_reason", "", '"eos" or "length"'),
    FieldDoc("prefill_s", "", "time to first token (prompt prefill of all models + first token)"),
    FieldDoc("decode_s", "", "time from the first token to the last"),
    FieldDoc("target_calls", "", "target forward passes after prefill"),
    FieldDoc("draft_calls", "", "draft forward passes after prefill (0 for model-free drafts and the baseline)"),
    FieldDoc("drafted", "", "draft tokens proposed and verified"),
    FieldDoc("accepted", "", "of those, accepted"),
    FieldDoc("trials", "", "acceptance trials: Σ over steps of min(accepted + 1, γ')"),
    FieldDoc("accept_lengths", "", "accepted count of every verification step"),
    FieldDoc("draft_lengths", "", "drafted count γ' of every verification step (same order as accept_lengths)"),
    FieldDoc(
        "expected_accept", "", "Σ_x min(p(x), q(x)) at every verified position (up to each step's first rejection)"
    ),
    FieldDoc("draft_s", "", "decode time spent proposing"),
    FieldDoc("verify_s", "", "decode time spent in target passes and verification"),
    FieldDoc("proposal_lengths", "", "tokens offered at each pass the budget did not shorten (0 = none)"),
    FieldDoc("pass_lengths", "", "tokens fed to each target pass after prefill (speculative: 1 or g+1), in order"),
    FieldDoc(
        "repeat_s",
        "",
        ("prefill + decode seconds of each timed repeat (--repeats); the times above are their medians"),
    ),
    FieldDoc(
        "batch_s",
        "",
        (
            "batches only (absent from batch-1 records): wall seconds of this engine's whole batch, its "
            "prefill to its last row's stop; shared by the batch's rows (the throughput metrics count it once"
            " per batch)"
        ),
    ),
    FieldDoc(
        "batch_pass_rows", "", "batches only: live rows in each batched target pass after prefill (the batch's, shared)"
    ),
    FieldDoc("batch_pass_widths", "", "batches only: tokens per row fed to each such pass (the batch's, shared)"),
    FieldDoc(
        "kept_lengths",
        "",
        ("batches only: tokens each verify step kept for this row: accepted + 1, or fewer under `--batch-policy min`"),
    ),
)
MANIFEST_FIELDS: tuple[FieldDoc, ...] = (
    FieldDoc("schema_version", "", "SCHEMA_VERSION when the run started"),
    FieldDoc("run_id", "", "the folder's name"),
    FieldDoc(
        "config",
        "",
        (
            "the RunConfig (`specbench/config.py`): `target`, `draft`, `task`, `gamma` (an integer, or a γ "
            "policy: auto, adaptive, heuristic), `sampling` (`temperature`, `top_k`, `top_p`), `limit`, "
            "`seed`, `max_new_tokens` (null: the task's), `device`, `dtype`, `engine` (specbench or "
            "hf-assisted), `trust_remote_code`, `backend` (eager, static, compiled); options added later "
            "(`draft_confidence`, `gamma_max`, `repeats`, `exact_shapes`, `batch_size`, `batch_policy`, "
            "`prompt_length`) appear only when not at their default, so older manifests still match on resume"
        ),
    ),
    FieldDoc("max_new_tokens", "", "the budget actually used (the config's, or the task's default)"),
    FieldDoc(
        "task",
        "",
        (
            "`name`, `metric` (bleu, rouge or null), `n_examples`, `examples_hash` (SHA-256 of the selected "
            "examples: a resume refuses other data), `example_ids` (in selection order)"
        ),
    ),
    FieldDoc(
        "prompt_length",
        "",
        (
            "only with `--prompt-length short|medium|long` (measure/buckets.py): `bucket`, `thresholds` "
            "([t33, t67], the 33rd/67th percentile of the target-tokenized prompt lengths of the task's first"
            " 1000 examples in its seeded order, the pool), `token_range` ([fewest, most] prompt tokens in "
            "the bucket), `available` (the bucket's candidates; fewer than `--limit` runs those), `pool`"
        ),
    ),
    FieldDoc("models", "", "`target`: `spec`, `params`, `dtype`, `vocab_size`, `device`; `draft`: `spec`"),
    FieldDoc(
        "engine",
        "",
        "only with `--engine llama-cpp`: `engine` (its name), `engine_version`, `threads` and the GGUF as loaded",
    ),
    FieldDoc(
        "calibration",
        "",
        (
            "the target's pass-cost curve measured before the run (measure/calibration.py): `dtype`, "
            "`device`, `context_tokens`, `target_ms` and `target_spread` (per pass length 1..γ+1: median ms "
            "and relative spread), `repeats`, `draft`, `draft_ms` (ms per draft token, model drafts), "
            "`seconds` (calibration time), `extra`, `pass_cost` (target_ms relative to a one-token pass)"
        ),
    ),
    FieldDoc(
        "auto",
        "",
        (
            "only when something was `auto`: the resolved choice and its evidence (`requested`, `dtype`, "
            "`draft`, `gamma`, `policy_gamma`, `reasons`, `calibrations`, `draft_ms`, `pilots`, "
            "`candidates`); a resumed run keeps it"
        ),
    ),
    FieldDoc(
        "batch_calibration",
        "",
        (
            "only at `--batch-size` B > 1 (measure/calibration.calibrate_batch_grid at b = 1, 2, 4, … B, "
            "timed interleaved, then batch_calibration_dict): `batch_size`, `context_tokens` (the median over"
            " the run's batches of the longest prompt, plus half the budget: rows are padded to their batch's"
            " longest), `repeats`, `target_ms` / `target_spread` (per k = 1..γ+1: median ms and spread of one"
            " batched pass of k tokens per row, t(B, k)), `verify_cost` (γ → t(B, γ+1)/t(B, 1)), `draft_ms` "
            "and `draft_cost` (a model draft's batched token, and ÷ t(B, 1); null for model-free drafts), "
            "`rows` (b → k → ms: t(b, k) at every calibrated row count b, the table the batch cost model "
            "prices passes with; absent before it existed), `draft_rows_ms` (b → ms of a batched draft token;"
            " null for model-free drafts), `seconds`; a resumed run keeps it"
        ),
    ),
    FieldDoc("versions", "", "`python`, `torch`, `transformers`, `specbench`"),
    FieldDoc("git_commit", "", "the checkout's commit; null for an installed wheel"),
    FieldDoc(
        "hardware",
        "",
        (
            "measure/hardware.py: `cpu_model`, `isa_flags`, `cpu_count`, `usable_cpus`, `torch_threads`, "
            "`memory_gib`, `gpus`, `cuda`, `gpu_driver`, `platform`, `machine`"
        ),
    ),
    FieldDoc(
        "created",
        "",
        ("local time the run started (ISO 8601); a resume keeps it and the environment fields above"),
    ),
)


# docs/results.md around the tables (@@NAME@@ marks where each goes)
DOC_TEMPLATE = """\
# Results: what a run writes, field by field

<!-- generated by `python -m specbench.measure.schema_doc` from specbench/measure/schema_doc.py; do not edit -->

`specbench run` and `specbench sweep` write under `results/` (git-ignored). The schema is declared once, in
code: `specbench/measure/schema.py` (`Manifest`, `ExampleRecord`, `EngineRecord`, `Summary`, each field with
a comment), versioned by `SCHEMA_VERSION` (today @@SCHEMA_VERSION@@), which every record, summary, manifest and
sweep.json carries; `specbench/measure/schema_doc.py` says what each field means, and this file is generated
from it. Fields added after results existed have defaults, so folders written by older versions still load,
export and resume (`tests/test_layout.py` proves it on `tests/fixtures/results_v0_1/`).

## Reading results

Load them with pandas:

```python
from pathlib import Path
from specbench.measure.records import load_runs, load_examples

runs = load_runs([Path("results")])  # one row per run (summary.json, flattened)
ex = load_examples(Path("results/<run-id>"))  # one row per example (a sweep or results folder works too)
```

or read one run by attribute: `Summary.from_dict(json.load(f))` and `Manifest.from_dict(...)` from the same
module. Without Python: `specbench report RESULTS` (tables and figures), `specbench export RESULTS --format csv >
runs.csv` (one tidy row per run: axis values, dtype, device, backend, hardware, speedup with its interval,
suspect flag) and `specbench export RESULTS --examples --format parquet --out examples.parquet` (one row per
example, with its run id; parquet needs `pip install pyarrow`).

No reader raises on a damaged file: a torn line, non-UTF-8 bytes or a line of the wrong shape is skipped and
listed (the report's *Skipped* section, the export's notes); `run` and `sweep` fail with one line only when a
file they must trust (a manifest) is unusable.

## Layout

```
results/
  <run-id>/                   one `specbench run` (id: task-draft-g<γ>-t<T>-<hash of the config>, or --run-id)
    manifest.json             what was run, on what, with what: written once, before the first example
    examples.jsonl            one ExampleRecord per line, appended (fsynced) as each example finishes
    summary.json              one Summary, rewritten atomically after every example
    noise_probes.jsonl        the timing-noise probes (measure/noise.py)
    baseline_probes.jsonl     sweep cells only: a shared baseline re-timed before the cell
    .lock                     held while a process measures into the folder
  <sweep-id>/                 one `specbench sweep` (id: a hash of the grid, or --sweep-id)
    sweep.json                the grid, its cells and the task hashes
    placement.jsonl           --executor ray only: which node and device measured each cell
    baselines/<task>-t<T>-k<k>-p<p>.jsonl   the baselines every cell of that sampling setting shares
    <cell-id>/                an ordinary run folder, as above
```

A rerun of the same command finds the same folder and measures only the examples (cells) not yet
on disk; a run folder is resumed only by the same config on the same examples.

## manifest.json: one Manifest

Keys in this order; `prompt_length`, `auto` and `batch_calibration` are absent unless the run has them.

@@MANIFEST@@

Detail of the mappings: `config` is the RunConfig (`specbench/config.py`): `target`, `draft`, `task`, `gamma`
(an integer, or a γ policy: auto, adaptive, heuristic), `sampling` (`temperature`, `top_k`, `top_p`), `limit`,
`seed`, `max_new_tokens` (null: the task's), `device`, `dtype`, `engine` (specbench or hf-assisted),
`trust_remote_code`, `backend` (eager, static, compiled); options added later appear only when not at their
default, so older manifests still match on resume. `hardware` holds `cpu_model`, `isa_flags` (among avx2,
avx512f, avx512_bf16, avx512_fp16, avx512_vnni, amx_tile, amx_bf16, amx_int8, and Arm's asimd, sve, bf16),
`cpu_count`, `usable_cpus`, `torch_threads`, `memory_gib`, `gpus` (name, memory, capability), `cuda`,
`gpu_driver`, `platform`, `machine`. For auto runs, `auto` holds `requested`, the chosen `dtype`/`draft`/`gamma`,
`policy_gamma`, `reasons`, `calibrations` per dtype, `draft_ms` per dtype and draft, `pilots` per draft
(`alpha`, `steps`, `lookup_law`, `examples`) and `candidates` (every (draft, dtype, γ) with its predicted
`speedup` and `ms_per_token`).

## examples.jsonl: one ExampleRecord per line

@@EXAMPLES@@

`baseline` and `speculative` are EngineRecords (the baseline's draft fields are 0 or empty):

@@ENGINE@@

All times use `time.perf_counter` with device synchronization, after a warm-up of both engines.
A line is used only if it has these fields with these types (`numerics`, when present: `floor_positions`,
`floor_flips`, `seconds`, and `divergence` null or an object with a `kind`), `n_tokens == len(token_ids)`,
and `accept_lengths` pairs with `draft_lengths` (0 ≤ accepted ≤ drafted at every step). Any other line
is skipped and listed, and a rerun of `run` measures that example again.

## summary.json: one Summary

Every field is present (null where the run cannot fill it: an empty run has no α, a sampled run no
identity line, a plain run no baseline drift); summaries written before a field existed lack it. The
metrics are derived from the records' raw counts in one place, `specbench/measure/metrics.py`, whose
docstring defines each ratio; a ratio with a zero denominator is null, never 0. Units: × is a ratio of
throughputs (above 1: speculative decoding is faster), share a fraction in [0, 1], [low, high] an interval.

@@SUMMARY@@

## noise_probes.jsonl

One line per probe of a one-token target pass: `{"after": <example id, or null for the probe before the
first example>, "ms": <median milliseconds>}`. How much these drift drives `suspect_timing`.

## baseline_probes.jsonl (sweep cells)

One line per (re)start of a cell that compares against stored baselines: `example_id`, `stored_s` (the
stored baseline's seconds), `fresh_s` (the same example decoded again just before the cell), `ratio`
(fresh ÷ stored; null when the fresh tokens differ, so the times are not comparable), `same_tokens`.
The ratio farthest from 1 is the summary's `baseline_drift`.

## sweep.json

| field | meaning |
|---|---|
| `schema_version` | SCHEMA_VERSION when the sweep started |
| `sweep_id` | the folder's name |
| `created` | when the sweep started |
| `grid` | the SweepGrid: the axes `target`, `drafts`, `gammas`, `temperatures`, `tasks`, and what every cell shares (`top_k`, `top_p`, `limit`, `seed`, `max_new_tokens`, `device`, `dtype`, `engine`, `trust_remote_code`, `backend`, later options when not at their default); a rerun with another grid is refused |
| `tasks` | per task: `n_examples` and `examples_hash` (a rerun on changed data is refused) |
| `cells` | `cell_id` (the cell's run folder) and its full `config` (as in a manifest) |
| `baselines` | the baseline files under `baselines/`, relative to the sweep folder |
| `complete_cells` | the cells finished when the sweep last ended |

## placement.jsonl (sweeps run with `--executor ray`)

One CellPlacement per start of a cell on a Ray worker (a cell restarted after its worker died has
two); a local sweep writes none. The report's setup section lists the nodes and devices per cell.

| field | meaning |
|---|---|
| `cell_id` | the cell's run folder |
| `executor` | `ray` |
| `node` | the worker's host name |
| `node_ip` | the worker node's IP address as Ray knows it |
| `device` | the target's input device on that worker (`cpu`, `cuda:0`, …) |
| `gpu_ids` | the GPUs Ray gave the worker (`[]` without `--gpus-per-cell`) |
| `pid` | the worker process |

## baselines/*.jsonl

One line per example: `{"example_id": ..., "baseline": <EngineRecord>}`. The target alone does not
depend on the draft or γ, so each (task, temperature, top-k, top-p) baseline is measured once, by the
first cell that needs it, and reused by every other cell; the first line for an id wins. A line that is
not a whole EngineRecord is skipped (that example's baseline is measured again).

## The export

`specbench export RESULTS --format csv|parquet` writes one row per run (in Python: `specbench.load_runs(path)`
returns the same table as a pandas DataFrame, `specbench.load_examples(path)` the per-example one): `run_id`,
`sweep_id`, `run_dir`, the axes (`task`, `target`, `draft`, `gamma`, `gamma_policy`, `temperature`, `top_k`,
`top_p`, `dtype`, `device` (the device the target ran on, e.g. `cuda:0`, not the requested `auto`), `backend`,
`engine`, and `confidence` / `batch` where a run has them), `hardware` (the summary's sentence) and `cpu`, then
`n_examples`, `complete`, `speedup_geomean` with `speedup_geomean_ci95_low` / `_high`, `alpha`,
`acceptance_rate`, `mean_acceptance_length`, `mean_accepted_tokens` (#MAT), `tokens_per_target_call`,
`baseline_tokens_per_s`, `speculative_tokens_per_s`, `baseline_ttft_s`, `speculative_ttft_s`,
`baseline_tpot_s`, `speculative_tpot_s`, `speculative_tpot_p50_s`, `speculative_tpot_p99_s`, `speedup` with
`speedup_ci95_low` / `_high`, `decode_speedup` with its interval, `predicted_speedup_extended`, `suspect` (the
noise checks fired), `timing_notes` and `baseline_drift`.
A γ policy's run has its `gamma_max` as `gamma` and the policy's name in `gamma_policy`.
`--examples` writes one row per example instead: its run's id and axes, `example_id`, `prompt_tokens`,
`identical`, `first_divergence`, each engine's counts and times (`baseline_*`, `speculative_*`) and the
example's own `speedup`.
"""  # noqa: E501 (markdown table rows are one line)


# the rows of `specbench run`'s table, in order; each row's label is its FieldDoc.label. A row whose field has a
# `<field>_ci95` companion shows it beside the value. RUN_TABLE is what every run prints (≤ 12 rows at B = 1),
# RUN_TABLE_BATCH is added at B > 1, RUN_TABLE_VERBOSE with --verbose.
RUN_TABLE = (
    "speedup_geomean",
    "baseline_tokens_per_s",
    "speculative_tokens_per_s",
    "alpha",
    "mean_acceptance_length",
    "baseline_ttft_s",
    "speculative_ttft_s",
    "greedy_identity",
)
RUN_TABLE_BATCH = (
    "speculative_row_tokens_per_s",
    "tokens_per_batch_pass",
    "batch_verify_cost",
    "predicted_speedup_batch",
    "replayed_speedup_batch",
)
RUN_TABLE_VERBOSE = (
    "speedup",
    "speedup_median_example",
    "decode_speedup",
    "predicted_decode_speedup",
    "predicted_speedup",
    "predicted_speedup_extended",
    "auto_predicted_speedup",
    "auto_prediction_ratio",
    "alpha_expected",
    "acceptance_rate_per_position",
    "tokens_per_target_call",
    "c",
    "verify_cost",
    "baseline_tpot_p50_s",
    "baseline_tpot_p99_s",
    "speculative_tpot_p50_s",
    "speculative_tpot_p99_s",
    "peak_memory_mb",
)


def run_table_rows(batch: bool = False, verbose: bool = False) -> list[tuple[str, str]]:
    """(summary key, label) for each row of the `run` command's table: the compact rows, then the batch rows
    (batch), then the rest (verbose)."""
    labels = {f.name: f.label for f in SUMMARY_FIELDS}
    names = RUN_TABLE + (RUN_TABLE_BATCH if batch else ()) + (RUN_TABLE_VERBOSE if verbose else ())
    return [(name, labels[name]) for name in names]


def _cell(text: str) -> str:
    return text.replace("|", "|")


def field_table(docs: tuple[FieldDoc, ...], schema: type, units: bool = False) -> str:
    """A markdown table of a schema's fields: name, declared type, (unit,) meaning."""
    types = {f.name: str(f.type) for f in dataclasses.fields(schema)}
    head = "| field | type |" + (" unit |" if units else "") + " meaning |"
    rule = "|---|---|" + ("---|" if units else "") + "---|"
    rows = [
        f"| `{d.name}` | {_cell(types[d.name])} |" + (f" {d.unit} |" if units else "") + f" {_cell(d.meaning)} |"
        for d in docs
    ]
    return "\n".join([head, rule, *rows])


def results_doc() -> str:
    """docs/results.md: the prose below with the four field tables filled in."""
    text = DOC_TEMPLATE
    for marker, value in (
        ("@@SCHEMA_VERSION@@", str(SCHEMA_VERSION)),
        ("@@MANIFEST@@", field_table(MANIFEST_FIELDS, Manifest)),
        ("@@EXAMPLES@@", field_table(EXAMPLE_FIELDS, ExampleRecord)),
        ("@@ENGINE@@", field_table(ENGINE_FIELDS, EngineRecord)),
        ("@@SUMMARY@@", field_table(SUMMARY_FIELDS, Summary, units=True)),
    ):
        text = text.replace(marker, value)
    return text


def write_results_doc(argv: list[str]) -> int:
    """Write docs/results.md and its copy in the package (or argv[0]; "-" prints it)."""
    text = results_doc()
    dests = [argv[0]] if argv else [str(DOC_PATH), str(PACKAGED_DOC)]
    if dests == ["-"]:
        sys.stdout.write(text)
        return 0
    from specbench.files import atomic_write_text

    for dest in dests:
        atomic_write_text(Path(dest), text)
        print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(write_results_doc(sys.argv[1:]))

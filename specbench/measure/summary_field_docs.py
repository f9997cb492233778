"""What each field of summary.json means: its unit, one sentence, and the `run` command's label where it shows it.

One FieldDoc per Summary field (measure/schema.py), in the same order. docs/results.md's summary table
(measure/schema_doc.py) and `specbench run`'s table (its units and labels) are generated from it, so a metric is
explained in one place; tests/test_schema_doc.py keeps it equal to Summary's fields.
"""

from __future__ import annotations

from specbench.measure.field_docs import FieldDoc

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
        ("its 95 % Student t interval over examples; null below statistics.MIN_INTERVAL_N (interval_note says so)"),
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
    FieldDoc("speedup_identical_ci95", "[low, high]", "its 95 % t interval; null below MIN_INTERVAL_N"),
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
    FieldDoc("suspect_timing", "", "the noise moved (or may have moved) the speedup: rerun on an idle machine"),
    FieldDoc("timing_notes", "", "what the noise checks saw, one sentence per check (also when harmless)"),
    FieldDoc("speedup_stability", "", "stable / moved / unsure: the two A B B A halves' speedups (--repeats 2)"),
    FieldDoc("repeat_halves_ratio", "×", "first pairs' geometric-mean speedup ÷ second pairs'"),
    FieldDoc("repeat_halves_ci90", "[low, high]", "its paired 90 % Student t interval (TOST against ±δ)"),
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
    FieldDoc(
        "baseline_drift",
        "ratio",
        "a cell of a sweep from before per-cell baselines: re-timed ÷ stored seconds of its shared baseline (worst)",
    ),
    FieldDoc("auto", "", "auto choices: requested, reasons, pilot_alpha, predicted speedups"),
    FieldDoc(
        "auto_predicted_speedup",
        "×",
        (
            "auto (replay pilot): the chosen configuration's end-to-end speedup (geometric mean over examples, prefill "
            "included) predicted before any timing from real decode-loop step costs and replayed steps, on the run's "
            "own examples decoded once untimed (the choice was made on other, pilot examples; measure/auto_pilot.py)"
        ),
        "speedup predicted by the auto choice",
    ),
    FieldDoc(
        "auto_predicted_interval",
        "×",
        "its 95 % interval from the cost model's recorded error (prediction.MODEL_LOG_SD; examples are not sampled)",
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

"""Every ratio specbench reports, derived from raw counts in one documented place.

Records store counts and seconds only (specbench.measure.results.schema); this module turns a list of
example records into the summary. A ratio whose denominator is zero is NaN (written as
null in JSON), never 0 or an exception.

Definitions (sums run over all examples of a run):
  alpha                 Σ accepted / Σ trials — MLE of the per-token acceptance probability;
                        a step with n accepted of γ' drafted is min(n+1, γ') Bernoulli trials
  alpha_expected        mean of Σ_x min(p(x), q(x)) over verified positions (the paper's β, averaged)
  acceptance_rate       Σ accepted / Σ drafted (what vLLM calls draft acceptance rate)
  mean_acceptance_length  1 + Σ accepted / verification steps that drafted (vLLM's; the bonus token counted)
  acceptance_rate_per_position  [i-1]: steps whose i-th draft was accepted ÷ steps that drafted ≥ i tokens (a token
                        tree: steps whose accepted path reached depth i ÷ steps whose tree reached depth i)
  draft_depth_counts, accepted_depth_counts  [d-1]: verification steps whose proposal reached depth d (a chain:
                        γ' ≥ d), and steps that accepted ≥ d drafted tokens (each record's draft_depths; records
                        without them: draft_lengths, exact for chains); their ratio is the rate above
  *_tpot_s, *_tpot_p50_s, *_tpot_p99_s  time per output token after the first (vLLM's TPOT): Σ decode s ÷
                        Σ decode tokens, and the median and 99th percentile of each example's own
  tokens_per_target_call  decode tokens / target calls (the first token comes from prefill)
  c                     draft seconds per drafted token / baseline seconds per decoded token
  verify_cost           seconds per target verification pass / baseline seconds per decoded token
                        (how much a pass over γ+1 tokens costs relative to one token)
  speedup               walltime speedup per generated token: (Σ spec tokens / Σ spec seconds) ÷
                        (Σ baseline tokens / Σ baseline seconds), prefill + decode. At T = 0 both
                        engines emit the same tokens and this is Σ baseline s / Σ speculative s; at
                        T > 0 they emit different samples (of different lengths), so time per token
                        is the fair comparison
  speedup_ci95          95 % interval of `speedup` over examples: Student's t on its log with the delta
                        method's standard error (statistics.ratio_of_sums; a percentile bootstrap before issue 40):
                        how much the ratio depends on which examples ran
  speedup_median_example  median over examples of each example's own speedup (beside the ratio of sums)
  decode_speedup        the same over decode time and decode tokens only
  identity_line         at T = 0: identical examples and how each divergence was classified (numerics:
                        a near-tie the verify-shaped pass flips by itself; unexplained: a candidate bug),
                        with divergences_numerics / _unexplained / _unclassified and numerics_explained_share;
  numerics_floor        at T = 0: share of the baseline's positions whose argmax a teacher-forced (γ+1)-token
                        pass changes (measure/stats/numerics.py): the divergence this hardware forces on any verifier
  numerics_cost_share   the classifier's seconds (after each example's timing) ÷ the timed decode seconds
  suspect_timing        True when the noise moved (or may have moved) the speedup: the run's two A B B A
                        halves differ beyond ±δ, or, without a verdict from them, the noise checks
                        (measure/machine/noise.py: probes, the baseline's per-token spread, disagreeing repeats) fired;
                        `timing_notes` says what was seen, `speedup_stability` what it did to the speedup
  predicted_decode_speedup  what the cost model predicts for decode_speedup from the measured α, c,
                        verify cost and proposal law, for outputs of the lengths measured (EOS and
                        budget endings priced in: theory.decode_cost_table)
  predicted_target_calls  the same model's expected number of target passes, beside target_calls
                        (every predicted_*: a cost-model check at the measured acceptance; trees: tree_check)
  accepted_length_histogram  steps with 0..γ accepted, over steps that drafted all γ tokens
                        (shorter proposals — lookup misses, the end of the budget — are not the theory's law);
                        [] when no step drafted all γ
Batches (--batch-size B > 1): a batch's rows share its wall time, so every throughput above
(speedup and its interval, decode_speedup, tokens/s, *_s) is Σ tokens ÷ Σ batch seconds (each
engine's `batch_s`, once per batch; a batch's prefill is its rows' longest), the bootstrap
resamples batches, speedup_median_example is the median batch, and c and verify_cost are
per batched step against the baseline's batched step (a row's draft_s/verify_s/target_calls are
the batch's shared ones, so a batch counts its rows' largest). Beside them:
  baseline_row_tokens_per_s / speculative_row_tokens_per_s  mean over rows of a row's tokens ÷ its own
                        prefill + decode seconds (what one request sees; at B = 1 every example's own)
  alpha_row_mean, alpha_row_range  each row's own α (accepted / trials), averaged and its [min, max];
                        `alpha` stays the pooled one
  tokens_per_batch_pass  Σ decode tokens of all rows ÷ Σ batched target passes
  batch_verify_cost, batch_draft_cost  the calibrated t(B, γ+1)/t(B, 1) and batched draft token (batch_prediction)
  predicted_speedup_batch  the batch cost model's decode speedup (measure/auto/batch_model.py): each row's own
                        measured steps drawn at random, rows leaving as they finish, every pass priced by
                        the calibrated t(b, k) at its live rows b and widest draft; compare with decode_speedup
  replayed_speedup_batch  both engines' measured pass shapes priced by the same t(b, k): the share of the
                        measured time that target passes explain
Spec-Bench's names for the same runs (spec_bench_metrics):
  mean_accepted_tokens  Spec-Bench's "#Mean accepted tokens" (#MAT), as its evaluation/speed.py computes it:
                        the mean of accept_lengths, where every target pass, prefill's included, logs the
                        tokens it emitted (accepted drafts + the bonus or correction token) = Σ speculative
                        tokens / Σ (target passes after prefill + one prefill pass per turn)
  spec_bench_speedup    Spec-Bench's speedup: the mean over questions of each one's speculative tokens ÷ its
                        seconds (turns summed, prefill included), ÷ the same mean for the baseline. A mean of
                        rates, unlike `speedup` (a ratio of sums): short answers weigh as much as long ones.
                        speed.py counts the baseline's tokens by re-tokenizing its answer text minus one (a
                        BOS); this counts the tokens the baseline generated (docs/report-and-export.md: the two
                        differ by about the EOS, one token per turn)
The summary's keys are declared once, in schema.Summary; summarize fills its metric fields.
"""

from __future__ import annotations

import math
from statistics import mean

from specbench.measure.auto.predicted_metrics import accepted_length_histogram, cost_model_checks
from specbench.measure.stats.metric_units import (
    NAN,
    batch_unit,
    batches,
    engine_totals,
    is_batched,
    passes_after_prefill,
    per_example_speedups,
    ratio,
)

# Sweep folders written before cells timed their own baselines (issue 26 item 7) shared one baseline per task and
# re-timed it before each cell; a re-timed baseline more than 10 % off the stored one flags such a cell when read.
BASELINE_DRIFT_TOLERANCE = 0.10


BOOTSTRAP_RESAMPLES = 2000


def bootstrap_speedup_ci(
    records: list[dict],
    decode_only: bool = False,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> list[float]:
    """The ratio-of-sums speedup's interval over examples (or batches): Student's t on its log with the delta
    method's standard error (statistics.ratio_of_sums), from 2 units on as before. Named for what it was: until issue
    40 a percentile bootstrap, which the coverage study found the worst of the three; `resamples` and `seed` are
    accepted for older callers and unused (the interval involves no resampling)."""
    from specbench.measure.stats.statistics import ratio_of_sums

    cols = per_example_speedups(records, decode_only)  # per example, or per batch (the timing unit)
    if len(cols[0]) < 2 or not all(c.sum() > 0 for c in cols):
        return [NAN, NAN]
    spec_tok, spec_s, base_tok, base_s = cols
    est = ratio_of_sums(spec_tok, spec_s, base_tok, base_s, level=level, min_n=2)
    return [est.low, est.high] if est.has_interval else [NAN, NAN]


def primary_metrics(records: list[dict]) -> dict:
    """The primary measure (statistics.PRIMARY_MEASURE) and its companions, each with its interval: the share of
    examples slower than plain decoding, the median example, the total-time ratio and the identical examples'
    figure; intervals are null below statistics.MIN_INTERVAL_N units (interval_note says so), and
    measures_disagree names the pairs that differ by a paired test on the same examples (agreement.measures_disagree:
    bootstrap standard error of each difference, t, Holm over the pairs at 5 %)."""
    import numpy as np

    from specbench.measure.stats import statistics as st
    from specbench.measure.stats.agreement import measures_disagree

    spec_tok, spec_s, base_tok, base_s = per_example_speedups(records)  # per example, or per batch
    logs = st.log_ratios(spec_tok, spec_s, base_tok, base_s)
    finite = logs[~np.isnan(logs)]
    geo = st.geometric_mean(finite)
    slower = st.share(int((finite < 0).sum()), len(finite))
    med = st.median(np.exp(finite))
    total = st.time_ratio(base_s, spec_s)
    same = None
    if not is_batched(records):
        keep = np.array([bool(r.get("identical")) for r in records])
        same = st.geometric_mean(logs[keep & ~np.isnan(logs)])
    flags = None if is_batched(records) else np.array([bool(r.get("identical")) for r in records])
    disagree = [
        f"{d['a']} {d['values'][0]:.2f}× vs {d['b']} {d['values'][1]:.2f}×: paired ratio {d['ratio']:.3f} "
        f"[{d['low']:.3f}, {d['high']:.3f}] on the same examples (Holm-adjusted p = {d['p_holm']:.2g})"
        for d in measures_disagree((spec_tok, spec_s, base_tok, base_s), flags)
    ]
    return {
        "speedup_geomean": geo.value,
        "speedup_geomean_ci95": geo.ci(),
        "slower_share": slower.value,
        "slower_share_ci95": slower.ci(),
        "speedup_median_example_ci95": med.ci(),
        "time_ratio": total.value,
        "time_ratio_ci95": total.ci(),
        "identical_examples": int(same.n) if same is not None else None,
        "speedup_identical": same.value if same is not None else NAN,
        "speedup_identical_ci95": same.ci() if same is not None else [NAN, NAN],
        "interval_note": geo.note,
        "measures_disagree": disagree,
    }


def median_example_speedup(records: list[dict]) -> float:
    import numpy as np

    st, ss, bt, bs = per_example_speedups(records)
    with np.errstate(divide="ignore", invalid="ignore"):
        each = (st / ss) / (bt / bs)
    each = each[np.isfinite(each)]
    return float(np.median(each)) if each.size else NAN


def timing_noise(records: list[dict], probes: list[float] | None = None, drift: float | None = None) -> dict:
    """suspect_timing and timing_notes from the noise checks (machine/noise.py), weighed by what they did to the
    speedup (machine/stability.py), and, for a cell of a sweep folder from before per-cell baselines, its shared
    baseline's drift (None otherwise)."""
    from specbench.measure.machine.noise import busy_probes, noise_verdict, paired_speedups
    from specbench.measure.machine.stability import judge, speedup_stability

    token_ms = [
        1e3 * r["baseline"]["decode_s"] / (r["baseline"]["n_tokens"] - 1)
        for r in records
        if r["baseline"]["n_tokens"] > 1
    ]
    repeats = [
        max(x) / min(x)
        for r in records
        for e in ("baseline", "speculative")
        if len(x := r[e].get("repeat_s") or []) > 1 and min(x) > 0
    ]
    pairs = paired_speedups(records)
    machine = busy_probes(probes or [])  # the machine itself seen slow: decides an unsure run (stability.judge)
    reasons = machine + noise_verdict([], token_ms, repeats, pairs)
    busy = bool(machine)
    if drift is not None and abs(drift - 1.0) > BASELINE_DRIFT_TOLERANCE:
        reasons.append(f"the shared baseline, re-timed before this cell, took {drift:.2f}× its stored time")
        busy = True
    stability = speedup_stability(pairs)
    suspect, notes = judge(reasons, stability, busy=busy)
    out = {"suspect_timing": suspect, "timing_notes": notes}
    if stability is not None:
        out |= {
            "speedup_stability": stability.outcome,
            "repeat_halves_ratio": stability.ratio,
            "repeat_halves_ci90": [stability.low, stability.high],
        }
    return out


def steps_timed(totals: dict) -> bool:
    """Whether the speculative engine timed its steps (specbench's loop on any backend): verify time or passes seen."""
    return totals["verify_s"] > 0 or totals["target_calls"] > 0


def summarize(
    records: list[dict], gamma: int, greedy: bool, probes: list[float] | None = None, drift: float | None = None
) -> dict:
    """Records of one run (ExampleRecord dicts that record_checks.example_problem accepts) → the summary's metric
    fields, each declared in schema.Summary (see the module docstring for their definitions)."""
    if not records:
        return {"n_examples": 0, "suspect_timing": False, "timing_notes": []}
    base = engine_totals(records, "baseline")
    spec = engine_totals(records, "speculative")
    n = len(records)
    base_time = base["prefill_s"] + base["decode_s"]
    spec_time = spec["prefill_s"] + spec["decode_s"]
    base_decode_tokens = base["n_tokens"] - n  # the first token of each example comes from prefill
    spec_decode_tokens = spec["n_tokens"] - n
    t_token = ratio(base["decode_s"], base_decode_tokens)  # baseline seconds per decoded token
    expected = [x for r in records for x in r["speculative"]["expected_accept"]]
    lengths = [x for r in records for x in r["speculative"]["accept_lengths"]]
    steps_with_draft = len(lengths)
    full = [
        n
        for r in records
        for n, g in zip(r["speculative"]["accept_lengths"], r["speculative"].get("draft_lengths", []))
        if g == gamma
    ]  # steps that drafted all γ tokens: the ones the theory's law describes
    out = {
        "n_examples": n,
        "alpha": ratio(spec["accepted"], spec["trials"]),
        "alpha_expected": mean(expected) if expected else NAN,
        "acceptance_rate": ratio(spec["accepted"], spec["drafted"]),
        **spec_bench_metrics(records),
        "mean_accepted_length": mean(lengths) if lengths else NAN,
        **peer_metrics(records),
        "tokens_per_target_call": ratio(spec_decode_tokens, spec["target_calls"]),
        # an engine that runs its own loop (hf-assisted, vllm) splits no step into draft and verify time, nor counts
        # its passes: its c and verify cost were not measured (NaN), not free (0)
        "c": ratio(ratio(spec["draft_s"], spec["drafted"]), t_token) if steps_timed(spec) else math.nan,
        "verify_cost": ratio(ratio(spec["verify_s"], spec["target_calls"]), t_token) if steps_timed(spec) else math.nan,
        "draft_calls_per_step": ratio(spec["draft_calls"], steps_with_draft),
        "speedup": ratio(ratio(spec["n_tokens"], spec_time), ratio(base["n_tokens"], base_time)),
        "speedup_ci95": bootstrap_speedup_ci(records),
        "speedup_median_example": median_example_speedup(records),
        **primary_metrics(records),
        "decode_speedup_ci95": bootstrap_speedup_ci(records, decode_only=True),
        "decode_speedup": ratio(
            ratio(spec_decode_tokens, spec["decode_s"]), ratio(base_decode_tokens, base["decode_s"])
        ),
        "baseline_tokens_per_s": ratio(base["n_tokens"], base_time),
        "speculative_tokens_per_s": ratio(spec["n_tokens"], spec_time),
        "baseline_ttft_s": ratio(base["prefill_s"], n),
        "speculative_ttft_s": ratio(spec["prefill_s"], n),
        "baseline_s": base_time,
        "speculative_s": spec_time,
        "draft_s": spec["draft_s"],
        "verify_s": spec["verify_s"],
        "overhead_s": spec["decode_s"] - spec["draft_s"] - spec["verify_s"],
        "baseline_tokens": base["n_tokens"],
        "speculative_tokens": spec["n_tokens"],
        "drafted": spec["drafted"],
        "accepted": spec["accepted"],
        "trials": spec["trials"],
        "full_gamma_steps": len(full),
        "target_calls": spec["target_calls"],
        "accepted_length_histogram": accepted_length_histogram(full, gamma),
        "identical_rate": (identical := mean(1.0 if r["identical"] else 0.0 for r in records)),
        "greedy_identity": identical if greedy else None,
        "first_divergences": [r["first_divergence"] for r in records if r["first_divergence"] is not None],
    }
    out.update(row_metrics(records), **(batch_metrics(records) if is_batched(records) else {}))
    out.update(predicted_and_checks(records, out, gamma, greedy, probes, drift))
    return out


def row_metrics(records: list[dict]) -> dict:
    """Per-row throughput of each engine and each row's own α (see the module docstring)."""

    def row_rate(engine):
        rates = [ratio(r[engine]["n_tokens"], r[engine]["prefill_s"] + r[engine]["decode_s"]) for r in records]
        rates = [x for x in rates if not math.isnan(x)]
        return mean(rates) if rates else NAN

    alphas = [r["speculative"]["accepted"] / r["speculative"]["trials"] for r in records if r["speculative"]["trials"]]
    return {
        "baseline_row_tokens_per_s": row_rate("baseline"),
        "speculative_row_tokens_per_s": row_rate("speculative"),
        "alpha_row_mean": mean(alphas) if alphas else NAN,
        "alpha_row_range": [min(alphas), max(alphas)] if alphas else [NAN, NAN],
    }


def _batch_max(rows: list[dict], engine: str, key: str, minus: int = 0) -> float:
    return max(r[engine][key] - minus for r in rows)


def batch_draft_positions(rows: list[dict]) -> int:
    """The batched draft passes' positions: per step, the longest draft among the rows still in the batch
    (live rows step together, so step i of every row is the same batched step). The largest per-row total
    would undercount whenever rows' longest drafts fall on different steps."""
    lengths = [r["speculative"].get("draft_lengths") or [] for r in rows]
    steps = max((len(x) for x in lengths), default=0)
    return sum(max(x[i] for x in lengths if i < len(x)) for i in range(steps))


def batch_metrics(records: list[dict]) -> dict:
    """B > 1: the throughput and cost fields recomputed over batches (a batch's rows share its wall time)."""
    groups = batches(records)
    t = {e: [batch_unit(b, e) for b in groups] for e in ("baseline", "speculative")}
    d = {e: [batch_unit(b, e, decode_only=True) for b in groups] for e in ("baseline", "speculative")}
    tok = {e: sum(x for x, _ in t[e]) for e in t}
    sec = {e: sum(y for _, y in t[e]) for e in t}
    dtok = {e: sum(x for x, _ in d[e]) for e in d}
    dsec = {e: sum(y for _, y in d[e]) for e in d}
    base_steps = sum(_batch_max(b, "baseline", "n_tokens", 1) for b in groups)  # batched one-token steps
    passes = sum(_batch_max(b, "speculative", "target_calls") for b in groups)  # batched target passes
    draft_s = sum(_batch_max(b, "speculative", "draft_s") for b in groups)
    verify_s = sum(_batch_max(b, "speculative", "verify_s") for b in groups)
    drafted = sum(batch_draft_positions(b) for b in groups)
    t_step = ratio(dsec["baseline"], base_steps)  # baseline seconds per batched step
    return {
        "speedup": ratio(ratio(tok["speculative"], sec["speculative"]), ratio(tok["baseline"], sec["baseline"])),
        "decode_speedup": ratio(
            ratio(dtok["speculative"], dsec["speculative"]), ratio(dtok["baseline"], dsec["baseline"])
        ),
        "baseline_tokens_per_s": ratio(tok["baseline"], sec["baseline"]),
        "speculative_tokens_per_s": ratio(tok["speculative"], sec["speculative"]),
        "baseline_s": sec["baseline"],
        "speculative_s": sec["speculative"],
        "draft_s": draft_s,
        "verify_s": verify_s,
        "overhead_s": dsec["speculative"] - draft_s - verify_s,
        "c": ratio(ratio(draft_s, drafted), t_step),
        "verify_cost": ratio(ratio(verify_s, passes), t_step),
        "tokens_per_batch_pass": ratio(dtok["speculative"], passes),
    }


def predicted_and_checks(
    records: list[dict], measured: dict, gamma: int, greedy: bool, probes: list[float] | None, drift: float | None
) -> dict:
    """Beside the measured metrics: the cost model's predictions from them, the noise verdict and, at T = 0,
    the identity line."""
    out = cost_model_checks(records, measured, gamma)
    out.update(timing_noise(records, probes, drift))
    if greedy:
        from specbench.measure.stats.margin_gate import identity_line

        out.update(identity_line(records))
    return out


def question_seconds(record: dict, engine: str) -> float:
    """One question's seconds, prefill included, its turns' wall times summed as Spec-Bench does (per-turn records)."""
    turns = record.get("turns") or []
    if turns and all(t.get(engine) for t in turns):
        return sum(t[engine]["prefill_s"] + t[engine]["decode_s"] for t in turns)
    return record[engine]["prefill_s"] + record[engine]["decode_s"]


def question_rate(records: list[dict], engine: str) -> float:
    """Mean over questions of tokens ÷ seconds (numpy's mean, as speed.py takes it); NaN for a zero time."""
    import numpy as np

    rates = [ratio(r[engine]["n_tokens"], question_seconds(r, engine)) for r in records]
    return float(np.mean(rates)) if rates else NAN


def spec_bench_metrics(records: list[dict]) -> dict:
    """#MAT and Spec-Bench's speedup (see the module docstring); #MAT is NaN where a record's passes are unknown."""
    tokens = sum(r["speculative"]["n_tokens"] for r in records)
    after = [passes_after_prefill(r["speculative"]) for r in records]
    passes = NAN if None in after else sum(n or 0 for n in after) + sum(len(r.get("turns") or []) or 1 for r in records)
    return {
        "mean_accepted_tokens": ratio(tokens, passes),
        "spec_bench_speedup": ratio(question_rate(records, "speculative"), question_rate(records, "baseline")),
    }


def step_depths(engine: dict) -> list[int]:
    """The depth of each verification step's proposal: the record's draft_depths, or its draft_lengths where it has
    none (records from before them, engines that run their own loop: chains, whose depth is their length)."""
    depths = engine.get("draft_depths") or []
    lengths = engine.get("draft_lengths") or []
    return depths if len(depths) == len(lengths) else lengths


def depth_counts(steps: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """(accepted, depth) per verification step → ([d-1]: steps whose proposal reached depth d, [d-1]: steps that
    accepted at least d drafted tokens), d = 1 .. the deepest proposal."""
    deepest = max((d for _, d in steps), default=0)
    reached = [sum(1 for _, d in steps if d >= i) for i in range(1, deepest + 1)]
    accepted = [sum(1 for n, _ in steps if n >= i) for i in range(1, deepest + 1)]
    return reached, accepted


def peer_metrics(records: list[dict]) -> dict:
    """vLLM's mean acceptance length and per-position acceptance rates, and time per output token (TPOT) with its
    p50 and p99 over examples, for both engines (see the module docstring)."""
    import numpy as np

    steps = [
        (n, d)
        for r in records
        for n, d in zip(r["speculative"]["accept_lengths"], step_depths(r["speculative"]))
        if d > 0
    ]  # (accepted, depth) of every verification step that drafted (a chain's depth is its γ')
    reached, accepted = depth_counts(steps)
    out = {
        "mean_acceptance_length": 1.0 + ratio(sum(n for n, _ in steps), len(steps)),
        "acceptance_rate_per_position": [ratio(a, r) for a, r in zip(accepted, reached)],
        "draft_depth_counts": reached,
        "accepted_depth_counts": accepted,
    }
    for engine in ("baseline", "speculative"):
        each = [ratio(r[engine]["decode_s"], r[engine]["n_tokens"] - 1) for r in records]
        each = [x for x in each if x == x]  # an example of one token has no time per output token
        decode_tokens = sum(r[engine]["n_tokens"] - 1 for r in records)
        out[f"{engine}_tpot_s"] = ratio(sum(r[engine]["decode_s"] for r in records), decode_tokens)
        out[f"{engine}_tpot_p50_s"] = float(np.percentile(each, 50)) if each else NAN
        out[f"{engine}_tpot_p99_s"] = float(np.percentile(each, 99)) if each else NAN
    return out

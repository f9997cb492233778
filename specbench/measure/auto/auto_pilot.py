"""`--draft/--dtype/--gamma auto` by replay (T = 0 and T > 0): calibrate on real decode-loop steps, replay-pilot,
choose on the pilot, predict on the examples about to be timed.

Phases (each reported through on_status / on_progress so the CLI can show its own bar):
  1. calibration, per candidate dtype: the bare pass-cost curve t(k) (calibration.calibrate, kept for the report
     and the adaptive policy), then a plain decode and one speculative decode per candidate draft in the real loop
     on one untimed example, giving LoopCosts (measure/auto/prediction.py);
  2. pilot: untimed examples *after* the run's in the task's seeded order (disjoint from the timed ones), each
     decoded once by the target (sampled with the run's seed at T > 0, then one teacher-forced target pass for
     its laws p) plus one teacher-forced pass per model draft, every (draft, γ) replayed (measure/auto/pilot.py), until
     α's standard error is ≤ TARGET_SE for the leading candidates or the cap;
  3. choice on every pilot example (the pilot's own acceptance; nothing of the timed examples); then two numbers
     for the chosen configuration, both before timing (issue 40): "predicted (held out)", the pilot examples'
     acceptance applied to the timed examples' prompts and lengths, with an interval that includes how acceptance
     differs between two sets of examples (make run's ding-de-en pilot replayed at α 0.61, its timed examples at
     0.68: docs/benchmarks.md); and "cost-model check (known acceptance)", the timed examples decoded once untimed
     and replayed along their own output, so that measured ÷ check tests the step prices alone; after each replayed
     example one round of bare passes (k = 1..k_max) re-prices the chosen dtype's verify pass, so both numbers use
     verify prices sampled across the seconds just before timing. The winner's pilot figure is printed too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from specbench.config import RunConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.sampling import make_generator
from specbench.decoding.speculative import decode_speculative
from specbench.engines.session import Session
from specbench.measure.auto import pilot as pl
from specbench.measure.auto import prediction as pr
from specbench.measure.auto.calibration import session_pass_round
from specbench.measure.auto.choose import (
    AutoChoice,
    Candidate,
    PilotResult,
    candidate_gammas,
    candidate_label,
    chosen_gamma,
    explain,
    requested_auto,
    slower_warning,
)
from specbench.measure.run.arms import Prepared, example_seed
from specbench.run_specs import DraftSpec

Progress = Callable[[str, int, int], None]  # (phase, done, total)


def can_replay(session: Session, config: RunConfig, drafts: list[DraftSpec], corpus: list[list[int]]) -> bool:
    """Whether every candidate draft can be piloted by replay in this session."""
    seq2seq = bool(getattr(session.target_lm(), "is_seq2seq", False))
    return session.load.backend == "eager" and all(
        pl.replayable(session.proposer(d, corpus), config.draft_confidence, seq2seq) for d in drafts
    )


def plain_decode(session: Session, item: Prepared, config: RunConfig, max_new: int):
    t = session.target
    return decode_autoregressive(
        session.target_lm(),
        item.prompt_ids,
        max_new_tokens=max_new,
        sampling=config.sampling,
        generator=make_generator(t.device, example_seed(config.seed, item.example.id)),
        eos_ids=t.eos_ids,
        decoder_start_id=t.decoder_start_id,
    )


def spec_decode(session: Session, proposer, item: Prepared, config: RunConfig, gamma: int, max_new: int):
    t = session.target
    return decode_speculative(
        session.target_lm(),
        proposer,
        item.prompt_ids,
        gamma=gamma,
        max_new_tokens=max_new,
        sampling=config.sampling,
        generator=make_generator(t.device, example_seed(config.seed, item.example.id)),
        eos_ids=t.eos_ids,
        decoder_start_id=t.decoder_start_id,
    )


LOOP_REPEATS = 1  # real decodes per engine in the loop calibration (their sums are used)


def measure_loop_costs(
    session: Session,
    drafts: list[DraftSpec],
    item: Prepared,
    config: RunConfig,
    max_new: int,
    bare_ms: dict[int, float],
    corpus: list[list[int]],
) -> pr.LoopCosts:
    """Step costs from real decodes of one untimed example: the plain loop's step and prefill, each draft's call
    (or lookup search) and per-step remainder, and the loop's verify pass.

    The plain decode runs before and after the drafts' decodes (A B A), so a drift of the machine meanwhile
    cancels in the step. The verify pass is priced as the loop's step times the bare curve's smoothed shape
    (prediction.verify_prices), not scaled by these decodes' own verify ÷ step: measured on one example that ratio
    ranged 0.70–1.55 on this VM (as a ratio of sums, and as a ratio of medians over single passes alike) while the
    timed runs' ratio was 0.95–1.09 every time, so scaling by it added error instead of removing it.
    """
    gamma = max(config.gamma_max, 1)
    plain_decode(session, item, config, 8)  # allocations, kernel selection
    base = [plain_decode(session, item, config, max_new) for _ in range(LOOP_REPEATS)]
    runs: dict[DraftSpec, list] = {}
    for d in drafts:
        proposer = session.proposer(d, corpus)
        spec_decode(session, proposer, item, config, gamma, 8)
        runs[d] = [spec_decode(session, proposer, item, config, gamma, max_new) for _ in range(LOOP_REPEATS)]
    base += [plain_decode(session, item, config, max_new) for _ in range(LOOP_REPEATS)]  # A B A: drift cancels
    decoded = sum(max(len(r.token_ids) - 1, 0) for r in base)
    step_ms = 1e3 * sum(r.decode_s for r in base) / decoded if decoded else bare_ms[1]
    prefill_ms = 1e3 * sum(r.prefill_s for r in base) / len(base)
    verify_ms = pr.verify_prices(step_ms, bare_ms)
    call_ms: dict[str, float] = {}
    lookup_ms: dict[str, float] = {}
    overhead_ms: dict[str, float] = {}
    for spec, rs in sorted(runs.items(), key=lambda kv: kv[0].kind == "hybrid"):  # model drafts before hybrids
        name = spec.text  # the costs are keyed by the draft's name (the choice's records)
        draft_s = sum(r.draft_s for r in rs)
        calls = sum(r.draft_calls for r in rs)
        steps = sum(r.target_calls for r in rs)
        overhead_ms[name] = 1e3 * sum(r.decode_s - r.draft_s - r.verify_s for r in rs) / max(steps, 1)
        own_model = spec.model if spec.kind == "hybrid" else None
        if own_model in call_ms:  # a hybrid: its model's call as measured alone (even when this run made none)
            call_ms[name] = call_ms[own_model]
            lookup_ms[name] = max(0.0, 1e3 * draft_s - calls * call_ms[name]) / max(steps, 1)
        elif calls:
            call_ms[name] = 1e3 * draft_s / calls
        else:
            lookup_ms[name] = 1e3 * draft_s / max(steps, 1)
    return pr.LoopCosts(
        dtype=session.load.dtype,
        step_ms=step_ms,
        prefill_ms=prefill_ms,
        verify_ms=verify_ms,
        draft_call_ms=call_ms,
        lookup_ms=lookup_ms,
        overhead_ms=overhead_ms,
    )


def trace_example(
    session: Session, item: Prepared, config: RunConfig, max_new: int, drafts, corpus, gamma_max: int
) -> pl.Trace:
    """One pilot example: the target's decode in the real loop, then each model draft's teacher-forced guesses
    along it (T = 0), or each draft's acceptance probabilities along the sample (T > 0: sampled_trace)."""
    res = plain_decode(session, item, config, max_new)
    n = len(res.token_ids)
    trace = pl.Trace(
        example_id=item.example.id,
        prompt_ids=list(item.prompt_ids),
        output=list(res.token_ids),
        budget=max_new,
        prefill_ms=1e3 * res.prefill_s,
        step_ms=1e3 * res.decode_s / (n - 1) if n > 1 else float("nan"),
    )
    if not config.sampling.greedy:
        return sampled_trace(session, trace, config, drafts, corpus, gamma_max)
    by_network: dict[str, tuple[list[int], float]] = {}  # a hybrid shares its model draft's guesses: one pass each
    for d in drafts:
        _, draft_lm = pl.draft_parts(session.proposer(d, corpus))  # type: ignore[misc]  # replayable drafts only
        if draft_lm is not None:
            if d.model not in by_network:
                by_network[d.model] = pl.teacher_forced_guesses(draft_lm, item.prompt_ids, trace.output)
            trace.guesses[d.text], trace.draft_prefill_ms[d.text] = by_network[d.model]
    return trace


def sampled_trace(session: Session, trace: pl.Trace, config: RunConfig, drafts, corpus, gamma_max: int) -> pl.Trace:
    """T > 0: the target's laws p along its sample (one teacher-forced pass), each model draft's q the same way
    (β = Σ min(p, q) per position) and each lookup's tokens scored by p, for every step start."""
    trace.sampled = True
    p, _ = pl.teacher_forced_laws(session.target_lm(), trace.prompt_ids, trace.output, config.sampling)
    by_network: dict[str, tuple[list[float], float]] = {}  # a hybrid shares its model draft's β: one pass each
    for d in drafts:
        lookup, draft_lm = pl.draft_parts(session.proposer(d, corpus))  # type: ignore[misc]  # replayable drafts only
        if draft_lm is not None:
            if d.model not in by_network:
                q, prefill_ms = pl.teacher_forced_laws(draft_lm, trace.prompt_ids, trace.output, config.sampling)
                by_network[d.model] = (pl.expected_betas(p, q), prefill_ms)
            trace.beta[d.text], trace.draft_prefill_ms[d.text] = by_network[d.model]
        if lookup is not None:
            trace.found_p[d.text] = pl.lookup_probs(lookup, trace.prompt_ids, trace.output, p, gamma_max)
    return trace


class Replays:
    """Every (trace, draft, γ) replay, computed once: one at T = 0 (prompt lookup's proposal memoised per
    position), pl.WALKS at T > 0 over uniforms shared by every candidate on the same example."""

    def __init__(self, lookups: dict[str, pl.Lookup | None], gamma_max: int, seed: int = 0):
        self.lookups, self.gamma_max, self.seed = lookups, gamma_max, seed
        self.memo: dict[tuple, list[list[pl.Step]]] = {}
        self.times: dict[tuple, tuple[float, float]] = {}  # (example, draft, γ, dtype) → candidate_times' row
        self.found: dict[tuple, list[int]] = {}

    def lookup_for(self, i: int, draft: str) -> pl.Lookup | None:
        lookup = self.lookups[draft]
        if lookup is None:
            return None

        def memo(tokens: list[int], g: int) -> list[int]:
            key = (i, draft, len(tokens))
            if key not in self.found:
                self.found[key] = lookup(tokens, self.gamma_max)
            return self.found[key][:g]

        return memo

    def walks(self, i: int, trace: pl.Trace, draft: str, gamma: int) -> list[list[pl.Step]]:
        key = (i, draft, gamma)
        if key not in self.memo:
            if trace.sampled:
                u = np.random.default_rng([self.seed, i]).random((pl.WALKS, len(trace.output)))
                found, beta = trace.found_p.get(draft), trace.beta.get(draft)
                self.memo[key] = [pl.replay_sampled(trace, gamma, found, beta, row) for row in u]
            else:
                self.memo[key] = [pl.replay(trace, gamma, self.lookup_for(i, draft), trace.guesses.get(draft))]
        return self.memo[key]


def candidate_times(replays, traces, idx, draft, gamma, costs: pr.LoopCosts, scale: float):
    """(baseline ms, speculative ms) per example; at T > 0 the speculative time is the mean over the walks. Each
    row is computed once: the pilot re-ranks every candidate on all its examples after each new one."""
    rows = []
    for i in idx:
        key = (i, draft, gamma, costs.dtype)
        if key not in replays.times:
            walks = replays.walks(i, traces[i], draft, gamma)
            times = [pr.example_times(traces[i], w, draft, costs, scale) for w in walks]
            replays.times[key] = (times[0][0], sum(t[1] for t in times) / len(times))
        rows.append(replays.times[key])
    return rows


def rank(replays, traces, idx, drafts, gammas, costs: dict[str, pr.LoopCosts], scales) -> list[Candidate]:
    """Every (draft, dtype, γ) over the pilot examples `idx`, fastest absolute ms per token first."""
    rows = []
    tokens = [len(traces[i].output) for i in idx]
    for dtype, c in costs.items():
        for d in drafts:
            for g in gammas:
                if g + 1 not in c.verify_ms:
                    continue
                times = candidate_times(replays, traces, idx, d, g, c, scales[dtype])
                logs = pr.log_speedups(times)
                s = math.exp(sum(logs) / len(logs)) if logs else float("nan")
                rows.append(Candidate(d, dtype, g, s, pr.ms_per_token(times, tokens)))
    return sorted(rows, key=lambda r: (r.ms_per_token, r.gamma))


def alpha_counts(replays, traces, idx, draft, gamma):
    """(accepted, trials) per example, summed over its walks (the example stays the unit resampled)."""
    counts = []
    for i in idx:
        each = [pl.alpha_counts(w) for w in replays.walks(i, traces[i], draft, gamma)]
        counts.append((sum(a for a, _ in each), sum(t for _, t in each)))
    return counts


def choose_by_replay(
    config: RunConfig,
    *,
    dtypes: list[str],
    drafts: list[DraftSpec],
    session_for: Callable[[str], Session],
    pool: list[Prepared],
    timed: list[Prepared],
    corpus: list[list[int]],
    max_new: int,
    calibrate_dtype,
    bf16_note: str | None = None,
    on_status: Callable[[str], None] = lambda msg: None,
    on_progress: Progress = lambda phase, done, total: None,
) -> AutoChoice:
    """Calibrate (bare curve + real loop) per dtype, replay-pilot on `pool` until α's SE allows, choose on every
    pilot example, predict the chosen configuration (and the runner-up) on the `timed` examples, replayed untimed."""
    calibrations, draft_ms, costs = {}, {}, {}
    for i, dtype in enumerate(dtypes):
        on_progress("calibration", i, len(dtypes))
        calibrations[dtype], draft_ms[dtype] = calibrate_dtype(dtype, drafts)
        on_status(f"calibrating {dtype}: real decode-loop steps (plain, and each draft at γ {config.gamma_max})")
        costs[dtype] = measure_loop_costs(
            session_for(dtype), drafts, pool[0], config, max_new, calibrations[dtype].target_ms, corpus
        )
    on_progress("calibration", len(dtypes), len(dtypes))
    pilot_dtype = dtypes[-1]
    first = session_for(pilot_dtype)
    scales = {d: costs[d].step_ms / costs[pilot_dtype].step_ms for d in dtypes}
    gammas = candidate_gammas(config)
    parts = {d.text: pl.draft_parts(first.proposer(d, corpus)) for d in drafts}
    names = list(parts)  # the candidates by name: the replays, ranks and records key by it
    replays = Replays({d: p[0] for d, p in parts.items() if p is not None}, max(gammas), config.seed)  # can_replay
    traces: list[pl.Trace] = []
    se: dict[str, float] = {}
    leaders: list[Candidate] = []
    cap = min(pl.PILOT_CAP, len(pool))
    on_status(f"pilot: up to {cap} untimed examples until α's standard error ≤ {pl.TARGET_SE}")
    for item in pool[:cap]:
        on_progress("pilot", len(traces), cap)
        traces.append(trace_example(first, item, config, max_new, drafts, corpus, max(gammas)))
        idx = list(range(len(traces)))
        if len(traces) < min(pl.PILOT_MIN, cap) and len(traces) < cap:
            continue
        ranked = rank(replays, traces, idx, names, gammas, costs, scales)
        leaders = ranked[: pl.LEADERS]
        se = {_key(c): pl.alpha_se(alpha_counts(replays, traces, idx, c.draft, c.gamma)) for c in leaders}
        if pl.pilot_done(se, [_key(c) for c in leaders], len(traces)):
            break
    on_progress("pilot", len(traces), len(traces))
    ranked = rank(replays, traces, list(range(len(traces))), names, gammas, costs, scales)
    best = ranked[0]
    runner_up = next((c for c in ranked[1:] if (c.draft, c.dtype) != (best.draft, best.dtype)), None)
    on_status(f"replaying the {len(timed)} timed examples (untimed) for the cost-model check")
    wanted = [d for d in drafts if d.text in {best.draft, runner_up.draft if runner_up else best.draft}]
    started = time.perf_counter()
    timed_traces: list[pl.Trace] = []
    chose_with = costs[best.dtype]  # the prices the choice was made with (the reasons show these)
    rounds: list[dict[int, float]] = []  # the chosen dtype's bare passes, one round after each replayed example
    ks = sorted(calibrations[best.dtype].target_ms)
    for item in timed:
        on_progress("replay of the timed examples", len(timed_traces), len(timed))
        timed_traces.append(trace_example(first, item, config, max_new, wanted, corpus, max(gammas)))
        rounds.append(session_pass_round(session_for(best.dtype), corpus, ks, max_new, len(rounds)))
    on_progress("replay of the timed examples", len(timed_traces), len(timed))
    costs[best.dtype] = pr.repriced(costs[best.dtype], rounds)  # verify priced just before timing (issue 40)
    timed_replays = Replays(dict(replays.lookups), max(gammas), config.seed)
    pilot_set, timed_set = (replays, traces), (timed_replays, timed_traces)
    held_out, check = predict(pilot_set, timed_set, best, costs, scales)
    check.replay_s = time.perf_counter() - started
    pilots = {}
    for d in names:
        g = best.gamma if d == best.draft else max(gammas)
        counts = alpha_counts(replays, traces, range(len(traces)), d, g)
        walks = [replays.walks(i, traces[i], d, g) for i in range(len(traces))]
        steps = sum(sum(len(w) for w in ws) / len(ws) for ws in walks)  # per walk at T > 0
        pilots[d] = PilotResult(
            draft=d,
            alpha=pl.pooled_alpha(counts),
            steps=round(steps),
            lookup_law=None,
            model_fills=d in traces[0].guesses if traces else False,
            examples=[t.example_id for t in traces],
        )
    se_reached = max(se.values()) if se else float("inf")
    stop = (
        f"α's standard error ≤ {pl.TARGET_SE} for the {len(se)} leading candidates (largest {se_reached:.3f})"
        if se_reached <= pl.TARGET_SE
        else f"cap reached: α's standard error {se_reached:.3f} (wanted ≤ {pl.TARGET_SE})"
    )
    requested = requested_auto(config)
    reasons = explain(config, best, ranked, calibrations, pilots, bf16_note, chose_with.verify_ms)
    reasons.append(
        f"pilot: {len(traces)} untimed examples (none of the timed ones), every draft replayed along the target's "
        f"{along(config)}; {stop}; chosen on all {len(traces)} (there {best.speedup:.2f}×: the best of "
        f"{len(ranked)} candidates on the examples that chose it, optimistic for others)"
    )
    reasons += pr.auto_lines(held_out, check, costs[best.dtype], best.gamma, along(config))
    warning = slower_warning(candidate_label(best), held_out.speedup, held_out.low, held_out.high)
    reasons += [warning] if warning else []
    choice = AutoChoice(
        requested=requested,
        dtype=best.dtype,
        draft=best.draft,
        gamma=chosen_gamma(config, best.gamma),
        policy_gamma=best.gamma,
        reasons=reasons,
        calibrations=calibrations,
        draft_ms=draft_ms,
        pilots=pilots,
        candidates=ranked,
        predicts_slower=held_out.speedup < 1.0 if math.isfinite(held_out.speedup) else None,
    )
    choice.loop_costs = {d: c.to_dict() for d, c in costs.items()}
    choice.prediction = held_out.to_dict() | {"alpha_se": se_reached if math.isfinite(se_reached) else None}
    choice.check = check.to_dict()
    if runner_up is not None:
        ru_held_out, ru_check = predict(pilot_set, timed_set, runner_up, costs, scales)
        choice.runner_up = {
            "draft": runner_up.draft,
            "dtype": runner_up.dtype,
            "gamma": runner_up.gamma,
            **ru_held_out.to_dict(),
            "check": ru_check.to_dict(),
        }
    return choice


def along(config: RunConfig) -> str:
    """What the pilot replays along, in the reasons line."""
    if config.sampling.greedy:
        return "greedy output"
    return (
        f"sampled output (T {config.sampling.temperature:g}, the run's seed; each drafted token accepted with "
        f"probability Σ min(p, q), {pl.WALKS} walks per example)"
    )


def _key(c: Candidate) -> str:
    return f"{c.draft}|{c.dtype}|{c.gamma}"


def predict(pilot, timed, cand: Candidate, costs, scales) -> tuple[pr.Prediction, pr.Prediction]:
    """The candidate's end-to-end speedup on the timed examples, twice: held out (the acceptance of the pilot's
    examples, `pilot` = (replays, traces), applied to the timed traces' prompts, lengths and plain steps, never to
    their replayed steps) and the cost-model check (the timed examples' own replayed steps, `timed`)."""
    c, scale = costs[cand.dtype], scales[cand.dtype]
    p_replays, p_traces = pilot
    rates = [
        pr.decode_rate(t, p_replays.walks(j, t, cand.draft, cand.gamma), cand.draft, c) for j, t in enumerate(p_traces)
    ]
    t_replays, t_traces = timed
    held_out = pr.held_out_prediction(rates, [pr.example_shape(t, cand.draft, c, scale) for t in t_traces])
    idx = list(range(len(t_traces)))
    times = candidate_times(t_replays, t_traces, idx, cand.draft, cand.gamma, c, scale)
    return held_out, pr.replayed_prediction(pr.log_speedups(times))


def replay_pool(spec, config: RunConfig, examples: list) -> list:
    """Pilot candidates: the task's examples after the run's in its seeded order, none of the timed ones (by id, nor
    a row repeating a timed prompt's text: the held-out prediction must not see a timed example's acceptance), up to
    PILOT_CAP; [] when the task has none left (the runner's own pilot is used then)."""
    from specbench.tasks.examples import select_examples

    timed = {e.id for e in examples}
    prompts = {e.prompt for e in examples}
    more = select_examples(spec, len(examples) + pl.PILOT_CAP + len(timed), config.seed)
    return [e for e in more if e.id not in timed and e.prompt not in prompts][: pl.PILOT_CAP]

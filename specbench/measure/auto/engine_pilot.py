"""`--gamma auto` on an engine that drafts in its own loop (vLLM, issue 39): the pilot decoded by the engine's own
speculative arm, and the lines that say what the choice was made from.

specbench's pilots (pilot.py's replay, planning.decode_pilot) run the draft in specbench's loop; vLLM drafts inside
itself, so nothing of it can be replayed here. Its pilot is its own speculative arm on the same pilot examples as
specbench's non-replay pilot (planning.pilot_examples: the ones after the timed ones in the task's seeded order), at
γ = gamma_max (vLLM's num_speculative_tokens), and the acceptance is read from the counts the engine reports per
verify step (vLLM's detailed per-request metrics): α per position and, for a matcher that may find nothing (ngram,
suffix), the law of tokens offered per step. The choice is then the torch engine's own (choose.choose →
rank_candidates → theory.pass_cost_curve_speedup), priced with the pass costs t(k)/t(1) calibrated on the engine
itself (engines/vllm/passes.py). A draft network's cost is not measured apart inside such an engine, so it enters as
c = 0 and the reasons say the prediction is an upper bound for it. The held-out prediction is the pooled pilot's figure
with prediction.py's held-out interval, its spread taken over what each pilot example's own acceptance predicts.
"""

from __future__ import annotations

import math

from specbench.config import RunConfig
from specbench.decoding import theory
from specbench.decoding.base import Proposer
from specbench.decoding.gamma_policy import FixedGamma
from specbench.engines import runtime
from specbench.engines.contract import DecodeJob
from specbench.engines.session import Session
from specbench.measure.auto.choose import AutoChoice, PilotResult, candidate_label, pilot_from_results, slower_warning
from specbench.measure.auto.prediction import pooled_held_out, pooled_interval_clause
from specbench.measure.run.arms import Prepared, example_seed
from specbench.run_specs import DraftSpec


def decode_pilot(
    session: Session,
    config: RunConfig,
    draft: DraftSpec,
    proposer: Proposer,
    pilot: list[Prepared],
    max_new_tokens: int,
    min_steps: int,
) -> PilotResult:
    """The engine's speculative arm at γ = gamma_max on the pilot examples (each with the seed the run would give it),
    until `min_steps` verify steps were seen → PilotResult (pilot_from_results: the counting the summary does)."""
    gamma = config.gamma_max
    job = DecodeJob(
        sampling=config.sampling,
        proposer=proposer,
        gamma_policy=lambda: FixedGamma(gamma),
        fixed_gamma=gamma,
        min_confidence=config.draft_confidence,
        pad_to=1,
    )
    engine = runtime(config.engine)
    results: list = []
    for item in pilot:
        if sum(len(r.accept_lengths) for r in results) >= min_steps:
            break
        seed = example_seed(config.seed, item.example.id)
        results.append(engine.speculative(session, job, item.prompt_ids, seed, max_new_tokens))
    ids = [p.example.id for p in pilot[: len(results)]]
    pooled = pilot_from_results(draft.text, results, None, draft.model_free, ids)
    pooled.per_example = [
        pilot_from_results(draft.text, [r], None, draft.model_free, [i]) for r, i in zip(results, ids)
    ]
    return pooled


def describe(choice: AutoChoice, config: RunConfig, timed_ids: list[str]) -> None:
    """Add to `choice` (before its slower-than-plain warning, if any) the pilot's line and, where the pilot examples
    are none of the timed ones, its held-out prediction for the timed examples (`choice.prediction`: the summary and
    the run's last line set it beside the measured speedup)."""
    pilot = choice.pilots[choice.draft]
    chosen = (choice.draft, choice.dtype, choice.policy_gamma)
    best = next(c for c in choice.candidates if (c.draft, c.dtype, c.gamma) == chosen)
    held_out = not set(pilot.examples) & set(timed_ids)
    lines = [pilot_line(pilot, config, best.speedup, len(choice.candidates), held_out)]
    if held_out:
        logs = example_log_speedups(choice, pilot, best.gamma)
        prediction = pooled_held_out(best.speedup, logs, len(timed_ids), len(pilot.examples))
        choice.prediction = prediction.to_dict()
        spread = pooled_interval_clause(prediction, "its own acceptance")
        lines.append(
            f"{prediction.line()} for the {len(timed_ids)} timed examples: the acceptance per position of the "
            f"{len(pilot.examples)} pilot examples (none of the timed ones) priced by the cost model with the "
            f"pass costs calibrated on --engine {config.engine}, per decoded token (the timed prompts' prefill and "
            f"lengths are not modelled); {spread}; the choice above was made on the pilot's acceptance too"
        )
    warning = slower_warning(candidate_label(best), best.speedup)
    at = len(choice.reasons) - (1 if warning and choice.reasons and choice.reasons[-1] == warning else 0)
    choice.reasons[at:at] = lines


def example_log_speedups(choice: AutoChoice, pilot: PilotResult, gamma: int) -> list[float]:
    """log of the speedup each pilot example's own acceptance predicts at the chosen γ, dtype and prices
    (rank_candidates' pricing, one example at a time): the held-out interval's spread. [] without per-example counts."""
    cost, c = choice.calibrations[choice.dtype].pass_cost(), choice.c()
    speedups = [
        theory.pass_cost_curve_speedup(p.alpha_by_position or p.alpha, gamma, c, cost, p.lookup_law, p.model_fills)
        for p in pilot.per_example or []
    ]
    return [math.log(s) for s in speedups if s > 0]


def pilot_line(pilot: PilotResult, config: RunConfig, speedup: float, n_candidates: int, held_out: bool) -> str:
    """The pilot's line (pure): where its examples came from, how they were decoded, the acceptance per position and
    (a matcher) how often nothing was found, and that the choice was made on them."""
    n = len(pilot.examples)
    where = (
        "none of the timed ones"
        if held_out
        else "the task has no examples beyond the timed ones, so these are timed ones too: nothing here is held out"
    )
    positions = " ".join(f"{a:.2f}" for a in pilot.alpha_by_position or []) or "none (no verify step)"
    found = ""
    if pilot.lookup_law is not None:
        nothing = pilot.lookup_law.get(0, 0.0)
        found = f"; its matcher offered nothing on {nothing:.0%} of the steps"
    cost = (
        ""
        if not pilot.model_fills
        else "; the draft network's own cost is not measured apart inside the engine (c = 0), so for it every "
        "prediction is an upper bound that favours long γ"
    )
    return (
        f"pilot: {n} untimed examples ({where}), decoded by --engine {config.engine}'s own method for --draft "
        f"{pilot.draft} at γ {config.gamma_max} with the run's sampling, {pilot.steps} verify steps; acceptance per "
        f"position {positions} (α {pilot.alpha:.2f}) from the engine's per-step counts{found}; priced with t(k)/t(1) "
        f"calibrated on the engine{cost}; chosen on all {n} (there {speedup:.2f}×: the best of {n_candidates} "
        f"candidates on the examples that chose it, optimistic for others)"
    )

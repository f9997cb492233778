"""`--gamma auto`, `--draft auto`, `--dtype auto`: choices made on the user's machine, with reasons.

The best configuration is a property of the hardware, not of the method: on an Intel CPU with
AMX, float32 SmolLM2 verified three tokens cheaply and γ = 2 won; on an AMD EPYC the same
pass is its worst point and bfloat16 is twice as fast. So nothing here is tuned in advance.
For each candidate dtype the target's pass-cost curve t(k) and each model draft's per-token
cost are calibrated (measure/auto/calibration.py); a short pilot on examples *outside* the timed
ones (the next ones in the task's seeded order) estimates α and, for prompt lookup, how many
tokens lookup finds per step; the cost model (theory.pass_cost_curve_speedup) then predicts
the time per token of every (draft, dtype, γ), and the fastest wins. The baseline runs in the
chosen dtype too: a speedup is always against the best plain decoding of that run.

Every choice is printed as one line with its reason and recorded in the manifest and the
summary (`auto`), with every candidate's prediction and the pilot's α. A dtype change alters
the target's own numerics, so it is never silent.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from specbench.config import AUTO, PILOTED_GAMMA, RunConfig
from specbench.decoding import theory
from specbench.errors import SpecbenchError
from specbench.measure.auto.calibration import Calibration
from specbench.run_specs import DraftSpec, GammaSpec, parse_draft, parse_gamma


@dataclass
class PilotResult:
    """What a draft did on the pilot examples (decoded at γ = gamma_max)."""

    draft: str
    alpha: float  # Σ accepted / Σ trials
    steps: int  # verified steps
    lookup_law: dict[int, float] | None  # tokens lookup found per step → share (prompt lookup and hybrids)
    model_fills: bool  # whether a draft model drafts what lookup does not (model and hybrid drafts)
    examples: list[str]  # pilot example ids
    alpha_by_position: list[float] | None = None  # acceptance of draft position i given positions < i were accepted
    # an engine's own pilot (engine_pilot.py): each example's counts alone, for its held-out interval (not in manifests)
    per_example: list[PilotResult] | None = None


@dataclass
class Candidate:
    """One (draft, dtype, γ) and its predicted cost."""

    draft: str
    dtype: str
    gamma: int
    speedup: float  # predicted, against plain decoding in the same dtype
    ms_per_token: float  # predicted absolute time per token: t(1) / speedup


@dataclass
class AutoChoice:
    """The resolved configuration and the evidence behind it (stored in the manifest as `auto`)."""

    requested: dict  # what the user asked: {"gamma": "auto", "draft": "auto", "dtype": "auto"} (only auto-valued keys)
    dtype: str
    draft: str
    gamma: GammaSpec  # the γ chosen (fixed), or the policy adaptive / heuristic
    policy_gamma: int  # the γ the cost model predicts best for the chosen draft and dtype
    reasons: list[str]  # one printed line per choice
    calibrations: dict[str, Calibration]  # dtype → the target's curve (+ draft cost of the chosen draft)
    draft_ms: dict[str, dict[str, float]]  # dtype → draft → ms per draft token (model drafts only)
    pilots: dict[str, PilotResult]
    candidates: list[Candidate] = field(default_factory=list)
    loop_costs: dict | None = None  # dtype → prediction.LoopCosts as a dict (the replay pilot)
    prediction: dict | None = None  # its "predicted (held out)" (prediction.Prediction as a dict, kind held_out)
    check: dict | None = None  # its "cost-model check (known acceptance)" on the timed examples (kind check, replay_s)
    runner_up: dict | None = None  # the best other (draft, dtype), its held-out prediction and "check" (--auto-control)
    predicts_slower: bool | None = None  # its predicted (held-out) speedup is below 1× (slower_warning)
    tree: dict | None = None  # a tree draft's depth and node budget chosen together (tree_gamma.py), else None

    def c(self, dtype: str | None = None, draft: str | None = None) -> float:
        dtype, draft = dtype or self.dtype, draft or self.draft
        ms = self.draft_ms.get(dtype, {}).get(draft)
        return (ms or 0.0) / self.calibrations[dtype].target_ms[1]

    def to_dict(self) -> dict:
        return {
            "requested": self.requested,
            "dtype": self.dtype,
            "draft": self.draft,
            "gamma": self.gamma.value,
            "policy_gamma": self.policy_gamma,
            "reasons": self.reasons,
            "calibrations": {k: v.to_dict() for k, v in self.calibrations.items()},
            "draft_ms": self.draft_ms,
            "pilots": {
                k: {a: b for a, b in dataclasses.asdict(v).items() if a != "per_example"}
                | {
                    "lookup_law": {str(a): b for a, b in (v.lookup_law or {}).items()}
                    if v.lookup_law is not None
                    else None
                }
                for k, v in self.pilots.items()
            },
            "candidates": [dataclasses.asdict(c) for c in self.candidates],
            "loop_costs": self.loop_costs,
            "prediction": self.prediction,
            "check": self.check,
            "runner_up": self.runner_up,
            "predicts_slower": self.predicts_slower,
            "tree": self.tree,
        }

    @staticmethod
    def from_dict(d: dict) -> AutoChoice:
        pilots = {
            k: PilotResult(
                **(
                    v
                    | {
                        "lookup_law": None
                        if v["lookup_law"] is None
                        else {int(a): b for a, b in v["lookup_law"].items()}
                    }
                )
            )
            for k, v in d["pilots"].items()
        }
        return AutoChoice(
            requested=d["requested"],
            dtype=d["dtype"],
            draft=d["draft"],
            gamma=parse_gamma(d["gamma"]),
            policy_gamma=d["policy_gamma"],
            reasons=d["reasons"],
            calibrations={k: Calibration.from_dict(v) for k, v in d["calibrations"].items()},
            draft_ms=d["draft_ms"],
            pilots=pilots,
            candidates=[Candidate(**c) for c in d["candidates"]],
            loop_costs=d.get("loop_costs"),
            prediction=d.get("prediction"),
            check=d.get("check"),
            runner_up=d.get("runner_up"),
            predicts_slower=d.get("predicts_slower"),
            tree=d.get("tree"),
        )


def needs_choice(config: RunConfig) -> bool:
    """Whether anything must be calibrated before this run (auto values or the adaptive policy)."""
    return config.draft.auto or config.load.dtype == AUTO or config.gamma.policy in PILOTED_GAMMA


def pilot_from_results(
    draft: str, results: list, hybrid_lookups: list[int] | None, lookup_only: bool, example_ids: list[str]
) -> PilotResult:
    """α and the lookup law from pilot DecodeResults (pure: the counting the summary also does)."""
    accepted = sum(r.accepted for r in results)
    trials = sum(r.trials for r in results)
    steps = sum(len(r.accept_lengths) for r in results)
    law = None
    if lookup_only:
        lengths = [g for r in results for g in r.proposal_lengths]
        law = {g: lengths.count(g) / len(lengths) for g in sorted(set(lengths))} if lengths else {0: 1.0}
    elif hybrid_lookups is not None:
        law = (
            {g: hybrid_lookups.count(g) / len(hybrid_lookups) for g in sorted(set(hybrid_lookups))}
            if hybrid_lookups
            else {0: 1.0}
        )
    alpha = accepted / trials if trials else 0.0
    return PilotResult(
        draft=draft,
        alpha=alpha,
        steps=steps,
        lookup_law=law,
        model_fills=not lookup_only,
        examples=example_ids,
        alpha_by_position=positional_alpha(results, alpha),
    )


POSITION_PRIOR = 2.0  # pseudo-trials at the pooled α behind each position's estimate (deep positions are seen rarely)


def positional_alpha(results: list, pooled: float) -> list[float] | None:
    """Per draft position i = 1..γ: accepted ÷ reached over the pilot's steps (position i is reached when
    the i − 1 before it were accepted), shrunk towards the pooled α by POSITION_PRIOR pseudo-trials.
    The pooled α assumes every position is alike; a draft drifts from the target as it drafts further,
    so on the shipped pair the 8th position is accepted far less than the 1st, and the pooled α
    overpredicts long proposals."""
    reached: list[float] = []
    accepted: list[float] = []
    for r in results:
        for n, g in zip(r.accept_lengths, r.draft_lengths):
            for i in range(min(g, n + 1)):  # positions 0..n reached (n accepted, then a rejection or the end)
                if i >= len(reached):
                    reached.append(0.0)
                    accepted.append(0.0)
                reached[i] += 1
                accepted[i] += 1 if i < n else 0
    if not reached:
        return None
    return [(a + POSITION_PRIOR * pooled) / (t + POSITION_PRIOR) for a, t in zip(accepted, reached)]


def rank_candidates(
    calibrations: dict[str, Calibration],
    draft_ms: dict[str, dict[str, float]],
    pilots: dict[str, PilotResult],
    gammas: list[int],
) -> list[Candidate]:
    """Every (draft, dtype, γ) with its predicted speedup and ms per token, fastest first (pure)."""
    rows = []
    for dtype, cal in calibrations.items():
        cost = cal.pass_cost()
        for draft, pilot in pilots.items():
            c = (draft_ms.get(dtype, {}).get(draft) or 0.0) / cal.target_ms[1]
            for g in gammas:
                needs = [g + 1] if pilot.lookup_law is None else range(1, g + 2)
                if not all(k in cost for k in needs):
                    continue
                alpha = pilot.alpha_by_position or pilot.alpha
                s = theory.pass_cost_curve_speedup(alpha, g, c, cost, pilot.lookup_law, pilot.model_fills)
                rows.append(Candidate(draft, dtype, g, s, cal.target_ms[1] / s))
    if not rows:
        raise SpecbenchError("no candidate configuration could be predicted; raise --gamma-max or fix the calibration")
    return sorted(rows, key=lambda r: (r.ms_per_token, r.gamma))


def explain(
    config: RunConfig,
    best: Candidate,
    ranked: list[Candidate],
    calibrations: dict[str, Calibration],
    pilots: dict[str, PilotResult],
    bf16_note: str | None,
    priced: dict[int, float] | None = None,
) -> list[str]:
    """One line per choice that was asked for (pure), each a sentence a user can act on: the value chosen, then
    why in words and numbers, e.g. "bfloat16 (the CPU has avx512_bf16; 2.10× faster per token than float32: …)";
    γ's line carries a small table of the candidates' predicted speedups (`priced`: k → the verify pass's price
    in ms that the prediction used, else the bare curve's shape is shown)."""
    lines = []
    if config.load.dtype == AUTO:
        lines.append(_dtype_sentence(best, ranked, bf16_note))
    if config.draft.auto:
        per_draft: dict[str, Candidate] = {}
        for r in ranked:
            if r.dtype == best.dtype:
                per_draft.setdefault(r.draft, r)
        others = [
            f"{d} {r.ms_per_token:.1f} ms, {r.speedup:.2f}× (γ {r.gamma}, α {pilots[d].alpha:.2f})"
            for d, r in per_draft.items()
        ]
        lines.append(
            f"draft {best.draft} (the fewest predicted ms per token: {best.ms_per_token:.1f} at γ {best.gamma}, "
            f"{best.speedup:.2f}×, pilot α {pilots[best.draft].alpha:.2f}; the others: "
            f"{', '.join(others[1:]) or 'none'}; × is the geometric mean of per-example speedups, "
            f"which can rank otherwise)"
        )
    if config.gamma.policy in PILOTED_GAMMA:
        same = sorted((r for r in ranked if r.dtype == best.dtype and r.draft == best.draft), key=lambda r: r.gamma)
        cal = calibrations[best.dtype]
        head = (
            f"γ {best.gamma} (the fewest predicted ms per token for {best.draft} in {best.dtype})"
            if config.gamma.policy == "auto"
            else f"γ adaptive (starts near {best.gamma}, then follows each example's running α)"
        )
        lines.append(head + ":\n" + gamma_table(same, best.gamma, cal, priced))
    return lines


def slower_warning(label: str, speedup: float, low: float | None = None, high: float | None = None) -> str | None:
    """The line auto prints before timing when its best configuration is predicted slower than plain decoding
    (pure): the whole interval below 1× (or, without an interval, the prediction) says so plainly; an interval
    straddling 1× says it may be; None when it is predicted faster (the whole interval above 1×). The run still
    times what was asked."""
    bounds = (
        (low, high) if low is not None and high is not None and math.isfinite(low) and math.isfinite(high) else None
    )
    shown = f"{label} predicted {speedup:.2f}×" + (
        f" [{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds else ", no interval"
    )
    if (bounds[1] if bounds else speedup) < 1.0:
        verdict = "no speculative configuration is predicted faster than plain decoding on this machine"
    elif bounds and bounds[0] < 1.0:
        verdict = "the best speculative configuration may be slower than plain decoding on this machine"
    else:
        return None
    return f"{verdict} (best: {shown}); timing it anyway"


def candidate_label(c: Candidate) -> str:
    return f"{c.draft} γ {c.gamma} {c.dtype}"


def _dtype_sentence(best: Candidate, ranked: list[Candidate], bf16_note: str | None) -> str:
    """auto's dtype line: the chosen dtype, the hardware fact, and how much faster per token than the other."""
    fastest: dict[str, Candidate] = {}
    for r in ranked:
        fastest.setdefault(r.dtype, r)
    other = next((r for d, r in fastest.items() if d != best.dtype), None)
    why = [bf16_note] if bf16_note else []
    if other is not None and best.ms_per_token > 0:
        why.append(
            f"{other.ms_per_token / best.ms_per_token:.2f}× faster per token than {other.dtype}: "
            f"{best.ms_per_token:.1f} vs {other.ms_per_token:.1f} ms predicted with {best.draft}"
        )
    elif other is None:
        why.append("the only dtype timed")
    return f"{best.dtype} ({'; '.join(why)})"


def gamma_table(
    candidates: list[Candidate], chosen: int, cal: Calibration, priced: dict[int, float] | None = None
) -> str:
    """The γ candidates' predicted speedups and what a verify pass over γ + 1 tokens costs here (t(γ+1)/t(1):
    as priced when `priced` is given, else the bare curve's), as three aligned rows; the chosen γ is marked *."""
    cost = {k: v / priced[min(priced)] for k, v in priced.items()} if priced else cal.pass_cost()
    cells = [
        (f"{r.gamma}{'*' if r.gamma == chosen else ''}", f"{r.speedup:.2f}×", cost.get(r.gamma + 1)) for r in candidates
    ]
    width = max(6, *(len(c[1]) + 1 for c in cells)) if cells else 6
    rows = (
        ("    γ              ", [c[0] for c in cells]),
        ("    speedup        ", [c[1] for c in cells]),
        ("    verify t(γ+1)/t(1)", [f"{c[2]:.2f}" if c[2] is not None else "—" for c in cells]),
    )
    label = max(len(r[0]) for r in rows)
    return "\n".join(r[0].ljust(label) + "".join(v.rjust(width) for v in r[1]) for r in rows)


def candidate_gammas(config: RunConfig) -> list[int]:
    """The γ values the choice ranks: the fixed one, or 1..gamma_max under auto and adaptive."""
    return [config.gamma.fixed] if config.gamma.fixed is not None else list(range(1, config.gamma_max + 1))


def requested_auto(config: RunConfig) -> dict:
    """The requested values the choice replaces, as given (the manifest's and summary's `requested`)."""
    given = {"gamma": config.gamma.value, "draft": config.draft.text, "dtype": config.load.dtype}
    return {k: v for k, v in given.items() if v in (AUTO, "adaptive")}


def chosen_gamma(config: RunConfig, best_gamma: int) -> GammaSpec:
    """--gamma auto → the best fixed γ; a fixed γ or the adaptive policy stays as requested."""
    return GammaSpec(fixed=best_gamma) if config.gamma.policy == "auto" else config.gamma


def choose(
    config: RunConfig,
    *,
    dtypes: list[str],
    drafts: list[DraftSpec],
    calibrate_dtype: Callable[[str, list[DraftSpec]], tuple[Calibration, dict[str, float]]],
    pilot: Callable[[DraftSpec], PilotResult],
    bf16_note: str | None = None,
) -> AutoChoice:
    """Calibrate each dtype, pilot each draft, rank, choose. `calibrate_dtype(dtype, drafts)` returns
    the target's curve and ms per draft token of each model draft; `pilot(draft)` runs the pilot."""
    calibrations, draft_ms = {}, {}
    for dtype in dtypes:
        calibrations[dtype], draft_ms[dtype] = calibrate_dtype(dtype, drafts)
    pilots = {d.text: pilot(d) for d in drafts}
    ranked = rank_candidates(calibrations, draft_ms, pilots, candidate_gammas(config))
    best = ranked[0]
    warning = slower_warning(candidate_label(best), best.speedup)
    return AutoChoice(
        requested=requested_auto(config),
        dtype=best.dtype,
        draft=best.draft,
        gamma=chosen_gamma(config, best.gamma),
        policy_gamma=best.gamma,
        reasons=explain(config, best, ranked, calibrations, pilots, bf16_note) + ([warning] if warning else []),
        calibrations=calibrations,
        draft_ms=draft_ms,
        pilots=pilots,
        candidates=ranked,
        predicts_slower=best.speedup < 1.0,
    )


def resolved_config(config: RunConfig, choice: AutoChoice) -> RunConfig:
    """The config the engines run: auto values replaced by the choice (the run id keeps the requested ones)."""
    load = dataclasses.replace(config.load, dtype=choice.dtype)
    draft = parse_draft(choice.draft)  # the chosen candidate's name, as stored (a resumed run reads it back)
    return dataclasses.replace(config, load=load, draft=draft, gamma=choice.gamma)

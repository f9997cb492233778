"""How many tokens to draft at each step: fixed, adaptive (cost-model driven) or HF's heuristic.

A policy sees only what has already happened in this example (how many tokens each past step
drafted and accepted), never the current step's target pass. That is why any policy here keeps
the output law exact: given the past, the step's γ is a fixed number, and Algorithm 1 is exact
for every fixed γ (the same argument as the draft's early stop on its own confidence). One
policy object serves one example: `Engines` builds a fresh one per decode, so no state (a
running α, a grown γ) leaks from one example, cell or benchmark to the next.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from specbench.decoding import theory


class GammaPolicy(Protocol):
    max_gamma: int  # the most this policy ever drafts (sizes compiled shapes and histograms)

    def next_gamma(self) -> int:
        """γ for the coming step (≥ 1); the caller still caps it by the budget."""

    def update(self, drafted: int, accepted: int) -> None:
        """Record the step just verified: `drafted` tokens proposed, `accepted` of them kept."""


@dataclass
class FixedGamma:
    """γ every step: Algorithm 1 as written."""

    max_gamma: int

    def next_gamma(self) -> int:
        return self.max_gamma

    def update(self, drafted: int, accepted: int) -> None:
        pass


@dataclass
class HeuristicGamma:
    """HF's "heuristic" schedule for assisted generation: +2 after a step that accepted every
    drafted token, −1 (at least 1) otherwise; here also capped at max_gamma."""

    max_gamma: int
    start: int

    def __post_init__(self):
        self._gamma = max(1, min(self.start, self.max_gamma))

    def next_gamma(self) -> int:
        return self._gamma

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        step = 2 if accepted == drafted else -1
        self._gamma = max(1, min(self.max_gamma, self._gamma + step))


@dataclass
class AdaptiveGamma:
    """Each step drafts the γ that maximises the predicted speedup (theory.pass_cost_curve_speedup,
    the measured pass-cost curve and draft cost c) at the running estimate of α.

    α̂ = (accepted + a) / (trials + a + b): the acceptance MLE of this example's past steps with a
    Beta(a, b) prior centred on the pilot's α (prior_weight pseudo-trials), so the first steps
    follow the pilot and later ones the example itself (a translation that copies names accepts
    more than one that paraphrases). Trials are counted as the runner does: min(n + 1, γ')."""

    max_gamma: int
    pass_cost: Mapping[int, float]  # k → t(k)/t(1), measured
    c: float  # draft cost per token over a one-token target pass
    prior_alpha: float  # the pilot's α
    prior_weight: float = 8.0  # pseudo-trials behind the prior
    _accepted: float = field(default=0.0, init=False)
    _trials: float = field(default=0.0, init=False)
    _cache: dict = field(default_factory=dict, init=False)

    def alpha_estimate(self) -> float:
        a = self.prior_alpha * self.prior_weight
        return (self._accepted + a) / (self._trials + self.prior_weight)

    def next_gamma(self) -> int:
        alpha = round(min(max(self.alpha_estimate(), 0.0), 1.0), 3)  # 1e-3 grid: memoise the argmax
        if alpha not in self._cache:
            self._cache[alpha] = theory.best_gamma_from_curve(alpha, self.c, self.pass_cost, self.max_gamma).gamma
        return self._cache[alpha]

    def update(self, drafted: int, accepted: int) -> None:
        if drafted:
            self._accepted += accepted
            self._trials += min(accepted + 1, drafted)

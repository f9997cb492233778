"""The paper's speed formulas, and a cost model for hardware where verification is not free.

Leviathan, Kalman & Matias (ICML 2023) predict speculative decoding's gain from three numbers:
α, the expected acceptance rate E[Σ_x min(p(x), q(x))]; γ, the drafts per step; and c, the
cost of one draft step over one target step. Reports compare measured speedups with these
predictions, so the formulas live here once, as pure functions. α-taking functions accept a
float or a numpy array (elementwise); the rest are scalar.

The paper assumes a target pass over γ+1 tokens costs the same as over one. On our CPUs it
does not (4 tokens cost 1.55× one), so the `*_extended` functions take that measured cost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, TypeVar

import numpy as np

from specbench.errors import SpecbenchError

A = TypeVar("A", float, np.ndarray)  # a float in gives a float out, an array an array
VerifyCost = float | Callable[[int], float] | Mapping[int, float]


class Optimum(NamedTuple):
    """The best draft length on a grid and the walltime factor it achieves."""

    gamma: int  # γ ≥ 1 with the largest factor (smallest γ on ties)
    factor: float  # walltime improvement at that γ; < 1 means "do not speculate"


def _check_alpha(alpha: A) -> np.ndarray:
    a = np.asarray(alpha, dtype=float)
    if not np.all((a >= 0.0) & (a <= 1.0)):
        raise SpecbenchError(f"acceptance rate α must be in [0, 1] (got {alpha})")
    return a


def _check_gamma(gamma: int, low: int = 0) -> None:
    if int(gamma) != gamma or gamma < low:
        raise SpecbenchError(f"γ must be an integer >= {low} (got {gamma})")


def _out(x: np.ndarray, like: A) -> A:
    return x if isinstance(like, np.ndarray) else float(x)


def expected_tokens_per_step(alpha: A, gamma: int) -> A:
    """Eq. (1): E[tokens emitted per step] = (1 − α^(γ+1)) / (1 − α) = Σ_{i=0..γ} α^i.

    Exact at α = 1 (γ + 1 tokens) and accurate near it: 1 − α^(γ+1) is computed as
    −expm1((γ+1)·ln α), which keeps its relative precision, and 1 − α is exact for α ≥ 0.5
    (Sterbenz), so the ratio avoids the cancellation of the naive form.
    """
    a = _check_alpha(alpha)
    _check_gamma(gamma)
    with np.errstate(divide="ignore", invalid="ignore"):  # ln 0 = −inf is fine: expm1(−inf) = −1
        ratio = -np.expm1((gamma + 1) * np.log(a)) / (1.0 - a)
    return _out(np.where(a == 1.0, gamma + 1.0, ratio), alpha)


def walltime_factor(alpha: A, gamma: int, c: float) -> A:
    """Theorem 3.8: expected walltime speedup (1 − α^(γ+1)) / ((1 − α)(γc + 1)).

    A step costs γ draft passes (γc target-pass units) plus one target pass, and yields
    E[tokens] where plain decoding yields one token per target pass.
    """
    return walltime_factor_extended(alpha, gamma, c, 1.0)


def optimal_gamma(alpha: float, c: float, max_gamma: int = 64) -> Optimum:
    """The integer γ in [1, max_gamma] maximising Theorem 3.8's walltime factor."""
    return optimal_gamma_extended(alpha, c, 1.0, max_gamma)


def arithmetic_ops_factor(alpha: A, gamma: int, c_hat: float) -> A:
    """Theorem 3.11: expected factor of increase in arithmetic operations,
    (1 − α)(γĉ + γ + 1) / (1 − α^(γ+1)), with ĉ = draft/target operations per token.

    Each step spends γĉ + γ + 1 target-token units of work (γ drafts, γ+1 verified positions)
    for E[tokens] emitted; the factor is ≥ 1 because E[tokens] ≤ γ + 1.
    """
    if c_hat < 0:
        raise SpecbenchError(f"ĉ must be >= 0 (got {c_hat})")
    work = gamma * c_hat + gamma + 1.0
    return _out(work / np.asarray(expected_tokens_per_step(alpha, gamma)), alpha)


def linear_verify_cost(extra_per_token: float) -> Callable[[int], float]:
    """A verify cost 1 + extra_per_token·γ: e.g. 4 tokens at 1.55× one gives 0.55/3 per token."""
    return lambda gamma: 1.0 + extra_per_token * gamma


def verify_cost_at(verify_cost: VerifyCost, gamma: int) -> float:
    """The cost of one target pass over γ+1 tokens, in single-token target passes."""
    if isinstance(verify_cost, Mapping):
        if gamma not in verify_cost:
            raise SpecbenchError(f"no measured verify cost for γ = {gamma}; measure it or pass a function")
        cost = float(verify_cost[gamma])
    else:
        cost = float(verify_cost(gamma) if callable(verify_cost) else verify_cost)
    if not cost > 0.0:
        raise SpecbenchError(f"verify cost must be > 0 (got {cost} at γ = {gamma})")
    return cost


def walltime_factor_extended(alpha: A, gamma: int, c: float, verify_cost: VerifyCost) -> A:
    """Walltime speedup when the verifying pass over γ+1 tokens costs `verify_cost` ≥ 1:
    E[tokens per step] / (γc + verify_cost). verify_cost = 1 is Theorem 3.8.

    verify_cost is a number, a function γ → cost, or a mapping of measured costs per γ.
    """
    if c < 0:
        raise SpecbenchError(f"draft cost ratio c must be >= 0 (got {c})")
    step_cost = gamma * c + verify_cost_at(verify_cost, gamma)
    return _out(np.asarray(expected_tokens_per_step(alpha, gamma)) / step_cost, alpha)


def optimal_gamma_extended(alpha: float, c: float, verify_cost: VerifyCost, max_gamma: int = 64) -> Optimum:
    """The integer γ maximising the extended walltime factor, searched over 1..max_gamma
    (only the measured γ when verify_cost is a mapping)."""
    _check_gamma(max_gamma, low=1)
    grid: Sequence[int] = range(1, max_gamma + 1)
    if isinstance(verify_cost, Mapping):
        grid = [g for g in grid if g in verify_cost]
        if not grid:
            raise SpecbenchError(f"verify costs cover no γ in [1, {max_gamma}]")
    factors = [walltime_factor_extended(float(alpha), g, c, verify_cost) for g in grid]
    best = int(np.argmax(factors))  # first maximum: the smallest γ on ties
    return Optimum(gamma=list(grid)[best], factor=factors[best])


def accepted_length_law(alpha: float, gamma: int) -> list[float]:
    """P(n drafts accepted), n = 0..γ, when each draft is accepted independently with prob. α:
    (1 − α)·α^n for n < γ (n accepts, then a rejection) and α^γ for n = γ (all accepted).
    Its mean is Σ_{n=1..γ} α^n = expected_tokens_per_step − 1."""
    a = float(_check_alpha(alpha))
    _check_gamma(gamma)
    return [(1.0 - a) * a**n for n in range(gamma)] + [a**gamma]


def decode_cost_table(
    max_length: int,
    alpha: float,
    c: float,
    verify_cost: float,
    proposal_law: Mapping[int, float],
    slack: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """E[target passes] and E[decode cost, in single-token target passes] to emit r more tokens,
    for every r = 0..max_length (arrays indexed by r).

    Theorem 3.8 describes an endless stream; a real output ends. When it ends at an EOS, the
    step that emits it may have accepted tokens beyond it, which are thrown away; when it ends at
    the budget, the last steps draft fewer tokens (γ' = min(g, room − 1), as the runner does). This
    renewal recursion over the tokens still to emit prices both, with the stream model's own
    assumptions (each draft accepted independently with probability α):
        cost[r] = Σ_g π(g) · (g'c + verify_cost + Σ_n P_g'(n) · cost[max(r − n − 1, 0)]),
    cost[0] = 0, where π is the law of proposal lengths the proposer offers (γ with probability 1
    for a model draft; measured for model-free drafts, 0 = no proposal), P_g' the accepted-length
    law and g' = min(g, r + slack − 1): `slack` is how many tokens the budget allows beyond the
    output's end (0 for an output cut by the budget; None = unbounded, for one that ended at an
    EOS far from it). For long outputs r / cost[r] tends to E[tokens] / (E[g]·c + verify_cost),
    the extended walltime factor. One table serves every output length of a run.
    """
    _check_alpha(alpha)
    if max_length < 0 or int(max_length) != max_length:
        raise SpecbenchError(f"output length must be an integer >= 0 (got {max_length})")
    if slack is not None and slack < 0:
        raise SpecbenchError(f"budget slack must be >= 0 (got {slack})")
    law = {int(g): float(p) for g, p in proposal_law.items() if p > 0}
    if not law or min(law) < 0 or abs(sum(law.values()) - 1.0) > 1e-9:
        raise SpecbenchError(f"proposal law must be probabilities over lengths >= 0 summing to 1 (got {proposal_law})")
    passes = np.zeros(max_length + 1)
    cost = np.zeros(max_length + 1)
    accepted = {g: accepted_length_law(alpha, g) for g in range(max(law) + 1)}
    for r in range(1, max_length + 1):
        for g, p in law.items():
            g_eff = g if slack is None else max(0, min(g, r + slack - 1))
            ahead = [max(r - n - 1, 0) for n in range(g_eff + 1)]
            law_n = accepted[g_eff]
            passes[r] += p * (1.0 + sum(q * passes[k] for q, k in zip(law_n, ahead)))
            cost[r] += p * (g_eff * c + verify_cost + sum(q * cost[k] for q, k in zip(law_n, ahead)))
    return passes, cost


def expected_decode_cost(
    length: int, alpha: float, c: float, verify_cost: float, proposal_law: Mapping[int, float], room: int | None = None
) -> tuple[float, float]:
    """E[target passes] and E[decode cost] to emit `length` tokens (decode_cost_table) when the
    budget allowed `room` tokens as decoding began (None = unbounded)."""
    if room is not None and room < length:
        raise SpecbenchError(f"budget room {room} is below the output length {length}")
    passes, cost = decode_cost_table(
        length, alpha, c, verify_cost, proposal_law, None if room is None else room - length
    )
    return float(passes[length]), float(cost[length])


def alpha_from_tokens_per_step(mean_tokens: float, gamma: int, tol: float = 1e-12) -> float:
    """Invert Eq. (1) by bisection: the α whose expected tokens per step equal mean_tokens.

    Eq. (1) is strictly increasing in α on [0, 1], from 1 to γ + 1, so the root is unique.
    """
    _check_gamma(gamma, low=1)
    if not 1.0 <= mean_tokens <= gamma + 1.0:
        raise SpecbenchError(f"mean tokens per step must be in [1, γ+1] = [1, {gamma + 1}] (got {mean_tokens})")
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if expected_tokens_per_step(mid, gamma) < mean_tokens else (lo, mid)
    return 0.5 * (lo + hi)


def expected_tokens_positional(alphas: Sequence[float], gamma: int) -> float:
    """E[tokens per step] when draft position i is accepted with probability alphas[i−1] given that
    every earlier one was: 1 + Σ_{i=1..γ} Π_{j≤i} α_j (positions past the list reuse its last value).
    With one α for every position this is Eq. (1)."""
    _check_gamma(gamma)
    total, survive = 1.0, 1.0
    for i in range(gamma):
        survive *= float(alphas[min(i, len(alphas) - 1)])
        total += survive
    return total


def pass_cost_curve_speedup(
    alpha: float | Sequence[float],
    gamma: int,
    c: float,
    pass_cost: Mapping[int, float],
    lookup_law: Mapping[int, float] | None = None,
    model_fills: bool = True,
) -> float:
    """Predicted walltime speedup of one configuration from a *measured* pass-cost curve.

    pass_cost maps k → t(k)/t(1), the cost of one target pass over k new tokens in single-token
    passes (k = 1..γ+1 must be present); the curve is used point by point, never fitted, since on
    some CPUs it is not monotone (fp32 SmolLM2 on an AMD EPYC: 3 tokens cost 2.1×, 4 cost 1.4×).
    A step offers g tokens, of which m are drafted by a model (each costing c target passes):
      model draft   (lookup_law None):                 g = γ, m = γ
      prompt lookup (lookup_law, model_fills False):   g = min(L, γ), m = 0, L ~ lookup_law (0 = no match)
      hybrid        (lookup_law, model_fills True):    g = γ, m = γ − min(L, γ)
    and emits Σ_{i=0..g} α^i tokens in expectation (each drafted token accepted independently
    with probability α), or, when `alpha` is a list of per-position acceptance rates (the i-th
    drafted token accepted given the ones before it were: drafts drift, so later positions are
    accepted less), expected_tokens_positional. Speedup = E[tokens per step] / E[cost per step], where plain decoding
    costs one single-token pass per token.
    """
    _check_gamma(gamma, low=1)
    if c < 0:
        raise SpecbenchError(f"draft cost ratio c must be >= 0 (got {c})")
    law = {0: 1.0} if lookup_law is None else {int(k): float(v) for k, v in lookup_law.items() if v > 0}
    if not law or abs(sum(law.values()) - 1.0) > 1e-9:
        raise SpecbenchError(f"lookup law must be probabilities summing to 1 (got {lookup_law})")
    tokens = cost = 0.0
    for length, p in law.items():
        found = min(length, gamma)
        if lookup_law is None:
            offered, by_model = gamma, gamma
        elif model_fills:
            offered, by_model = gamma, gamma - found
        else:
            offered, by_model = found, 0
        if offered + 1 not in pass_cost:
            raise SpecbenchError(f"no measured cost for a pass over {offered + 1} tokens; calibrate up to γ = {gamma}")
        tokens += p * (
            expected_tokens_per_step(float(alpha), offered)  # type: ignore[arg-type]  # np.isscalar does not narrow
            if np.isscalar(alpha)
            else expected_tokens_positional(alpha, offered)  # type: ignore[arg-type]  # a sequence here
        )
        cost += p * (by_model * c + float(pass_cost[offered + 1]) / float(pass_cost[1]))
    return tokens / cost


def best_gamma_from_curve(
    alpha: float | Sequence[float],
    c: float,
    pass_cost: Mapping[int, float],
    max_gamma: int,
    lookup_law: Mapping[int, float] | None = None,
    model_fills: bool = True,
) -> Optimum:
    """The γ in 1..max_gamma (where the curve covers γ+1) with the largest pass_cost_curve_speedup."""
    needs = (lambda g: [g + 1]) if lookup_law is None else (lambda g: range(1, g + 2))  # lookup offers 0..γ
    grid = [g for g in range(1, max_gamma + 1) if all(k in pass_cost for k in needs(g))]
    if not grid:
        raise SpecbenchError(f"the pass-cost curve covers no γ in [1, {max_gamma}]")
    factors = [pass_cost_curve_speedup(alpha, g, c, pass_cost, lookup_law, model_fills) for g in grid]
    best = int(np.argmax(factors))
    return Optimum(gamma=grid[best], factor=factors[best])

"""The auto choices' pilot: every candidate draft replayed along the target's own output, greedy or sampled.

At temperature 0 speculative decoding emits exactly the target's greedy output, and which drafted tokens are
accepted is decided by one thing: whether the draft's guess at each position equals the target's token there. A
model draft that has drafted only accepted tokens has seen the target's own prefix, so its guess at position j is
its argmax after prompt + output[:j]: one teacher-forced pass of the draft over prompt + output gives every guess
at once. Prompt lookup's proposal is a pure function of the tokens so far; a hybrid's model fills what lookup did
not find, after lookup's tokens (which, if all are accepted, are the target's own prefix again). So one plain
target decode per pilot example plus one teacher-forced pass per model draft replays the speculative decode of
every (draft, γ) step by step — accepted lengths, pass sizes, draft calls, where the output ends and the budget
cuts γ — at the price of about one plain decode (issue 31). Every candidate is piloted on the same examples.

At T > 0 speculative decoding's output is distributed as the target's own sample, and a drafted token at a
position whose prefix is that output is accepted with probability β = Σ_x min(p(x), q(x)) (Leviathan et al.,
Algorithm 1; for prompt lookup q is a point mass on its token x, so β = p(x)). So the target samples its output
once per pilot example (the run's seed), one teacher-forced pass of the target and of each model draft along it
gives every p and q, and each (draft, γ) is replayed by WALKS walks whose position j accepts when a uniform u_j
(shared by every candidate: common random numbers) is below β_j (`replay_sampled`). Along the sample a deeper
drafted token is scored after the target's token, not the draft's accepted one; the T > 0 test bounds what that
costs against decode_speculative's own α.

The pilot grows until the standard error of α (resampling whole examples) is ≤ TARGET_SE for the leading
candidates, or PILOT_CAP examples (then the error reached is printed). Drafts whose proposal depends on more
than the tokens so far (a confidence stop, frequency drafts, encoder-decoder targets) use the runner's own
decode instead (planning.run_pilot).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TARGET_SE = 0.025  # stop the pilot once α's standard error (examples resampled) is this small for the leaders …
PILOT_MIN = 8  # … but not before this many examples …
PILOT_CAP = 24  # … and never beyond this many (the error reached is printed); the timed examples are replayed too
#                 (auto_pilot: the prediction is made on them), and 24 + 20 keeps `make run` ≤ 8 min
LEADERS = 3  # candidates whose α's error must reach TARGET_SE (the rest cannot win anyway)
SE_RESAMPLES = 400
WALKS = 8  # T > 0: seeded acceptance walks per (example, draft, γ) along the one sampled output


@dataclass
class Trace:
    """One pilot example decoded by the target in the real loop (greedy, or sampled at T > 0), with each model
    draft's guesses (T = 0) or each draft's acceptance probabilities along the sample (T > 0)."""

    example_id: str
    prompt_ids: list[int]
    output: list[int]  # the target's greedy output (output[0] came from prefill)
    budget: int  # max_new_tokens of the run
    prefill_ms: float  # the plain decode's prefill (real loop)
    step_ms: float  # the plain decode's ms per decoded token (real loop; nan for a one-token output)
    guesses: dict[str, list[int]] = field(default_factory=dict)  # draft spec → guess[j] for output[j], j ≥ 1
    draft_prefill_ms: dict[str, float] = field(default_factory=dict)  # draft spec → its model's prefill (ms)
    sampled: bool = False  # T > 0: replayed by replay_sampled from beta / found_p, not by replay
    beta: dict[str, list[float]] = field(default_factory=dict)  # model draft → Σ min(p_j, q_j) for output[j] (j ≥ 1)
    found_p: dict[str, list[list[float]]] = field(default_factory=dict)  # lookup → [j][k]: p_{j+k}(its k-th token)


@dataclass(frozen=True)
class Step:
    """One replayed speculative step."""

    offered: int  # tokens proposed (γ' ≤ γ); 0 = a plain one-token pass
    model_calls: int  # draft-model forward calls it took
    accepted: int  # drafted tokens accepted


Lookup = Callable[[list[int], int], list[int]]


def walk(
    trace: Trace,
    gamma: int,
    found_at: Callable[[int, int], list],
    model: bool,
    accepts: Callable[[int, int, list], bool],
) -> list[Step]:
    """decode_speculative's steps along the target's output (pure): at output position j a step drafts γ' =
    min(γ, room − 1) tokens, `found_at(j, γ')` from lookup and, with a `model`, the rest from the model draft;
    `accepts(j, n, found)` judges the n-th drafted token of that step. Tokens accepted past the output's end are not
    counted (the runner clips them)."""
    n_out = len(trace.output)
    steps, j = [], 1
    while j < n_out:
        g = min(gamma, trace.budget - j - 1)
        if g <= 0:
            steps.append(Step(0, 0, 0))
            j += 1
            continue
        found = found_at(j, g)
        calls = g - len(found) if model else 0
        offered = len(found) + calls
        n = 0
        while n < offered and j + n < n_out and accepts(j, n, found):
            n += 1
        steps.append(Step(offered, calls, n))
        j += min(n + 1, n_out - j)
    return steps


def replay(trace: Trace, gamma: int, lookup: Lookup | None, guesses: list[int] | None) -> list[Step]:
    """The steps decode_speculative takes on this example at γ, T = 0 (pure). `lookup(tokens, g)` is prompt lookup's
    proposal (None: no lookup); `guesses` the model draft's (None: no model). Hybrid: lookup first, the model
    fills the rest. A drafted token is accepted when it is the target's own next token."""
    out = trace.output

    def found_at(j: int, g: int) -> list[int]:
        return lookup(trace.prompt_ids + out[:j], g)[:g] if lookup is not None else []

    def accepts(j: int, n: int, found: list) -> bool:
        return (found[n] if n < len(found) else guesses[j + n]) == out[j + n]  # type: ignore[index]  # model only

    return walk(trace, gamma, found_at, guesses is not None, accepts)


def replay_sampled(
    trace: Trace, gamma: int, found_p: list[list[float]] | None, beta: list[float] | None, u: np.ndarray
) -> list[Step]:
    """One T > 0 walk of decode_speculative's steps along the target's sample (pure, given the uniforms u[j]):
    as `replay`, but the drafted token for output position j is accepted when u[j] < its acceptance probability,
    `found_p[j'][k]` for lookup's k-th token of the step starting at j' = j − k, else `beta[j]` (the model draft's
    Σ min(p_j, q_j)). Each position is judged at most once per walk, so one uniform per position suffices."""

    def found_at(j: int, g: int) -> list[float]:
        return found_p[j][:g] if found_p is not None else []

    def accepts(j: int, n: int, found: list) -> bool:
        return bool(u[j + n] < (found[n] if n < len(found) else beta[j + n]))  # type: ignore[index]  # model only

    return walk(trace, gamma, found_at, beta is not None, accepts)


def alpha_counts(steps: list[Step]) -> tuple[int, int]:
    """(accepted, trials) as the runner counts them (speculative.count_step): trials = min(n + 1, γ') per step."""
    return sum(s.accepted for s in steps), sum(min(s.accepted + 1, s.offered) for s in steps)


def pooled_alpha(counts: list[tuple[int, int]]) -> float:
    acc, tri = sum(a for a, _ in counts), sum(t for _, t in counts)
    return acc / tri if tri else 0.0


def alpha_se(counts: list[tuple[int, int]], resamples: int = SE_RESAMPLES, seed: int = 0) -> float:
    """Standard error of the pooled α (Σ accepted ÷ Σ trials) when whole examples are resampled (bootstrap);
    inf below 2 examples with trials."""
    a = np.array([c[0] for c in counts if c[1] > 0], float)
    t = np.array([c[1] for c in counts if c[1] > 0], float)
    if len(t) < 2:
        return float("inf")
    idx = np.random.default_rng(seed).integers(0, len(t), size=(resamples, len(t)))
    return float(np.std(a[idx].sum(1) / t[idx].sum(1), ddof=1))


def pilot_done(se_by_candidate: dict[str, float], leaders: list[str], n: int) -> bool:
    """Whether the pilot may stop at n examples: at least PILOT_MIN and every leader's SE ≤ TARGET_SE, or the cap."""
    if n >= PILOT_CAP:
        return True
    return n >= PILOT_MIN and all(se_by_candidate.get(c, float("inf")) <= TARGET_SE for c in leaders)


def teacher_forced_guesses(draft_lm, prompt_ids: list[int], output: list[int]) -> tuple[list[int], float]:
    """A model draft's greedy guess for every output position j ≥ 1 after prompt + output[:j] (one pass over the
    prompt, timed: the draft's prefill, then one over output[:-1]), guess[0] = −1 (the target's prefill token)."""
    import torch

    if hasattr(draft_lm, "backend"):
        draft_lm.backend.reserve(len(prompt_ids) + len(output) + 1)
    draft_lm.start(capacity=len(prompt_ids) + len(output) + 1)
    t0 = time.perf_counter()
    first = draft_lm.forward(torch.tensor(prompt_ids, device=draft_lm.device))
    int(first.argmax(-1))  # the host sync a prefill pays
    prefill_ms = (time.perf_counter() - t0) * 1e3
    guesses = [-1]
    if len(output) > 1:
        logits = draft_lm.forward(torch.tensor(output[:-1], device=draft_lm.device), all_logits=True)
        guesses += logits.view(len(output) - 1, -1).argmax(-1).tolist()
    return guesses, prefill_ms


def teacher_forced_laws(lm, prompt_ids: list[int], output: list[int], sampling) -> tuple[Any, float]:
    """T > 0: a model's processed law (the sampling config's, as decoding uses) for every output position j ≥ 1
    after prompt + output[:j], [len(output) − 1, V] float32 (one pass over the prompt, timed: the prefill, then one
    over output[:-1])."""
    import torch

    from specbench.decoding.sampling import processed_probs

    if hasattr(lm, "backend"):
        lm.backend.reserve(len(prompt_ids) + len(output) + 1)
    lm.start(capacity=len(prompt_ids) + len(output) + 1)
    t0 = time.perf_counter()
    first = lm.forward(torch.tensor(prompt_ids, device=lm.device))
    int(first.argmax(-1))  # the host sync a prefill pays
    prefill_ms = (time.perf_counter() - t0) * 1e3
    if len(output) < 2:
        return torch.zeros(0, first.shape[-1]), prefill_ms
    logits = lm.forward(torch.tensor(output[:-1], device=lm.device), all_logits=True)
    return processed_probs(logits.view(len(output) - 1, -1), sampling), prefill_ms


def expected_betas(p, q) -> list[float]:
    """Σ_x min(p_j(x), q_j(x)) for output positions j ≥ 1 from the two teacher-forced laws; [0] is a placeholder."""
    from specbench.decoding.accept import expected_acceptance

    return [float("nan")] + expected_acceptance(p, q.to(p.device)).tolist()


def lookup_probs(lookup: Lookup, prompt_ids: list[int], output: list[int], p, gamma_max: int) -> list[list[float]]:
    """For each step start j ≥ 1: the target's probability p_{j+k}(x_k) of lookup's k-th token x_k after
    prompt + output[:j] (a point-mass q accepts x with probability p(x)); 0 past the output's end."""
    import torch

    rows: list[list[float]] = [[]]
    at: list[tuple[int, int, int]] = []  # (step start j, position row, token)
    for j in range(1, len(output)):
        found = lookup(prompt_ids + output[:j], gamma_max)
        rows.append([0.0] * len(found))
        at += [(j, j + k - 1, x) for k, x in enumerate(found) if j + k < len(output)]
    if at:
        idx = torch.tensor([[r, x] for _, r, x in at], device=p.device)
        for (j, r, _), v in zip(at, p[idx[:, 0], idx[:, 1]].tolist()):
            rows[j][r - j + 1] = v
    return rows


def replayable(proposer, min_confidence: float, seq2seq: bool) -> bool:
    """Whether replay() (T = 0) and replay_sampled() (T > 0) follow this draft's decode: no confidence stop,
    decoder-only, and a draft made of prompt lookup and/or one model draft."""
    return min_confidence == 0.0 and not seq2seq and draft_parts(proposer) is not None


def draft_parts(proposer) -> tuple[Lookup | None, object | None] | None:
    """(lookup function, the model draft's CachedModel) of a prompt-lookup, model or hybrid draft; None otherwise."""
    from specbench.decoding.drafts.hybrid import HybridDraft
    from specbench.decoding.drafts.model import ModelDraft
    from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft

    if isinstance(proposer, PromptLookupDraft):
        return (lookup_of(proposer), None) if not proposer.search_source else None
    if isinstance(proposer, ModelDraft):
        return None, proposer.lm
    if isinstance(proposer, HybridDraft) and not proposer.lookup.search_source:
        return lookup_of(proposer.lookup), proposer.model.lm
    return None


def lookup_of(draft) -> Lookup:
    from specbench.decoding.drafts.prompt_lookup import lookup_continuation

    return lambda tokens, g: lookup_continuation(tokens, g, draft.max_ngram, draft.min_ngram, draft.rule)

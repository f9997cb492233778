"""The auto choices' pilot at T = 0: every candidate draft replayed along the target's own greedy output.

At temperature 0 speculative decoding emits exactly the target's greedy output, and which drafted tokens are
accepted is decided by one thing: whether the draft's guess at each position equals the target's token there. A
model draft that has drafted only accepted tokens has seen the target's own prefix, so its guess at position j is
its argmax after prompt + output[:j]: one teacher-forced pass of the draft over prompt + output gives every guess
at once. Prompt lookup's proposal is a pure function of the tokens so far; a hybrid's model fills what lookup did
not find, after lookup's tokens (which, if all are accepted, are the target's own prefix again). So one plain
target decode per pilot example plus one teacher-forced pass per model draft replays the speculative decode of
every (draft, γ) step by step — accepted lengths, pass sizes, draft calls, where the output ends and the budget
cuts γ — at the price of about one plain decode (issue 31). Every candidate is piloted on the same examples.

The pilot grows until the standard error of α (resampling whole examples) is ≤ TARGET_SE for the leading
candidates, or PILOT_CAP examples (then the error reached is printed). Drafts whose proposal depends on more
than the tokens so far (a confidence stop, frequency drafts, encoder-decoder targets) and T > 0 use the
runner's own decode instead (planning.run_pilot).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

TARGET_SE = 0.025  # stop the pilot once α's standard error (examples resampled) is this small for the leaders …
PILOT_MIN = 8  # … but not before this many examples (4 per half) …
PILOT_CAP = 24  # … and never beyond this many (the error reached is printed)
LEADERS = 3  # candidates whose α's error must reach TARGET_SE (the rest cannot win anyway)
SE_RESAMPLES = 400


@dataclass
class Trace:
    """One pilot example decoded greedily by the target in the real loop, with each model draft's guesses."""

    example_id: str
    prompt_ids: list[int]
    output: list[int]  # the target's greedy output (output[0] came from prefill)
    budget: int  # max_new_tokens of the run
    prefill_ms: float  # the plain decode's prefill (real loop)
    step_ms: float  # the plain decode's ms per decoded token (real loop; nan for a one-token output)
    guesses: dict[str, list[int]] = field(default_factory=dict)  # draft spec → guess[j] for output[j], j ≥ 1
    draft_prefill_ms: dict[str, float] = field(default_factory=dict)  # draft spec → its model's prefill (ms)


@dataclass(frozen=True)
class Step:
    """One replayed speculative step."""

    offered: int  # tokens proposed (γ' ≤ γ); 0 = a plain one-token pass
    model_calls: int  # draft-model forward calls it took
    accepted: int  # drafted tokens accepted


Lookup = Callable[[list[int], int], list[int]]


def replay(trace: Trace, gamma: int, lookup: Lookup | None, guesses: list[int] | None) -> list[Step]:
    """The steps decode_speculative takes on this example at γ (pure). `lookup(tokens, g)` is prompt lookup's
    proposal (None: no lookup); `guesses` the model draft's (None: no model). Hybrid: lookup first, the model
    fills the rest. γ' = min(γ, room − 1) as the runner does; tokens accepted past the output's end are not
    counted (the runner clips them)."""
    out, n_out = trace.output, len(trace.output)
    steps, j = [], 1
    while j < n_out:
        g = min(gamma, trace.budget - j - 1)
        if g <= 0:
            steps.append(Step(0, 0, 0))
            j += 1
            continue
        found = lookup(trace.prompt_ids + out[:j], g)[:g] if lookup is not None else []
        calls = g - len(found) if guesses is not None else 0
        offered = len(found) + calls
        n = 0
        while n < offered and j + n < n_out:
            guess = found[n] if n < len(found) else guesses[j + n]  # type: ignore[index]  # None: offered = len(found)
            if guess != out[j + n]:
                break
            n += 1
        steps.append(Step(offered, calls, n))
        j += min(n + 1, n_out - j)
    return steps


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


def replayable(proposer, greedy: bool, min_confidence: float, seq2seq: bool) -> bool:
    """Whether replay() reproduces this draft's decode: T = 0, no confidence stop, decoder-only, and a draft made of
    prompt lookup and/or one greedy model draft."""
    return greedy and min_confidence == 0.0 and not seq2seq and draft_parts(proposer) is not None


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

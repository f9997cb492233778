"""Greedy speculative decoding teacher-forced along the baseline's output: every position verified, none masked.

At T = 0 a speculative run is compared with its plain baseline token for token, but once the two outputs part (in
bf16 a verify-shaped pass flips a near-tie: numerics) the prefixes differ and nothing after the first divergence can
be compared: a bug striking later is hidden behind it. This loop runs the speculative engine's own steps
(speculative.py's draft_step / plain_step: the proposer drafts, one target pass verifies, the verifier judges, the
cache is rolled back) with the baseline's tokens as the context. After each step the verified tokens (accepted drafts
and the correction/bonus token: each the target's argmax in its verify-shaped row) are compared with the baseline's;
at the first one that differs the cache is cropped to the tokens that agreed and the baseline's token is forced in its
place, so the next step starts from the baseline's prefix again. Every position of the reference thus gets the token
the engine would emit after the baseline's own prefix (`verified`), and the pass record (`pass_lengths`, and per verify
pass the tokens kept after `cur` in `accept_lengths`, a tree step's kept nodes in `tree_paths`) is in DecodeResult's
format, so the numerics classifier's replay (measure/stats/numerics.speculative_passes) rebuilds the exact rows the
verifier read.

The loop drafts as the free run would after the same prefix (γ cut by the budget, max_new_tokens) and stops at the
reference's length: tokens a step verifies past it (the baseline stopped at an EOS there) are not compared.
Anything patched into speculative.py's step functions (evidence/planted.py's plants on `judge_proposal`) runs here
too. Greedy only. Under --bit-exact (`stepwise`) every pass after the prefill is one-token passes (stepwise.py), so each
verified token is the argmax of the baseline's own row at that prefix and any divergence is a bug
(past_divergence.explain_forced_bit_exact: no replay, no gate).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import specbench.decoding.speculative as speculative
from specbench.config import SamplingConfig
from specbench.decoding.base import DecodeResult, Proposer
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.gamma_policy import FixedGamma, GammaPolicy
from specbench.decoding.timing import Clock


@dataclass
class ForcedResult:
    """One teacher-forced speculative run along a reference (the baseline's greedy output)."""

    verified: list[int]  # per reference position: the token the engine verified there after the reference's prefix
    divergences: list[int] = field(default_factory=list)  # positions where verified differs from the reference
    pass_lengths: list[int] = field(default_factory=list)  # tokens fed to each target pass after the prefill
    accept_lengths: list[int] = field(default_factory=list)  # per verify pass (g ≥ 1): drafted tokens kept after cur
    tree_paths: list[list[int] | None] = field(default_factory=list)  # per verify pass: a tree's kept nodes, or None
    steps: int = 0  # target passes after the prefill


def first_mismatch(got: list[int], want: list[int]) -> int | None:
    """The first index where got and want differ (over the shorter one's length), or None."""
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)


def decode_forced(
    target: CachedModel,
    proposer: Proposer,
    prompt_ids: list[int],
    reference: list[int],
    *,
    gamma: int | GammaPolicy,
    decoder_start_id: int | None = None,
    pad_to: int = 1,
    max_new_tokens: int | None = None,
    stepwise: bool = False,
) -> ForcedResult:
    """The engine's verified token at every position of `reference`, each after the reference's own prefix (module
    docstring). `pad_to`: as decode_speculative's (--exact-shapes); `max_new_tokens`: the
    free run's budget (it cuts γ near the end, as there; default: the reference's length); `stepwise` (--bit-exact):
    every target pass after the prefill as one-token passes (stepwise.py), as the free run under the mode."""
    n = len(reference)
    if n == 0:
        return ForcedResult(verified=[])
    greedy = SamplingConfig(temperature=0.0)
    policy = FixedGamma(gamma) if isinstance(gamma, int) else gamma
    budget = max(n, max_new_tokens or 0)
    with speculative.hidden_kept(target, proposer) as keep_hidden:
        tokens = speculative.prefill_both(target, proposer, prompt_ids, budget, greedy, None, decoder_start_id)
        verified = tokens[-1:]  # the prefill's argmax: position 0
        tokens[-1] = reference[0]
        res = DecodeResult(token_ids=reference[:1], stop_reason="length", prefill_s=0.0, decode_s=0.0)
        ctx = speculative.StepContext(target, proposer, greedy, None, 0.0, pad_to, Clock(target.devices), res, stepwise)
        if keep_hidden:  # an EAGLE head: the prompt's (after a forced mismatch it keeps a pass's first rows)
            ctx.hand_hidden(len(tokens) - 1)
        while len(verified) < n:
            wanted = policy.next_gamma()
            g = min(wanted, budget - len(verified) - 1)  # as the free run would draft after this prefix
            cached = target.length
            new = (
                speculative.plain_step(ctx, tokens)
                if g == 0
                else speculative.draft_step(ctx, tokens, g, wanted == g, policy)
            )
            at = len(verified)
            want = reference[at : at + len(new)]
            k = first_mismatch(new, want)
            if k is not None:  # keep [.., cur, the k tokens that agreed]; the reference's token becomes the new cur
                target.truncate(cached + 1 + k)
                if res.pass_lengths[-1] > 1:
                    res.accept_lengths[-1] = k
                    path = res.tree_paths[-1]
                    res.tree_paths[-1] = None if path is None else path[:k]  # a tree step kept its path's first k
                new, want = new[: k + 1], want[: k + 1]
            else:  # the step may verify past the reference's end (it stopped at an EOS): nothing there to compare
                new = new[: len(want)]
            verified.extend(new)
            tokens.extend(want)
            res.token_ids.extend(want)
    divergences = [j for j, (a, b) in enumerate(zip(verified, reference)) if a != b]
    return ForcedResult(verified, divergences, res.pass_lengths, res.accept_lengths, res.tree_paths, res.target_calls)

"""Speculative decoding (Leviathan, Kalman & Matias 2023, Algorithm 1) with KV-cache rollback.

Invariant of the step loop: the target's cache covers every token but the newest (`cur`).
A step drafts x_1..x_γ' from `cur`, runs the target once over [cur, x_1..x_γ'] to get
p_1..p_γ'+1, verifies, then crops the target cache to [.., cur, x_1..x_n] and makes the
correction/bonus token the new `cur`. γ comes from a policy (gamma_policy.py: fixed, adaptive or
HF's heuristic) that sees only past steps; γ' = min(γ, room − 1), so a step can never emit more
than max_new_tokens; tokens after an EOS are dropped exactly as the baseline stops there.
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import clip_at_stop, prompt_split
from specbench.decoding.base import DecodeResult, Proposer
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.gamma_policy import FixedGamma, GammaPolicy
from specbench.decoding.verify import verify_greedy, verify_sampling
from specbench.decoding.sampling import next_token, processed_probs
from specbench.measure.timing import Clock


def decode_speculative(
    target: CachedModel,
    proposer: Proposer,
    prompt_ids: list[int],
    *,
    gamma: int | GammaPolicy,
    max_new_tokens: int,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    eos_ids: frozenset[int],
    decoder_start_id: int | None = None,
    min_confidence: float = 0.0,
    pad_to: int = 1,
) -> DecodeResult:
    """`pad_to` > 1 (the bf16-exact mode): every target pass is padded to pad_to tokens (copies of its
    last token; the extra rows are ignored and their cache slots cropped), matching a baseline run
    with the same pad_to, so both engines compute every logit with the same kernel shapes."""
    policy = FixedGamma(gamma) if isinstance(gamma, int) else gamma
    clock = Clock(target.device)
    t0 = clock.now()
    encoder_ids, tokens = prompt_split(target, prompt_ids, decoder_start_id)
    target.start(encoder_ids, capacity=len(tokens) + max_new_tokens)
    proposer.begin(prompt_ids, max_new_tokens)
    logits = target.forward(torch.tensor(tokens, device=target.device))
    first = int(next_token(logits, sampling, generator))
    tokens.append(first)
    out = [first]
    t1 = clock.now()
    res = DecodeResult(token_ids=out, stop_reason="length", prefill_s=t1 - t0, decode_s=0.0)
    stopped = first in eos_ids
    while not stopped and len(out) < max_new_tokens:
        room = max_new_tokens - len(out)
        wanted = policy.next_gamma()
        g = min(wanted, room - 1)
        ta = clock.now()
        if g == 0:  # one token left: a plain target step, no draft
            cached = target.length
            logits = target.forward(torch.tensor(tokens[-1:] * pad_to, device=target.device), all_logits=True)[0]
            target.truncate(cached + 1)
            new = [int(next_token(logits, sampling, generator))]
            res.target_calls += 1
            res.pass_lengths.append(1)
            res.verify_s += clock.now() - ta
        else:
            proposal = proposer.propose(tokens, g, sampling, generator, min_confidence)
            if g == wanted:  # the budget did not bind: this is the proposer's own length (the law theory needs)
                res.proposal_lengths.append(proposal.tokens.shape[0])
            g = proposal.tokens.shape[0]
            tb = clock.now()
            cached = target.length
            step_ids = torch.cat([torch.tensor(tokens[-1:], device=target.device), proposal.tokens])
            if pad_to > g + 1:  # the exact-shapes mode: same pass shape as the padded baseline
                step_ids = torch.cat([step_ids, step_ids[-1:].repeat(pad_to - g - 1)])
            logits = target.forward(step_ids, all_logits=True)[: g + 1]  # [g+1, V]
            if sampling.greedy:  # one host sync a step: drafted ids and the target's choices together
                ids = torch.cat([proposal.tokens, logits.argmax(-1)]).tolist()
                drafted = ids[:g]
                verdict = verify_greedy(drafted, ids[g:])
            else:
                drafted = proposal.tokens.tolist()
                verdict = verify_sampling(proposal.tokens, proposal.q_probs, processed_probs(logits, sampling), generator)
            n = verdict.n_accepted
            target.truncate(cached + 1 + n)
            new = drafted[:n] + [verdict.next_token]
            res.target_calls += 1
            res.pass_lengths.append(g + 1)
            res.draft_calls += proposal.forward_calls
            res.drafted += g
            res.accepted += n
            res.trials += min(n + 1, g)
            if g:  # an empty proposal (no n-gram match) is a plain step, not a verified draft
                res.accept_lengths.append(n)
                res.draft_lengths.append(g)
            res.expected_accept.extend(verdict.expected_accept)
            policy.update(g, n)
            tc = clock.now()
            res.draft_s += tb - ta
            res.verify_s += tc - tb
        new, stopped = clip_at_stop(new, eos_ids, room)
        out.extend(new)
        tokens.extend(new)
    res.decode_s = clock.now() - t1
    res.stop_reason = "eos" if stopped else "length"
    return res

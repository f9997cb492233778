"""The T > 0 replay pilot (measure/auto/pilot.py: teacher_forced_laws, expected_betas, lookup_probs, replay_sampled)
estimates the α that decode_speculative measures: the target samples once per prompt, each drafted token is
accepted with probability Σ min(p, q) along that sample (p(x) for lookup's point mass), and the walks' α must
agree with the real decode's within their combined standard error (examples resampled).

Statistics (each case): N_PROMPTS = 40 prompts × 32 tokens (lookup: 64, on a sharper target whose samples repeat
themselves) at γ = 4, T = 0.7: 500–1200 trials (several hundred verified steps) on each side. Pass when
|α_replay − α_real| ≤ Z · √(se_replay² + se_real²), Z = 3 (a false failure ~0.3 % if the replay is unbiased; the
seeds are fixed, so the outcome is too). Power: the combined se is ~0.015 for the model and hybrid drafts (α
0.33–0.36) and ~0.04 for lookup (α ~0.5), so a bias of (Z + 0.84) · se ≈ 0.06 (model, hybrid) or 0.15 (lookup)
fails with probability 0.8. Negative control through the same code path, which must fail: q taken from the draft's
unprocessed logits (T = 1) while the draft samples at T = 0.7, the peer bug DESIGN.md names (α 0.40 against the
real 0.36 here: z ≈ 3.3).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from conftest import VOCAB, sharpen, tiny_llama

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.hybrid import HybridDraft
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft
from specbench.decoding.speculative import decode_speculative
from specbench.measure.auto import pilot as pl

CPU = torch.device("cpu")
EOS = frozenset([2])
TEMPERATURE = 0.7
SAMPLED = SamplingConfig(temperature=TEMPERATURE)
N_PROMPTS, GAMMA, Z = 40, 4, 3.0
CASES = {"model": (12.0, 32), "hybrid": (12.0, 32), "lookup": (40.0, 64)}  # kind → (target's sharpening, tokens)


@functools.cache
def pair(sharp: float):
    """A target and a draft close to it (its last layer perturbed), both with peaked laws."""
    target, draft = sharpen(tiny_llama(0), sharp), sharpen(tiny_llama(0), 12.0)
    torch.manual_seed(7)
    with torch.no_grad():
        for p in draft.model.layers[-1].parameters():
            p.add_(0.05 * torch.randn_like(p))
    return target, draft


def prompts() -> list[list[int]]:
    """Half random, half repeating a motif (prompt lookup then finds continuations)."""
    rng = np.random.default_rng(0)
    out = []
    for k in range(N_PROMPTS):
        motif = [int(x) for x in rng.integers(3, VOCAB, 4)]
        out.append(motif * 3 if k % 2 else [int(x) for x in rng.integers(3, VOCAB, 10)])
    return out


def proposer(kind: str, draft):
    lookup = PromptLookupDraft(VOCAB, CPU)
    return {
        "model": ModelDraft(draft, "m"),
        "lookup": lookup,
        "hybrid": HybridDraft(lookup, ModelDraft(draft, "m"), "h"),
    }[kind]


@functools.cache
def measured(kind: str) -> list[tuple[int, int]]:
    """decode_speculative's own (accepted, trials) per prompt."""
    (target, draft), max_new = pair(CASES[kind][0]), CASES[kind][1]
    counts = []
    for k, prompt in enumerate(prompts()):
        res = decode_speculative(
            CachedModel(target),
            proposer(kind, draft),
            prompt,
            gamma=GAMMA,
            max_new_tokens=max_new,
            sampling=SAMPLED,
            generator=torch.Generator().manual_seed(1000 + k),
            eos_ids=EOS,
        )
        counts.append((res.accepted, res.trials))
    return counts


def replayed(kind: str, q_sampling: SamplingConfig) -> list[tuple[int, int]]:
    """The pilot's T > 0 path on each prompt: one sampled target output, its laws, the draft's, WALKS walks."""
    (target, draft), max_new = pair(CASES[kind][0]), CASES[kind][1]
    counts = []
    lookup = pl.draft_parts(proposer(kind, draft))[0]
    for k, prompt in enumerate(prompts()):
        res = decode_autoregressive(
            CachedModel(target),
            prompt,
            max_new_tokens=max_new,
            sampling=SAMPLED,
            generator=torch.Generator().manual_seed(k),
            eos_ids=EOS,
        )
        trace = pl.Trace("x", prompt, list(res.token_ids), max_new, 1.0, 1.0, sampled=True)
        p, _ = pl.teacher_forced_laws(CachedModel(target), prompt, trace.output, SAMPLED)
        beta = found = None
        if kind != "lookup":
            q, _ = pl.teacher_forced_laws(CachedModel(draft), prompt, trace.output, q_sampling)
            beta = pl.expected_betas(p, q)
        if kind != "model":
            found = pl.lookup_probs(lookup, prompt, trace.output, p, GAMMA)
        u = np.random.default_rng([0, k]).random((pl.WALKS, len(trace.output)))
        each = [pl.alpha_counts(pl.replay_sampled(trace, GAMMA, found, beta, row)) for row in u]
        counts.append((sum(a for a, _ in each), sum(t for _, t in each)))
    return counts


def z_score(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> tuple[float, float, float, float]:
    se = math.hypot(pl.alpha_se(a), pl.alpha_se(b))
    return pl.pooled_alpha(a), pl.pooled_alpha(b), se, abs(pl.pooled_alpha(a) - pl.pooled_alpha(b)) / se


@pytest.mark.parametrize("kind", ["model", "lookup", "hybrid"])
def test_sampled_replay_alpha_matches_the_real_decode(kind):
    real = measured(kind)
    assert sum(t for _, t in real) >= 400  # trials behind the real α (several hundred steps)
    a_real, a_rep, se, z = z_score(real, replayed(kind, SAMPLED))
    assert 0.15 < a_real < 0.85, a_real  # neither trivial acceptance nor none: the check can see a bias
    assert se < 0.05, se  # the stated power needs this small an error
    assert z <= Z, (kind, a_real, a_rep, se)


def test_a_wrong_q_fails_the_same_check():
    # negative control: q from the draft's unprocessed logits (T = 1) while everything else samples at 0.7
    a_real, a_bad, se, z = z_score(measured("model"), replayed("model", SamplingConfig(temperature=1.0)))
    assert z > Z, (a_real, a_bad, se)

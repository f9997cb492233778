"""Exactness of the engines on tiny random models: greedy identity, acceptance extremes, rollback, EOS, seeds."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, sharpen, tiny_gpt2, tiny_llama, tiny_t5

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import clip_at_stop
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft, lookup_continuation
from specbench.decoding.speculative import decode_speculative

GREEDY = SamplingConfig()
PROMPT = [5, 17, 99, 3, 250, 31, 7, 64, 12, 400]
MAX_NEW = 40


def seq2seq_kwargs(model):
    if model.config.is_encoder_decoder:
        return {"eos_ids": frozenset([1]), "decoder_start_id": 0}
    return {"eos_ids": frozenset([2])}


def baseline(model, sampling=GREEDY, generator=None, max_new=MAX_NEW, **kw):
    kw = {**seq2seq_kwargs(model), **kw}
    return decode_autoregressive(
        CachedModel(model), PROMPT, max_new_tokens=max_new, sampling=sampling, generator=generator, **kw
    )


def speculative(model, proposer, gamma, sampling=GREEDY, generator=None, max_new=MAX_NEW, **kw):
    kw = {**seq2seq_kwargs(model), **kw}
    return decode_speculative(
        CachedModel(model),
        proposer,
        PROMPT,
        gamma=gamma,
        max_new_tokens=max_new,
        sampling=sampling,
        generator=generator,
        **kw,
    )


def hf_greedy(model, max_new=MAX_NEW):
    eos = sorted(seq2seq_kwargs(model)["eos_ids"])
    out = model.generate(
        torch.tensor([PROMPT]), max_new_tokens=max_new, do_sample=False, eos_token_id=eos, pad_token_id=0
    )
    start = 1 if model.config.is_encoder_decoder else len(PROMPT)
    tokens = out[0, start:].tolist()
    return clip_at_stop(tokens, frozenset(eos), max_new)[0]


MODELS = {
    "llama": (lambda: tiny_llama(0), lambda: tiny_llama(1)),
    "gpt2": (lambda: tiny_gpt2(0), lambda: tiny_gpt2(1)),
    "t5": (lambda: tiny_t5(2), lambda: tiny_t5(5)),  # seed 2: a random T5 that does not collapse on PROMPT
}


@pytest.fixture(scope="module", params=list(MODELS))
def pair(request):
    make_target, make_draft = MODELS[request.param]
    return make_target(), make_draft()


def test_baseline_matches_hf_generate(pair):
    target, _ = pair
    ours = baseline(target).token_ids
    assert ours == hf_greedy(target)
    assert len(set(ours)) > 3  # a non-degenerate sequence, or identity would prove little


@pytest.mark.parametrize("gamma", range(1, 9))
def test_greedy_speculative_identical_to_baseline(pair, gamma):
    target, draft = pair
    ref = baseline(target).token_ids
    for proposer in (
        ModelDraft(draft, "unrelated"),
        ModelDraft(target, "same"),
        PromptLookupDraft(VOCAB, torch.device("cpu"), search_source=target.config.is_encoder_decoder),
    ):
        result = speculative(target, proposer, gamma)
        assert result.token_ids == ref, proposer.name


def test_identical_draft_accepts_everything(pair):
    target, _ = pair
    result = speculative(target, ModelDraft(target, "same"), gamma=4)
    assert result.drafted > 0
    assert result.accepted == result.drafted
    assert all(n == 4 for n in result.accept_lengths[:-1])  # only the last step may be shortened by max_new_tokens
    assert result.expected_accept and min(result.expected_accept) == 1.0


def test_unrelated_draft_rejects_nearly_everything_and_still_matches(pair):
    target, draft = pair
    result = speculative(target, ModelDraft(draft, "unrelated"), gamma=5)
    assert result.accepted / result.trials < 0.2
    rejections = sum(1 for n in result.accept_lengths if n < 5)
    assert rejections >= 10  # many rollbacks happened
    assert result.token_ids == baseline(target).token_ids


def test_max_new_tokens_exact_for_every_gamma():
    target = tiny_llama(0)
    for max_new in (1, 2, 3, 7):
        for gamma in (1, 3, 8):
            result = speculative(target, ModelDraft(target, "same"), gamma, max_new=max_new)
            assert len(result.token_ids) == max_new
            assert result.token_ids == baseline(target, max_new=max_new).token_ids


def test_proposal_lengths_record_what_the_proposer_offered_where_the_budget_did_not_bind():
    target = tiny_llama(0)
    model_draft = speculative(target, ModelDraft(tiny_llama(1), "unrelated"), 3, max_new=20)
    # a model draft always offers γ; the passes the budget shortened (room ≤ γ) are left out
    assert model_draft.proposal_lengths and set(model_draft.proposal_lengths) == {3}
    assert len(model_draft.proposal_lengths) < model_draft.target_calls
    assert min(model_draft.draft_lengths) < 3  # the budget did shorten the last drafts
    lookup = speculative(target, PromptLookupDraft(VOCAB, torch.device("cpu")), 4, max_new=80)
    # prompt lookup offers fewer or none where no n-gram matches: the law theory must be fed
    assert 0 in lookup.proposal_lengths and 4 in lookup.proposal_lengths
    assert len(lookup.proposal_lengths) <= lookup.target_calls


def test_the_cost_models_pass_count_matches_the_runner_where_acceptance_is_certain():
    """With the target as its own draft every draft is accepted (α = 1), so the recursion's pass
    count is exact and must equal the runner's target_calls: budget endings (short last drafts,
    a draft-free last pass) and EOS endings (drafts accepted past the EOS thrown away) alike."""
    from specbench.decoding.theory import expected_decode_cost

    target = tiny_llama(0)
    free = baseline(target).token_ids
    for gamma in (1, 2, 3, 5, 8):
        for max_new in (2, 7, 12, MAX_NEW):
            res = speculative(target, ModelDraft(target, "same"), gamma, max_new=max_new)
            length = len(res.token_ids) - 1
            assert res.stop_reason == "length" and res.accepted == res.drafted
            assert res.target_calls == expected_decode_cost(length, 1.0, 0.0, 1.0, {gamma: 1.0}, room=length)[0]
            # with c = 1 and a free verification the cost counts drafted tokens: the shortened last drafts
            assert res.drafted == expected_decode_cost(length, 1.0, 1.0, 0.0, {gamma: 1.0}, room=length)[1]
        eos = free[9]
        res = speculative(target, ModelDraft(target, "same"), gamma, eos_ids=frozenset([eos]))
        assert res.stop_reason == "eos"
        length = len(res.token_ids) - 1
        assert res.target_calls == expected_decode_cost(length, 1.0, 0.0, 1.0, {gamma: 1.0}, room=MAX_NEW - 1)[0]
        assert res.drafted == expected_decode_cost(length, 1.0, 1.0, 0.0, {gamma: 1.0}, room=MAX_NEW - 1)[1]


@pytest.mark.parametrize("min_confidence", [0.05, 0.5, 0.99])
def test_early_stopping_drafts_keep_greedy_identity(min_confidence):
    target = tiny_llama(0)
    ref = baseline(target).token_ids
    for draft in (ModelDraft(sharpen(tiny_llama(1), 3.0), "d"), ModelDraft(target, "same")):
        result = speculative(target, draft, 5, min_confidence=min_confidence)
        assert result.token_ids == ref
        assert result.draft_calls == result.drafted  # a stopped proposal spends only the forwards it made
    stopped = speculative(target, ModelDraft(sharpen(tiny_llama(1), 3.0), "d"), 5, min_confidence=0.99)
    assert min(stopped.proposal_lengths) < 5  # at 0.99 the early stop really happens


def test_stops_at_eos_like_the_baseline():
    target = tiny_llama(0)
    free = baseline(target).token_ids
    eos = free[6]  # pretend the 7th generated token is EOS
    first = free.index(eos)
    ref = baseline(target, eos_ids=frozenset([eos]))
    assert ref.token_ids == free[: first + 1] and ref.stop_reason == "eos"
    for gamma in (1, 4, 8):
        for proposer in (ModelDraft(target, "same"), ModelDraft(tiny_llama(1), "unrelated")):
            result = speculative(target, proposer, gamma, eos_ids=frozenset([eos]))
            assert result.token_ids == ref.token_ids
            assert result.stop_reason == "eos"


def test_sampling_is_reproducible_under_a_seed():
    target, draft = tiny_llama(0), tiny_llama(1)
    cfg = SamplingConfig(temperature=0.8, top_k=50, top_p=0.9)

    def draw(seed):
        return speculative(
            target, ModelDraft(draft, "d"), 4, sampling=cfg, generator=torch.Generator().manual_seed(seed)
        ).token_ids

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)
    b1 = baseline(target, sampling=cfg, generator=torch.Generator().manual_seed(3)).token_ids
    b2 = baseline(target, sampling=cfg, generator=torch.Generator().manual_seed(3)).token_ids
    assert b1 == b2


def test_rollback_keeps_the_cache_consistent():
    """After many rejections the target cache must equal a fresh prefill of the same tokens."""
    target = tiny_llama(0)
    result = speculative(target, ModelDraft(tiny_llama(1), "unrelated"), gamma=6)
    fresh = CachedModel(target)
    fresh.start()
    seq = PROMPT + result.token_ids
    full = fresh.forward(torch.tensor(seq), all_logits=True)
    # the last emitted token's prediction from a clean forward agrees with the baseline continuing
    longer = baseline(target, max_new=MAX_NEW + 1).token_ids
    assert int(full[-1].argmax()) == longer[-1]


def test_prompt_lookup_finds_latest_longest_match():
    tokens = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert lookup_continuation(tokens, 2, max_ngram=3, min_ngram=1) == [7, 8]
    assert lookup_continuation([4, 5, 6], 3, max_ngram=3, min_ngram=1) == []


def test_prompt_lookup_accepts_on_repetitive_text():
    target = tiny_llama(0)
    ref = baseline(target, max_new=80)
    result = speculative(target, PromptLookupDraft(VOCAB, torch.device("cpu")), 4, max_new=80)
    assert result.token_ids == ref.token_ids
    assert result.draft_calls == 0


def test_hf_assisted_drafts_exactly_gamma_tokens_per_step():
    """HF reads the draft length from the assistant's generation_config; decode_hf must pin it to γ there.

    Without the pin HF's default schedule starts at another length and adapts it, so the target would see
    verify passes of other widths than γ + 1 (this test fails on that)."""
    from specbench.engines.hf_assisted.generate import decode_hf

    target, draft = tiny_llama(0), tiny_llama(1)
    before = draft.generation_config.to_dict()
    widths, forward = [], target.forward

    def recording(*args, **kwargs):
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]
        widths.append(ids.shape[-1])
        return forward(*args, **kwargs)

    target.forward = recording
    gamma = 3
    res = decode_hf(
        target, PROMPT, max_new_tokens=30, sampling=GREEDY, seed=0, eos_ids=frozenset(), assistant=draft, gamma=gamma
    )
    steps = widths[1:]  # after the prefill
    assert steps and max(steps) <= gamma + 1
    # a step is shorter only where the draft emits its own EOS or the length limit is near
    assert sum(w == gamma + 1 for w in steps) >= 0.8 * len(steps)
    assert draft.generation_config.to_dict() == before  # restored
    assert len(res.token_ids) == 30

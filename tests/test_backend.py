"""Static KV cache and compiled forwards give the same tokens as the eager dynamic cache."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, needs_cxx, tiny_llama, tiny_t5
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.backend import CAPACITY_STEP, RECOMPILE_LIMIT, ForwardBackend, dynamo_limits, static_capacity
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft
from specbench.decoding.speculative import decode_speculative
from specbench.errors import SpecbenchError

GREEDY = SamplingConfig()
EOS = frozenset([2])
PROMPTS = ([5, 17, 99, 3, 250, 31, 7, 64, 12, 400], [9, 8, 7, 6, 5, 4, 3, 9, 8, 7, 6, 5, 4, 3, 11] * 3)
MAX_NEW = 40


def baseline(model, prompt, backend=None, max_new=MAX_NEW):
    return decode_autoregressive(
        CachedModel(model, backend=backend),
        prompt,
        max_new_tokens=max_new,
        sampling=GREEDY,
        generator=None,
        eos_ids=EOS,
    ).token_ids


def speculative(model, proposer, prompt, gamma, backend=None, max_new=MAX_NEW):
    return decode_speculative(
        CachedModel(model, backend=backend),
        proposer,
        prompt,
        gamma=gamma,
        max_new_tokens=max_new,
        sampling=GREEDY,
        generator=None,
        eos_ids=EOS,
    ).token_ids


@pytest.fixture(scope="module")
def models():
    return tiny_llama(0), tiny_llama(1)


def test_static_capacity_rounds_up_to_whole_steps():
    assert static_capacity(1) == CAPACITY_STEP
    assert static_capacity(CAPACITY_STEP) == CAPACITY_STEP
    assert static_capacity(CAPACITY_STEP + 1) == 2 * CAPACITY_STEP


@pytest.mark.parametrize("gamma", [1, 2, 3, 5, 8])
def test_static_cache_greedy_identity_with_rollbacks(models, gamma):
    target, draft = models
    backend = ForwardBackend(target, "static")  # one backend reused across examples, as a run does
    for prompt in PROMPTS:
        ref = baseline(target, prompt)
        assert baseline(target, prompt, backend) == ref
        for proposer in (
            ModelDraft(draft, "unrelated", backend="static"),
            PromptLookupDraft(VOCAB, torch.device("cpu")),
        ):
            assert speculative(target, proposer, prompt, gamma, backend) == ref, proposer


def test_static_cache_is_reused_and_grows_only_when_needed(models):
    target, _ = models
    backend = ForwardBackend(target, "static")
    first = backend.new_cache(10)
    assert backend.new_cache(CAPACITY_STEP) is first  # reset and reused: compiled graphs keep their addresses
    assert backend.new_cache(CAPACITY_STEP + 1) is not first


def test_static_cache_overflow_is_a_clear_error(models):
    target, _ = models
    model = CachedModel(target, backend=ForwardBackend(target, "static"))
    model.start(capacity=4)
    model.forward(torch.arange(CAPACITY_STEP))
    with pytest.raises(SpecbenchError, match="overflowed"):
        model.forward(torch.tensor([1]))


def test_static_backend_refuses_encoder_decoder():
    with pytest.raises(SpecbenchError, match="decoder-only"):
        ForwardBackend(tiny_t5(2), "static")


@needs_cxx
def test_compiled_backend_greedy_identity(models):
    """torch.compile of the step shapes (inductor on CPU here; CUDA graphs on a GPU) changes no token."""
    target, draft = models
    prompt = PROMPTS[1]
    ref = baseline(target, prompt, max_new=12)
    torch._dynamo.reset()
    backend = ForwardBackend(target, "compiled")
    assert baseline(target, prompt, backend, max_new=12) == ref
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # the steps really ran compiled
    # with frozen weights prepacked for oneDNN (torch 2.13 ignored compile(options={"freezing": True}): none were),
    # and only inside our calls: the process's inductor config is untouched
    assert torch._dynamo.utils.counters["inductor"]["mkldnn_linear_weight_pack_matcher_count"] > 0
    assert not torch._inductor.config.freezing and not torch._inductor.config.cpp_wrapper
    assert speculative(target, PromptLookupDraft(VOCAB, torch.device("cpu")), prompt, 2, backend, max_new=12) == ref


@needs_cxx
def test_primed_shapes_leave_no_compilation_inside_a_decode(models, monkeypatch):
    """After prime() (the target: all logits, a model draft: the last only, 1..γ+1 tokens), a
    speculative decode and a baseline run without compiling anything new: no timed step pays
    for a compilation. Which graphs compile depends on freezing (frozen weights are graph constants:
    one graph per model and shape), not on the C++ wrapper, so they are compiled here without the
    wrapper (its compile per shape is what makes a compiled test slow; test_compiled_backend_greedy_identity
    and the CLI's compiled run use the real settings)."""
    monkeypatch.setattr("specbench.decoding.backend.cpu_inductor_config", lambda: {"freezing": True})
    target, draft_model = models
    prompt, gamma = PROMPTS[0], 1  # shapes 1..γ+1: two per model keep the point at the fewest compilations
    ref = baseline(target, prompt, max_new=12)
    torch._dynamo.reset()
    backend = ForwardBackend(target, "compiled")
    draft = ModelDraft(draft_model, "d", backend="compiled")
    for lm, all_logits in ((CachedModel(target, backend=backend), True), (draft.lm, False)):
        lm.backend.reserve(len(prompt) + 12)  # as Engines.warm_up does: one cache size, so one set of graphs
        lm.prime(gamma + 1, all_logits=all_logits)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    # at least one graph per model and shape (1-token steps share theirs); frozen weights are graph constants that
    # dynamo guards by identity, so a model may add a graph where its call first meets the other's cache entries
    assert graphs >= 2 * (gamma + 1)
    assert speculative(target, draft, prompt, gamma, backend, max_new=12) == ref
    assert baseline(target, prompt, backend, max_new=12) == ref
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


def test_compiled_backend_raises_the_recompile_limit_only_inside_its_own_calls(models):
    """Our γ+1 step shapes need more graphs than dynamo's default limit, but other compiled code in the
    process must keep its limit: the raise is scoped to our compiled calls (no compiler needed here)."""
    ((knob, raised),) = dynamo_limits().items()
    before = getattr(torch._dynamo.config, knob)
    assert before < RECOMPILE_LIMIT == raised  # else this test could not tell scoped from global
    backend = ForwardBackend(models[0], "compiled")
    seen = []
    backend._compiled = lambda **kwargs: seen.append(getattr(torch._dynamo.config, knob)) or "logits"
    assert getattr(torch._dynamo.config, knob) == before  # building a backend changes nothing global
    assert backend(1, input_ids=torch.zeros(1, 1, dtype=torch.long)) == "logits"
    assert seen == [RECOMPILE_LIMIT] and getattr(torch._dynamo.config, knob) == before


def test_cli_rejects_an_unknown_backend():
    res = CliRunner().invoke(app, ["run", "--backend", "turbo"])
    assert res.exit_code == 2
    assert "'turbo' is not one of 'eager', 'static', 'compiled'" in res.output

"""Tiny randomly initialised models built from configs: exactness fixtures that need no download."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

VOCAB = 512

# Tiny models run fastest on one thread (about 20x faster than two when the 2 cores are shared), for the whole suite.
torch.set_num_threads(1)


def tiny_llama(
    seed: int, vocab: int = VOCAB, layers: int = 2, hidden: int = 32, intermediate: int = 64
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


def small_llama(seed: int, sharpen: float = 1.0, vocab: int = 24) -> LlamaForCausalLM:
    """A one-layer, 16-wide Llama over a small vocabulary (laws enumerable), its output layer scaled by `sharpen`."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    return model


def tiny_gpt2(seed: int, vocab: int = VOCAB) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=vocab,
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )  # tied embeddings make a random GPT-2 repeat one token
    return GPT2LMHeadModel(cfg).eval()


def tiny_t5(seed: int, vocab: int = VOCAB) -> T5ForConditionalGeneration:
    torch.manual_seed(seed)
    cfg = T5Config(
        vocab_size=vocab,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    model = T5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # T5's default init collapses a random model onto one repeated token
        for param in model.parameters():
            param.normal_(0.0, 1.0)
    return model


# torch.compile on a CPU (inductor) builds C++ kernels: without a compiler those tests cannot run here
needs_cxx = pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++")), reason="torch.compile on CPU needs a C++ compiler (g++)"
)


def sharpen(model: torch.nn.Module, factor: float = 20.0) -> torch.nn.Module:
    """Scale the output layer so a random model's next-token laws are peaked like a trained one's."""
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(factor)
    return model


@pytest.fixture(scope="session")
def llama_pair():
    return tiny_llama(0), tiny_llama(1)


@pytest.fixture(scope="session")
def t5_pair():
    return tiny_t5(0), tiny_t5(1)


@pytest.fixture(scope="session")
def vllm_session(tmp_path_factory):
    """One vLLM worker for every vLLM end-to-end test (tests/test_vllm*.py): its plain engine on a tiny random Llama
    (head size 64, as vLLM's CPU attention wants) loads once, and each speculative configuration a test runs is loaded
    on its first use and kept (VllmSession), so a test adds only the engines it needs."""
    from helpers import save_tiny

    from specbench.config import LoadSpec
    from specbench.engines.vllm.session import VllmSession

    target = save_tiny(tmp_path_factory.mktemp("vllm") / "tiny", 0, hidden=128, heads=2, kv_heads=2)
    session = VllmSession(LoadSpec(target, device="cpu", dtype="float32"))
    yield session
    session.close()

"""`specbench distill` end to end on a tiny random target: teacher data, training, export, resume, exactness."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.speculative import decode_speculative
from specbench.distill import PRESETS, DistillConfig, distill, load_checkpoint, checkpoint_path
from specbench.errors import SpecbenchError
from specbench.models import load_model

WORDS = ("the cat dog bird sat ran flew on under over a mat log tree and then quickly slowly big small red "
         "green house garden river near far").split()


def sentence(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 3 + j * j) % len(WORDS)] for j in range(n))


ROWS = [{"id": f"r{i}", "prompt": f"translate : {sentence(i, 4 + i % 5)}", "reference": sentence(i + 3, 3 + i % 4)}
        for i in range(24)]


def save_target(path) -> str:
    """A tiny random Llama with a word-level tokenizer (ids 0..2 are <unk>, <s>, </s>; </s> ends a turn)."""
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS) + " translate :"], trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # peaked laws, like a trained model's, so agreement is learnable and meaningful
        model.lm_head.weight.mul_(30)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return save_target(tmp_path_factory.mktemp("target") / "t")


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("task") / "toy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(path)

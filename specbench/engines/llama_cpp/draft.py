"""A GGUF draft model on llama.cpp, for specbench's loop and for llama-cpp-python's own.

With `--engine llama-cpp` a model draft went through torch (the draft GGUF de-quantized by transformers),
so its cost, and so c, was torch's while the target ran on llama.cpp. `LlamaModelDraft` is `ModelDraft`
over a `LlamaCppModel`: the same cache cropping and the same proposal code (it samples from exactly the
processed law q it reports), on llama.cpp's kernels with the GGUF quantized as shipped.

`GgufDraftHook` is the same network behind llama-cpp-python's draft hook. The binding's speculative decoding
takes any `LlamaDraftModel` (a callable: the context's ids → drafted ids) and verifies the drafts itself by
token match (greedy); the only draft it ships is prompt lookup (`LlamaPromptLookupDecoding`), no draft-model
class, so the binding's own loop with a draft GGUF is its loop plus this adapter (greedy drafts: the binding
checks a draft token against its sampled one, which only a greedy draft makes exact at T = 0).
"""

from __future__ import annotations

import numpy as np

from specbench.decoding.batched.drafts import common_prefix_length
from specbench.decoding.drafts.model import ModelDraft
from specbench.engines.llama_cpp.backend import ENGINE_NAME, LlamaCppModel
from specbench.errors import SpecbenchError


def load_gguf_draft(path: str, *, n_ctx: int, threads: int, target_vocab: int) -> LlamaCppModel:
    """The draft GGUF in its own llama.cpp context; a one-line error unless it shares the target's id space."""
    lm = LlamaCppModel(path, n_ctx=n_ctx, threads=threads)
    if lm.n_vocab != target_vocab:
        lm.close()
        raise SpecbenchError(
            f"draft and target vocabularies differ: target has {target_vocab} ids, draft {path} has {lm.n_vocab}; "
            f"pick a draft from the target's family (same tokenizer)"
        )
    return lm


class LlamaModelDraft(ModelDraft):
    """ModelDraft whose network is a GGUF in llama.cpp (`lm` has CachedModel's interface)."""

    is_model = True  # its forwards enter c; model_caches() is [its LlamaCppModel]

    def __init__(self, lm: LlamaCppModel, name: str):  # no super().__init__: that wraps a torch module
        self.lm = lm  # type: ignore[assignment]  # LlamaCppModel duck-types CachedModel (start/forward/truncate)
        self.name = name
        self.decoder_start_id = None
        self._cached: list[int] = []

    def hf_assistant(self):
        raise SpecbenchError(f"a draft loaded by --engine {ENGINE_NAME} has no transformers network to assist HF")

    def batched(self, size: int, device):
        raise SpecbenchError(f"--engine {ENGINE_NAME} decodes one sequence at a time: use --batch-size 1")


class GgufDraftHook:
    """llama-cpp-python's draft hook over a draft GGUF: the context's ids → γ greedy draft ids (np.intc).

    It keeps its KV cache across calls and crops it to the longest prefix shared with the new context, as
    ModelDraft does, so a call feeds only what is new (the binding hands over the whole context each time)."""

    def __init__(self, lm: LlamaCppModel, gamma: int):
        self.lm, self.gamma = lm, gamma
        self._cached: list[int] = []  # tokens whose keys/values are in lm's cache

    def __call__(self, input_ids, /, **kwargs) -> np.ndarray:
        tokens = [int(t) for t in input_ids]
        keep = min(common_prefix_length(self._cached, tokens), len(tokens) - 1)
        if keep == 0:
            self.lm.start(capacity=len(tokens) + self.gamma)
        else:
            self.lm.truncate(keep)
        logits = self.lm.forward(tokens[keep:])  # [V] after the whole context
        out: list[int] = []
        while True:
            out.append(int(logits.argmax()))
            if len(out) == self.gamma:
                break
            logits = self.lm.forward(out[-1:])
        self._cached = tokens + out[:-1]  # the last draft was never fed
        return np.array(out, dtype=np.intc)

"""The EAGLE head as a torch module: one network that `specbench distill --kind eagle` trains, that the torch
engine's `--draft eagle:<folder>` runs (decoding/drafts/eagle.py) and whose weights vLLM's `eagle` method loads.

EAGLE (Li et al., 2024) drafts at the feature level: at position t the head reads the embedding of token t+1 and the
target's final hidden state h_t (after its last norm: what the lm_head reads), and predicts h_{t+1}; the target's own
lm_head turns that into the law of token t+2. Chained, the head feeds its own output back as the next position's
hidden state. The network is vLLM's EagleLlamaForCausalLM: f = layers(fc(emb ⊕ h)) with Llama decoder layers (one in
EAGLE; vLLM builds the config's num_hidden_layers), the first one's input norm the identity, and no final norm (vLLM
returns hidden + residual). Here those layers are transformers' own (a LlamaModel run on `inputs_embeds`, so masks,
RoPE and the KV cache are transformers'); its embedding table is a 1-row stub, since the target's embedding is used.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import torch

from specbench.errors import UsageError
from specbench.models.eagle_layout import WEIGHTS, check_head_matches, head_config, read_head_config

LAYERS = "layers."  # the decoder layers' prefix in the saved file: layers.<i>.* (vLLM's names)


class EagleHead(torch.nn.Module):
    """fc [H, 2H] then Llama decoder layers (the first without its input norm; no final norm): (embedding, hidden) →
    next hidden."""

    def __init__(self, config: dict):
        from transformers import LlamaConfig, LlamaModel

        super().__init__()
        self.config = dict(config)
        hidden = int(config["hidden_size"])
        self.fc = torch.nn.Linear(2 * hidden, hidden, bias=False)
        body = {k: v for k, v in config.items() if k not in ("architectures", "model_type")}
        body |= {"vocab_size": 1, "pad_token_id": None, "tie_word_embeddings": False}
        self.body = LlamaModel(LlamaConfig(**body))  # embed_tokens: a 1-row stub, never read (inputs_embeds)
        self.body.norm = torch.nn.Identity()  # type: ignore[assignment]  # vLLM's head has no final norm
        self.body.layers[0].input_layernorm = torch.nn.Identity()  # nor an input norm
        self._cache_kw = "cache" if "cache" in inspect.signature(self.body.forward).parameters else "past_key_values"

    def forward(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache=None,
    ) -> torch.Tensor:
        """embeds, hidden [B, L, H] (token t+1's embedding, the hidden state at t), position_ids [B, L] (t) → the
        predicted hidden states [B, L, H]. `cache`: a transformers cache the layer's keys and values append to."""
        x = self.fc(torch.cat([embeds, hidden], dim=-1))
        extra = {self._cache_kw: cache} if cache is not None else {}
        out = self.body(
            inputs_embeds=x,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=cache is not None,
            **extra,
        )
        return out.last_hidden_state

    def _layer_state(self) -> dict[str, torch.Tensor]:
        """The decoder layers' weights under vLLM's names (layers.<i>.*); layer 0's norm is the identity and has
        none, so a saved file's layers.0.input_layernorm (EAGLE's own checkpoints carry one) is not read."""
        return {LAYERS + k: v for k, v in self.body.layers.state_dict().items()}

    def new_cache(self):
        """A transformers DynamicCache for the layers' keys and values (decoding/drafts/eagle.py crops it)."""
        from transformers import DynamicCache

        return DynamicCache()

    def head_tensors(self) -> dict[str, torch.Tensor]:
        """The weights under vLLM's names: fc.weight and layers.<i>.* (no embedding, final norm or lm_head)."""
        tensors = {"fc.weight": self.fc.weight.detach()} | {k: v.detach() for k, v in self._layer_state().items()}
        return {k: v.contiguous() for k, v in tensors.items()}

    def load_head_tensors(self, tensors: dict[str, torch.Tensor], text: str) -> None:
        """Copy saved weights in (extra tensors such as embed_tokens or layer 0's input_layernorm are ignored)."""
        wanted = self._layer_state()
        layer = {k: v for k, v in tensors.items() if k.startswith(LAYERS)}
        missing = sorted({"fc.weight"} - tensors.keys()) + sorted(wanted.keys() - layer.keys())
        if missing:
            raise UsageError(
                f"--draft {text}: the head's {WEIGHTS} lacks {', '.join(missing[:3])}; it is not an "
                "EAGLE head (distill one with specbench distill --kind eagle)"
            )
        shapes = [(k, tuple(v.shape), tuple(wanted[k].shape)) for k, v in layer.items() if k in wanted]
        shapes.append(("fc.weight", tuple(tensors["fc.weight"].shape), tuple(self.fc.weight.shape)))
        for name, got, want in shapes:
            if got != want:
                raise UsageError(
                    f"--draft {text}: the head's {name} has shape {list(got)}, its config.json asks for "
                    f"{list(want)}; the folder's files do not belong together"
                )
        depth = len(self.body.layers)
        extra = sorted(k for k in layer if not k.split(".")[1].isdigit() or int(k.split(".")[1]) >= depth)
        if extra:  # a deeper head than its config.json says (other extras, such as a rotary inv_freq, are ignored)
            raise UsageError(
                f"--draft {text}: the head's {WEIGHTS} holds {extra[0]}, which its config.json's "
                f"num_hidden_layers {depth} has no place for; the folder's files do not belong together"
            )
        own = {k[len(LAYERS) :]: v for k, v in layer.items() if k in wanted}
        with torch.no_grad():
            self.fc.weight.copy_(tensors["fc.weight"])
            self.body.layers.load_state_dict(own)  # layer 0's norm is the identity: no tensor to load


def new_head(target_model: torch.nn.Module, seed: int, layers: int = 1) -> EagleHead:
    """A fresh head with `layers` decoder layers for a Llama target, in float32."""
    torch.manual_seed(seed)
    return EagleHead(head_config(llama_target_config(target_model), layers))


def llama_target_config(target_model: torch.nn.Module) -> dict:
    """A Llama target's config as the dict a head's config.json starts from (any other architecture: one line)."""
    model_type = getattr(target_model.config, "model_type", None)
    if model_type != "llama":
        raise UsageError(
            f"an EAGLE head is a Llama decoder layer over a Llama target's hidden states (vLLM's eagle and eagle3 "
            f"methods); the target is a {model_type} model: use a Llama-architecture target"
        )
    config: Any = target_model.config  # a transformers config (torch types Module attributes Tensor | Module)
    return config.to_diff_dict() if hasattr(config, "to_diff_dict") else config.to_dict()


def save_head(head: EagleHead, folder: Path, dtype: torch.dtype) -> None:
    """config.json and model.safetensors (vLLM's eagle layout) into `folder` (the caller makes writes atomic)."""
    from safetensors.torch import save_file

    config = dict(head.config) | {"torch_dtype": str(dtype).removeprefix("torch.")}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file({k: v.to("cpu", dtype) for k, v in head.head_tensors().items()}, str(folder / WEIGHTS))


def load_head(folder: str, text: str, hidden_size: int, vocab_size: int, device, dtype: torch.dtype) -> EagleHead:
    """The head in `folder`, checked against the target's hidden size and vocabulary (one line, exit 2, otherwise)."""
    config, tensors = read_head_files(folder, text, hidden_size, vocab_size)
    head = EagleHead(head_config(config, config["num_hidden_layers"]))
    head.load_head_tensors(tensors, text)
    return head.to(device, dtype).eval()


def read_head_files(folder: str, text: str, hidden_size: int, vocab_size: int) -> tuple[dict, dict[str, torch.Tensor]]:
    """A head folder's config.json (checked against the target's hidden size and vocabulary) and its tensors; one
    line, exit 2, for a folder that is not a head, fits another target, or whose weights cannot be read (an EAGLE or
    an EAGLE-3 head: models/eagle3_head.py reads its folder here too)."""
    from safetensors.torch import load_file

    config = read_head_config(folder, text)
    check_head_matches(config, hidden_size, vocab_size, text)
    try:
        tensors = load_file(str(Path(folder).expanduser() / WEIGHTS))
    except Exception as exc:  # a truncated or foreign file
        raise UsageError(
            f"--draft {text}: cannot read {folder}/{WEIGHTS} ({type(exc).__name__}); re-export the head"
        ) from None
    return config, tensors

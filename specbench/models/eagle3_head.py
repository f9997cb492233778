"""The EAGLE-3 head as a torch module, in the layout of vLLM's Eagle3LlamaForCausalLM (issue 43).

EAGLE-3 (Li et al., *EAGLE-3: Scaling up Inference Acceleration of Large Language Models via Training-Time Test*,
2025) reads not the target's last hidden state but a fusion of three of its layers' outputs (low, middle, high: vLLM's
default for a Llama target is layers 2, L/2 and L-3, counting the embeddings as 0): `fc` [H, 3H] maps them to one
hidden state g_t. Its one decoder layer ("midlayer") attends over the concatenation of the normed embedding of token
t+1 and the normed g_t (so q, k and v read 2H), keeps g_t as the residual, and its output after the head's own final
norm goes through an output layer to the law of token t+2. Chained, the layer's output before that norm is the next
position's g (no fc: it is already H wide). It is trained on tokens only (no feature regression).

The weights carry vLLM's names (`fc.weight`, `midlayer.*`, `norm.weight`, `lm_head.weight`), so a folder saved from
it is one vLLM's `eagle3` method loads. A head may draft over a reduced vocabulary, as EAGLE-3's do: its output layer
has a row per draft id only, and `d2t` (each draft id's offset to its target id) and `t2d` (a mask over the target's
ids) say which ids those are; its laws put nothing on the other ids, as vLLM's compute_logits does.

The layer is written here, not borrowed from transformers' LlamaDecoderLayer,
because its attention reads 2H; the rotary embedding and MLP are transformers'.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from specbench.errors import UsageError
from specbench.models.eagle_layout import EAGLE3_ARCH, WEIGHTS, head_config


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """The EAGLE-3 feature layers for a target with `num_layers` decoder layers: vLLM's default (2, L // 2, L - 3),
    where layer i is the hidden state entering decoder layer i (0: the embeddings; transformers' hidden_states[i],
    which for i = L would be after the final norm, unlike vLLM's, so L is never used). vLLM collects them in layer
    order, so they are sorted and distinct; a target too shallow for its default (L < 6) takes its last three layer
    inputs (all it has below three)."""
    ids = sorted({2, num_layers // 2, num_layers - 3})
    if len(ids) == 3 and ids[0] >= 0 and ids[-1] < num_layers:
        return tuple(ids)
    return tuple(range(max(0, num_layers - 3), num_layers))


class _KVCache:
    """The midlayer's keys and values over the positions computed so far, cropped back as a chain is dropped."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def get_seq_length(self) -> int:
        return 0 if self.k is None else int(self.k.shape[2])

    def crop(self, max_length: int) -> None:
        """Keep the first `max_length` positions (a negative value drops that many from the end: transformers'
        DynamicCache.crop, which the EAGLE draft calls on either head's cache)."""
        keep = max_length if max_length >= 0 else self.get_seq_length() + max_length
        if self.k is not None and self.v is not None:
            self.k, self.v = self.k[:, :, :keep], self.v[:, :, :keep]

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def allowed(self, queries: int, past: int, device) -> torch.Tensor:
        """[queries, keys] bool, after extend: query i (position past + i) sees keys ≤ past + i."""
        return torch.ones(queries, self.get_seq_length(), dtype=torch.bool, device=device).tril(past)


class UnrolledKV(_KVCache):
    """The keys of a head chained over every position at once (EAGLE-3's training-time test): step 1 fed the target's
    features at positions 0..L-1, step j the head's own step j-1 outputs, each step's L keys appended. Step j's query
    at index p stands for drafting depth j after position p: it sees step 1's keys at ≤ p (the cache of real features
    then) and its own index's keys of steps 2..j (the chain drafted so far), nothing else."""

    def allowed(self, queries: int, past: int, device) -> torch.Tensor:
        steps = self.get_seq_length() // queries
        chain = torch.eye(queries, dtype=torch.bool, device=device)
        return torch.cat([torch.ones_like(chain).tril()] + [chain] * (steps - 1), dim=1)


class Eagle3Layer(torch.nn.Module):
    """vLLM's EAGLE-3 decoder layer 0: attention over [norm(embedding), norm(g)] (2H), residual g, then the MLP."""

    def __init__(self, config) -> None:
        from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

        super().__init__()
        hidden, eps = int(config.hidden_size), float(config.rms_norm_eps)
        self.heads, self.kv_heads = int(config.num_attention_heads), int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or hidden // self.heads)
        bias = bool(getattr(config, "attention_bias", False))
        self.input_layernorm = LlamaRMSNorm(hidden, eps=eps)
        self.hidden_norm = LlamaRMSNorm(hidden, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=eps)
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = torch.nn.Linear(2 * hidden, self.heads * self.head_dim, bias=bias)
        self.self_attn.k_proj = torch.nn.Linear(2 * hidden, self.kv_heads * self.head_dim, bias=bias)
        self.self_attn.v_proj = torch.nn.Linear(2 * hidden, self.kv_heads * self.head_dim, bias=bias)
        self.self_attn.o_proj = torch.nn.Linear(self.heads * self.head_dim, hidden, bias=bias)
        self.mlp = LlamaMLP(config)

    def _attention(self, x: torch.Tensor, cos, sin, cache: _KVCache | None, pad: torch.Tensor | None) -> torch.Tensor:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        B, L, _ = x.shape
        a: Any = self.self_attn  # torch types Module attributes Tensor | Module
        q = a.q_proj(x).view(B, L, self.heads, self.head_dim).transpose(1, 2)
        k = a.k_proj(x).view(B, L, self.kv_heads, self.head_dim).transpose(1, 2)
        v = a.v_proj(x).view(B, L, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        past = cache.get_seq_length() if cache is not None else 0
        if cache is not None:
            k, v = cache.extend(k, v)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        S = k.shape[2]
        if cache is not None:
            allowed = cache.allowed(L, past, x.device)
        else:  # query i sees keys ≤ i
            allowed = torch.ones(L, S, dtype=torch.bool, device=x.device).tril()
        mask = allowed[None, None] if pad is None else allowed[None, None] & pad[:, None, None, :S].bool()
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return a.o_proj(out.transpose(1, 2).reshape(B, L, self.heads * self.head_dim))

    def forward(self, embeds, g, cos, sin, cache: _KVCache | None = None, pad: torch.Tensor | None = None):
        """embeds, g [B, L, H] → the layer's output before the head's final norm (the next position's g)."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(g)], dim=-1)
        h = g + self._attention(x, cos, sin, cache, pad)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Head(torch.nn.Module):
    """fc over the fused target features, the midlayer, the final norm and an output layer (vLLM's names)."""

    def __init__(
        self,
        config,
        aux_layers: tuple[int, ...],
        lm_head_weight: torch.Tensor,
        draft_ids: torch.Tensor | None = None,
    ) -> None:
        from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

        super().__init__()
        hidden = int(config.hidden_size)
        self.config, self.aux_layers = config, tuple(aux_layers)
        self.config_dict: dict = {}  # config.json's dict (set by whoever builds the head from one)
        self.fc = torch.nn.Linear(len(self.aux_layers) * hidden, hidden, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = LlamaRMSNorm(hidden, eps=float(config.rms_norm_eps))
        self.lm_head = torch.nn.Linear(hidden, lm_head_weight.shape[0], bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(lm_head_weight)
        self.rotary = LlamaRotaryEmbedding(config=config)
        self.vocab_size = int(config.vocab_size)
        # a reduced draft vocabulary: the target id of each output row (None: every row is its own id)
        self.register_buffer("draft_ids", None if draft_ids is None else draft_ids.long(), persistent=False)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The target's aux features [.., len(aux)·H] (layers concatenated in aux order) → g [.., H]."""
        return self.fc(features)

    def forward(
        self,
        embeds: torch.Tensor,
        g: torch.Tensor,
        position_ids: torch.Tensor,
        cache: _KVCache | None = None,
        pad: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """embeds (token t+1), g (fused features at t, or the head's own previous output) [B, L, H], position_ids
        [B, L] → (the normed output the lm_head reads, the output before the norm: the next position's g)."""
        cos, sin = self.rotary(g, position_ids)
        out = self.midlayer(embeds, g, cos, sin, cache, pad)
        return self.norm(out), out

    def vocab_logits(self, normed: torch.Tensor) -> torch.Tensor:
        """The normed output → logits over the target's whole vocabulary: the output layer's, or for a reduced draft
        vocabulary its rows placed at their target ids and -inf elsewhere (vLLM's compute_logits)."""
        logits = self.lm_head(normed)
        if self.draft_ids is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.vocab_size), float("-inf"))
        full[..., self.draft_ids] = logits
        return full

    def head_tensors(self) -> dict[str, torch.Tensor]:
        """Every weight under vLLM's Eagle3LlamaForCausalLM names (the rotary table is a non-persistent buffer); with
        a reduced draft vocabulary also EAGLE-3's `d2t` (int64 offsets: target id = draft id + d2t) and `t2d`."""
        tensors = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        buffer: Any = self.draft_ids  # a registered buffer (torch types Module attributes Tensor | Module)
        if buffer is not None:
            ids = buffer.detach().cpu()
            tensors["d2t"] = ids - torch.arange(len(ids))
            tensors["t2d"] = torch.zeros(self.vocab_size, dtype=torch.bool).index_fill_(0, ids, True)
        return tensors


def reduced_head(head: Eagle3Head, draft_ids: torch.Tensor) -> Eagle3Head:
    """A copy of `head` drafting over the target ids `draft_ids` only (increasing, distinct): its output layer keeps
    their rows, so for those ids its logits are the full head's (EAGLE-3's draft vocabulary, chosen after training)."""
    ids = draft_ids.long().cpu()
    if len(ids) == 0 or bool((ids[1:] <= ids[:-1]).any()) or int(ids[0]) < 0 or int(ids[-1]) >= head.vocab_size:
        raise ValueError(f"draft ids must be distinct, increasing and below {head.vocab_size}")
    weight = head.lm_head.weight.detach()[ids.to(head.lm_head.weight.device)].float()
    small = Eagle3Head(head.config, head.aux_layers, weight, ids)
    own = {k: v for k, v in head.state_dict().items() if not k.startswith("lm_head.")}
    small.load_state_dict(own, strict=False)
    small.config_dict = dict(head.config_dict) | {"draft_vocab_size": len(ids)}
    return small.to(head.lm_head.weight.device)


class Eagle3Runner(torch.nn.Module):
    """The head as the EAGLE draft drives either head (decoding/drafts/eagle.py): forward(embeds, g, positions, cache)
    → the output that chains (before the final norm); `out_layer` turns it into logits; `fuse` maps the target's
    features to g (the draft applies it to the target's, never to the head's own outputs); `new_cache` its KV cache."""

    def __init__(self, head: Eagle3Head) -> None:
        super().__init__()
        self.head = head

    def new_cache(self) -> _KVCache:
        return _KVCache()

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        return self.head.fuse(features)

    def forward(self, embeds, g, position_ids, attention_mask=None, cache=None) -> torch.Tensor:
        return self.head(embeds, g, position_ids, cache=cache, pad=attention_mask)[1]

    def out_layer(self, x: torch.Tensor) -> torch.Tensor:
        head: Any = self.head  # torch types Module attributes Tensor | Module
        return head.vocab_logits(head.norm(x))


def eagle3_config(target_config: dict, aux_layers: tuple[int, ...]) -> dict:
    """config.json of an EAGLE-3 head for the target whose config (a dict) is given: the target's Llama config with
    one layer, vLLM's eagle3 architecture name, the feature layers and a draft vocabulary as wide as the target's."""
    config = head_config(target_config, 1)
    config["architectures"] = [EAGLE3_ARCH]
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [int(i) for i in aux_layers]}
    config["draft_vocab_size"] = int(target_config["vocab_size"])
    config["tie_word_embeddings"] = False  # the head's lm_head is its own tensor
    return config


def aux_layers_of(config: dict, target_layers: int) -> tuple[int, ...]:
    """The feature layers an eagle3 config names, else vLLM's default for the target's depth."""
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return tuple(int(i) for i in ids) if ids else default_aux_layers(target_layers)


def new_eagle3_head(target_model: torch.nn.Module, seed: int) -> Eagle3Head:
    """A fresh EAGLE-3 head for a Llama target (float32): fc, the midlayer and norm random (transformers' init), the
    output layer a copy of the target's."""
    from transformers import LlamaConfig

    from specbench.models.eagle_head import llama_target_config

    torch.manual_seed(seed)
    target_config = llama_target_config(target_model)
    aux = default_aux_layers(int(target_config["num_hidden_layers"]))
    config = eagle3_config(target_config, aux)
    hf: Any = target_model  # a transformers model (torch types Module attributes Tensor | Module)
    out = hf.get_output_embeddings()
    head = Eagle3Head(LlamaConfig(**config), aux, out.weight.detach().float())
    head.config_dict = config
    return head


def save_eagle3_head(head: Eagle3Head, folder: Path, dtype: torch.dtype) -> None:
    """config.json and model.safetensors (vLLM's eagle3 layout) into `folder` (the caller makes writes atomic)."""
    from safetensors.torch import save_file

    config = dict(head.config_dict) | {"torch_dtype": str(dtype).removeprefix("torch.")}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tensors = {k: v.to("cpu", dtype if v.is_floating_point() else v.dtype) for k, v in head.head_tensors().items()}
    save_file(tensors, str(folder / WEIGHTS))


def load_eagle3_head(config: dict, tensors: dict[str, torch.Tensor], text: str, target_layers: int) -> Eagle3Head:
    """The head a folder's config and tensors describe (shapes checked: one line, exit 2, otherwise)."""
    from transformers import LlamaConfig

    aux = aux_layers_of(config, target_layers)
    bad = [i for i in aux if not 0 <= i < target_layers]
    if bad or list(aux) != sorted(set(aux)):
        raise UsageError(
            f"--draft {text}: the head reads the target's layers {list(aux)}; specbench's loop needs distinct "
            f"layers in increasing order below {target_layers} (the target's depth): use a head trained for this target"
        )
    if "lm_head.weight" not in tensors or "fc.weight" not in tensors:
        raise UsageError(
            f"--draft {text}: the head's weights lack fc.weight or lm_head.weight; it is not an EAGLE-3 head"
        )
    ids = draft_ids_of(tensors, config, text)
    head = Eagle3Head(LlamaConfig(**config), aux, tensors["lm_head.weight"].float(), ids)
    head.config_dict = dict(config)
    wanted = head.state_dict()
    own = {k: v for k, v in tensors.items() if k in wanted}
    missing = sorted(k for k in wanted if k not in own)
    if missing:
        raise UsageError(f"--draft {text}: the head's weights lack {', '.join(missing[:3])}; it is not an EAGLE-3 head")
    for k, v in own.items():
        if tuple(v.shape) != tuple(wanted[k].shape):
            raise UsageError(
                f"--draft {text}: the head's {k} has shape {list(v.shape)}, its config.json asks for "
                f"{list(wanted[k].shape)}; the folder's files do not belong together"
            )
    head.load_state_dict(own, strict=False)
    return head


def draft_ids_of(tensors: dict[str, torch.Tensor], config: dict, text: str) -> torch.Tensor | None:
    """The target id of each output row of a head with a reduced draft vocabulary (from `d2t`), None for a full one;
    one line, exit 2, when the rows and `d2t` do not name distinct target ids."""
    rows, vocab = int(tensors["lm_head.weight"].shape[0]), int(config["vocab_size"])
    if rows == vocab and "d2t" not in tensors:
        return None
    d2t = tensors.get("d2t")
    if d2t is None or tuple(d2t.shape) != (rows,) or d2t.is_floating_point():
        raise UsageError(
            f"--draft {text}: the head drafts over {rows} of {vocab} ids but its weights lack an integer d2t of "
            f"{rows} entries (EAGLE-3's map from draft ids to the target's); export it with its d2t"
        )
    ids = torch.arange(rows) + d2t.long()
    if int(ids.min()) < 0 or int(ids.max()) >= vocab or len(torch.unique(ids)) != rows:
        raise UsageError(
            f"--draft {text}: the head's d2t maps its draft ids outside the target's {vocab} ids or twice onto one; "
            "the folder's files do not belong together"
        )
    if int(config.get("draft_vocab_size") or rows) != rows:
        raise UsageError(
            f"--draft {text}: config.json's draft_vocab_size is {config['draft_vocab_size']} but the output layer "
            f"has {rows} rows; the folder's files do not belong together"
        )
    return ids


def read_eagle3_head(folder: str, text: str, hidden_size: int, vocab_size: int, target_layers: int) -> Eagle3Head:
    """The EAGLE-3 head in `folder` (float32), checked against the target (one line, exit 2, otherwise)."""
    from specbench.models.eagle_head import read_head_files

    config, tensors = read_head_files(folder, text, hidden_size, vocab_size)
    return load_eagle3_head(config, tensors, text, target_layers)

"""The EAGLE head's folder layout, checked without torch: what `specbench distill --kind eagle` writes and what
`--draft eagle:<folder>` reads, in both engines (specbench's loop and vLLM's `eagle` method).

The layout is vLLM's EagleLlamaForCausalLM (the EAGLE-1 checkpoint layout; docs/distill.md): config.json is the
target's Llama config with the head's layers (one, as EAGLE's, or more: vLLM builds `num_hidden_layers` of them),
model.safetensors holds `fc.weight` [H, 2H] (token embedding ⊕ the target's final hidden state → H) and the decoder
layers `layers.<i>.*`, the first without its input_layernorm (vLLM drops only layer 0's). There is no embed_tokens,
final norm or lm_head: the head borrows the target's embedding and output layer. Pure json and pathlib, so the
torch engine's option checks (engines/torch) refuse a wrong folder before any model loads.
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench.errors import UsageError

EAGLE_PREFIX = "eagle:"  # --draft eagle:<folder>
WEIGHTS = "model.safetensors"
LAYOUT = "config.json with Llama layers and model.safetensors with fc.weight and layers.<i>.* (docs/distill.md)"
DROPPED_KEYS = ("transformers_version", "_name_or_path", "torch_dtype", "dtype", "auto_map")


def head_config(target_config: dict, layers: int = 1) -> dict:
    """config.json of a head with `layers` decoder layers for the target whose config (a dict) is given: the
    target's, with the head's layer count."""
    config = {k: v for k, v in target_config.items() if k not in DROPPED_KEYS}
    config["num_hidden_layers"] = layers
    if isinstance(config.get("layer_types"), list):  # one entry per layer where the config lists them
        config["layer_types"] = config["layer_types"][:1] * layers
    config["architectures"] = ["LlamaForCausalLM"]  # with method "eagle", vLLM builds EagleLlamaForCausalLM
    return config


def read_head_config(folder: str | Path, text: str) -> dict:
    """The head folder's config.json, after the checks that need no torch; a UsageError (exit 2) naming the
    problem and the fix otherwise. `text`: the --draft value as given."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise UsageError(
            f"--draft {text}: {folder} is not a folder; pass the folder `specbench distill --kind eagle` wrote"
        )
    if not (path / "config.json").is_file() or not (path / WEIGHTS).is_file():
        raise UsageError(f"--draft {text}: {folder} is not an EAGLE head; an eagle head folder holds {LAYOUT}")
    config = config_json(folder, text)
    layers = config.get("num_hidden_layers") if isinstance(config, dict) else None
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1 or "hidden_size" not in config:
        raise UsageError(
            f"--draft {text}: {folder}/config.json is not an EAGLE head's (it needs hidden_size and "
            f"num_hidden_layers ≥ 1); pass the folder `specbench distill --kind eagle` wrote"
        )
    return config


def config_json(folder: str | Path, text: str):
    """A head folder's config.json, parsed (eagle here, vLLM's heads in engines/vllm/heads.py); one line, exit 2, when
    it is not readable JSON. `text`: the --draft value as given."""
    try:
        return json.loads((Path(folder).expanduser() / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"--draft {text}: {folder}/config.json is not readable JSON ({exc}); fix or replace it"
        ) from None


def check_head_matches(config: dict, hidden_size: int, vocab_size: int, text: str) -> None:
    """A head reads the target's hidden states and shares its embedding: both sizes must be the target's."""
    for name, want in (("hidden_size", hidden_size), ("vocab_size", vocab_size)):
        if config.get(name) != want:
            raise UsageError(
                f"--draft {text}: the head's {name} is {config.get(name)} but the target's is {want}; "
                f"use a head distilled for this target (specbench distill --kind eagle --target <it>)"
            )


EAGLE3_ARCH = "LlamaForCausalLMEagle3"  # vLLM's architecture name for an EAGLE-3 head (models/eagle3_head.py)


def check_head_method(config: dict, method: str, text: str) -> None:
    """`eagle:` names an EAGLE head, `eagle3:` an EAGLE-3 one (vLLM runs them as different methods): a folder of the
    other kind is one line naming the prefix that fits."""
    is_eagle3 = EAGLE3_ARCH in (config.get("architectures") or [])
    if is_eagle3 != (method == "eagle3"):
        fits, folder = ("eagle3", "an EAGLE-3") if is_eagle3 else ("eagle", "an EAGLE-1")
        raise UsageError(f"--draft {text}: the folder holds {folder} head; pass it as --draft {fits}:<folder>")

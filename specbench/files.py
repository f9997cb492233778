"""Every file specbench writes goes through here: atomic replacement, append-only JSONL, and one clear
error when the disk is full or read-only.

A benchmark that is killed, or whose disk fills, must lose nothing already measured and leave nothing
half-written: whole files are built beside their destination and renamed over it (a reader sees the
old file or the new one, never a torn one), and the temporary file is removed on any failure. Appends
are flushed and fsynced line by line, so a kill leaves at most a torn last line, which readers repair
by truncating the file to its last whole line (one ftruncate: never a rewrite a kill could empty).
Files inside a results folder are opened with O_NOFOLLOW: a symbolic link planted there (`.lock`,
`examples.jsonl`) is refused, never followed to write over a file outside.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from specbench.errors import SpecbenchError

DISK_ERRNOS = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded", errno.EROFS: "read-only file system"}


DISK_FIXES = {errno.ENOSPC: "free space there", errno.EDQUOT: "free some of your quota there"}
ELSEWHERE = "pass another --results-dir"  # what the results folder's writes say; `export` names its --out instead


def disk_error(exc: OSError, path: Path) -> SpecbenchError:
    """One line naming the file, the disk problem and the fix, for an OSError raised while writing `path` (a
    read-only disk is not told to free space: issue 41)."""
    reason = DISK_ERRNOS.get(exc.errno or 0)
    if reason:
        fix = DISK_FIXES.get(exc.errno or 0, "nothing can be written there")
        return SpecbenchError(f"cannot write {path}: {reason} on the disk that holds it; {fix} or {ELSEWHERE}")
    if exc.errno == errno.ENOENT:
        return SpecbenchError(f"cannot write {path}: the folder {path.parent} does not exist; create it or {ELSEWHERE}")
    return SpecbenchError(f"cannot write {path}: {exc.strerror or exc}; check the folder's permissions or {ELSEWHERE}")


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # Linux and macOS; elsewhere a link is refused by the check below


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """os.open(path) that refuses a symbolic link or anything but a regular file at `path` (one-line
    SpecbenchError); any other OSError is raised as it is, for the caller's disk_error."""
    if not NOFOLLOW and os.path.islink(path):
        raise _link_refused(path)
    try:
        fd = os.open(path, flags | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_refused(path) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SpecbenchError(f"{path} is not a regular file; remove it (specbench writes only plain files here)")
    return fd


def _link_refused(path: Path) -> SpecbenchError:
    return SpecbenchError(
        f"{path} is a symbolic link; specbench does not follow links inside a results folder "
        "(it would write over the file it points to): remove the link"
    )


def temp_path(path: Path) -> Path:
    """The hidden sibling a file is built in before it replaces `path` (same folder, so the rename is atomic)."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def remove_stale_temps(folder: Path) -> list[str]:
    """Delete the temporary files (temp_path's `.<name>.tmp<pid>`) in `folder` left by processes that are gone (a
    kill between writing a file and renaming it) → their names. A live process's temporary is left alone."""
    removed = []
    for path in folder.glob(".*.tmp*"):
        pid = path.name.rpartition(".tmp")[2]
        if not pid.isdigit() or _alive(int(pid)) or not path.is_file() or path.is_symlink():
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path.name)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process, or no way to ask: keep its file
        return True
    return True


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it atomically replaces `path`, on any failure it is removed.

    Works for files and for folders (a folder is built whole, then renamed into place)."""
    tmp = temp_path(path)
    if tmp.is_symlink():  # a link planted at the temporary name would be written through
        tmp.unlink()
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


def atomic_write_bytes(path: Path, write: Callable[[Path], object]) -> None:
    """Atomically create `path` with `write(tmp)`, a function that writes the whole file at `tmp`."""
    with replacing(path) as tmp:
        write(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: Path, obj) -> None:
    """Strict JSON (NaN and infinities are written as null, so every reader can load the file)."""
    atomic_write_text(path, json.dumps(json_finite(obj), indent=2, default=str, allow_nan=False) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    """Write every row as one JSON line, atomically; returns the number of rows."""
    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(json_finite(row), ensure_ascii=False, allow_nan=False) + "\n")
                count += 1

    atomic_write_bytes(path, write)
    return count


def append_jsonl(path: Path, row: dict) -> None:
    """Append one JSON line and fsync it (a kill leaves at most a partial last line, which readers repair).

    A failed append (disk full) is truncated back to the last whole line, so a resume never sees it."""
    append_jsonl_text(path, json.dumps(json_finite(row), allow_nan=False) + "\n")


def append_jsonl_text(path: Path, lines: str) -> None:
    """Append whole JSON lines already encoded by append_jsonl (a Ray worker's, copied verbatim), as append_jsonl."""
    data = lines.encode("utf-8")
    try:
        fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:  # os.write may write part of a large buffer
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)
    except OSError as exc:
        raise disk_error(exc, path) from exc


def truncate_torn_tail(path: Path) -> int:
    """Cut a partial last line (a kill mid-append) off a JSONL file → the bytes cut (0: none, or no file).

    The file is truncated in place to just after its last newline: one ftruncate, so a kill at any moment
    leaves either the old file or the cut one, every whole line intact (a rewrite could leave it empty).
    A last line that lacks only its newline (a whole JSON object) is kept and given one."""
    try:
        fd = open_nofollow(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise disk_error(exc, path) from exc
    try:
        size = os.fstat(fd).st_size
        cut = _after_last_newline(fd, size)
        if cut == size:
            return 0
        if _is_json_object(os.pread(fd, size - cut, cut)):
            os.pwrite(fd, b"\n", size)
            cut = size
        else:
            os.ftruncate(fd, cut)
        os.fsync(fd)
        return size - cut
    except OSError as exc:
        raise disk_error(exc, path) from exc
    finally:
        os.close(fd)


def _is_json_object(data: bytes) -> bool:
    """Whether `data` is one whole JSON object (no proper prefix of a JSON object is one)."""
    try:
        return isinstance(json.loads(data.decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False


def _after_last_newline(fd: int, size: int, block: int = 1 << 16) -> int:
    """The offset just past the last newline in the first `size` bytes of `fd` (0: there is none), read backwards."""
    end = size
    while end > 0:
        start = max(0, end - block)
        chunk = os.pread(fd, end - start, start)
        at = chunk.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def json_finite(obj):
    """`obj` with every NaN or ±inf float replaced by None (JSON has no such numbers)."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: json_finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_finite(v) for v in obj]
    return obj


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()

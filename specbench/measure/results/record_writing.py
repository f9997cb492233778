"""Writing a run folder: claim it (a lock one process holds), append each record, repair a torn last line.

Measuring is the slow, killable part of a run, so what it writes is append-only and crash-safe: a record is one
fsynced JSONL line (files.append_jsonl), a kill mid-write leaves a torn tail that the next run truncates
(never rewrites), and a second process measuring into the same folder fails fast on its lock instead of
interleaving lines. The records' shape is results/schema.py's; reading them back is results/records.py's.
"""

from __future__ import annotations

import contextlib
import os
import platform
import tempfile
from contextlib import contextmanager
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.files import append_jsonl, disk_error, open_nofollow, remove_stale_temps, truncate_torn_tail
from specbench.measure.results.schema import ExampleRecord, record_dict


def prepare_run_dir(path: Path) -> Path:
    """Create `path` and prove it writable with a probe file of this call's own (mkstemp: O_EXCL, so never through a
    link, and never another process's probe: runs started together into one results folder each unlink only theirs)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise disk_error(exc, path) from exc
    return path


def append_record(path: Path, record: ExampleRecord) -> None:
    append_jsonl(path, record_dict(record))


_HELD_LOCKS: dict[str, int] = {}  # run folders this process holds the lock of → how many run_lock calls hold it


@contextmanager
def run_lock(root: Path):
    """Hold an exclusive lock on a run directory while measuring into it.

    Two processes appending to one examples.jsonl (the same command started twice, or two
    sweeps over one grid) would measure examples twice and interleave their lines; the second
    one fails fast instead. flock locks die with their process, so a killed run leaves no stale
    lock behind. (On a system without fcntl the lock is skipped.) Re-entrant within a process:
    the run is claimed before its models load (claimed_run_dir) and measured under the same lock.
    """
    key = str(Path(root).resolve())
    if key in _HELD_LOCKS:
        _HELD_LOCKS[key] += 1
        try:
            yield
        finally:
            _HELD_LOCKS[key] -= 1
        return
    with flock_run_dir(root):
        _HELD_LOCKS[key] = 1
        try:
            yield
        finally:
            del _HELD_LOCKS[key]


@contextmanager
def claimed_run_dir(root: Path):
    """Make the run folder and hold its lock from before anything is loaded or written until the run ends, so a
    second process with the same run id fails at once (not after loading and calibrating) and never writes the
    manifest. A folder made here that still holds nothing but its lock at the end (a refused run) is removed."""
    made = not root.exists()
    prepare_run_dir(root)
    try:
        with run_lock(root):
            remove_stale_temps(root)  # a kill at a rename left .summary.json.tmp<pid>; only the lock holder sweeps
            yield
    finally:
        if made and [p.name for p in root.iterdir()] in ([], [".lock"]):
            (root / ".lock").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                root.rmdir()


@contextmanager
def flock_run_dir(root: Path):
    """The lock itself, not re-entrant: what another process measuring into `root` holds (run_lock wraps it).
    filelock's FileLock (flock on Unix, msvcrt on Windows; it dies with its process, so a kill leaves no stale
    lock); `.lock` holds who has it, for the refusal's message. A link planted at `.lock` is refused first (our
    open_nofollow, one line), never followed to truncate the file it points to."""
    from filelock import FileLock, Timeout

    path = root / ".lock"
    try:  # never through a link: refused here, before the lock library opens the path
        os.close(open_nofollow(path, os.O_RDWR | os.O_CREAT))
    except OSError as exc:
        raise disk_error(exc, path) from exc
    lock = FileLock(path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise SpecbenchError(
            f"{root} is being measured by {_lock_holder(path)}; wait for it to finish, or give this run "
            f"another --run-id (a sweep: another --sweep-id)"
        ) from None
    except OSError as exc:
        raise disk_error(exc, path) from exc
    try:
        with contextlib.suppress(OSError):  # who holds the lock, for the message above; a full disk must not stop
            fd = open_nofollow(path, os.O_WRONLY | os.O_TRUNC)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(f"specbench process {os.getpid()} on {platform.node()}")
        yield
    finally:
        lock.release()


def _lock_holder(path: Path) -> str:
    """What the holder of a run folder's lock wrote into it ("another process" if unreadable)."""
    try:
        with os.fdopen(open_nofollow(path, os.O_RDONLY), encoding="utf-8", errors="replace") as fh:
            return fh.read().strip() or "another process"
    except (OSError, SpecbenchError):
        return "another process"


def repair_jsonl(path: Path) -> None:
    """Drop a partial last line left by a kill, so appends start on a clean line: the file is truncated to its
    last whole line (files.truncate_torn_tail), never rewritten, so a kill during the repair loses nothing."""
    truncate_torn_tail(path)

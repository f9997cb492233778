"""Reading one results file without trusting it: bounded in size and JSON nesting, never through a symbolic link,
decoded line by line for JSONL; a problem is returned as a reason, never raised (load_* raise one line).

Kept apart from records.py (which reads whole folders through reader.py) so that the run folder's own readers
(run_folder.py, a resume, a sweep's cells) use the same file checks without importing the folder reader, which
imports them: one direction, no circle.
"""

from __future__ import annotations

import json
import stat
import warnings
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.measure.results.record_checks import example_problem, manifest_problem, object_problem, summary_problem
from specbench.measure.results.schema import Manifest

MAX_JSON_BYTES = 64 << 20  # a summary, manifest, sweep.json or checks.json: a run writes a few kB
MAX_JSONL_BYTES = 1 << 30  # examples.jsonl and the probes: 10,000 examples of 512 tokens are about 100 MB
MAX_DEPTH = 64  # nesting levels of any JSON value read back: a run writes at most 6


def read_bounded(path: Path, limit: int) -> tuple[bytes | None, str | None]:
    """A results file's bytes → (bytes, None); (None, None) when it does not exist; (None, why) when it is a symbolic
    link (never followed out of a results folder), not a regular file, larger than `limit` bytes or unreadable."""
    path = Path(path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return None, "a symbolic link (not followed out of a results folder)"
    if not stat.S_ISREG(st.st_mode):
        return None, "not a regular file (a folder?)"
    if st.st_size > limit:
        return None, f"{st.st_size} bytes, more than the {limit} bytes a results file may hold"
    try:
        return path.read_bytes(), None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"


def too_deep(doc, limit: int = MAX_DEPTH) -> bool:
    """Whether a parsed JSON value nests more than `limit` lists or objects (walked without recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        if children and depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def parse_json(raw: bytes):
    """Bytes → (the JSON value, None) or (None, why it is unusable: not UTF-8, not JSON, nested too deep)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({str(exc)[:80]})"
    except RecursionError:
        return None, f"not valid JSON (nested more than {MAX_DEPTH} levels deep)"
    if too_deep(doc):
        return None, f"not valid JSON (nested more than {MAX_DEPTH} levels deep)"
    return doc, None


def scan_jsonl(path: Path, check=object_problem) -> tuple[list[dict], list[str]]:
    """Every line of a JSONL file that `check` accepts, and "<path>:<line>: skipped ..." for each other line.

    Lines are split and decoded one by one, so a torn last line (a kill mid-write), stray
    non-UTF-8 bytes or a hand-edited line costs that line only. A missing file has no lines; a link, a folder or
    an oversized file is one note and no lines (read_bounded)."""
    data, problem = read_bounded(path, MAX_JSONL_BYTES)
    if problem:
        return [], [f"{path}: skipped, {problem}"]
    rows, skipped = [], []
    for i, raw in enumerate((data or b"").split(b"\n"), 1):
        if not raw.strip():
            continue
        row, problem = parse_json(raw)
        if problem == "not UTF-8 text":
            skipped.append(f"{path}:{i}: skipped a line that is not UTF-8 text")
            continue
        if problem:
            skipped.append(f"{path}:{i}: skipped a malformed line (an interrupted write?)")
            continue
        problem = check(row)
        if problem:
            skipped.append(f"{path}:{i}: skipped a line of the wrong shape ({problem})")
        else:
            rows.append(row)
    return rows, skipped


def _warn_all(messages: list[str]) -> None:
    for message in messages:
        warnings.warn(message, stacklevel=3)


def read_records(path: Path, check=object_problem) -> list[dict]:
    """scan_jsonl with each skipped line as a warning (the report lists those as skipped)."""
    rows, skipped = scan_jsonl(path, check)
    _warn_all(skipped)
    return rows


def read_examples(path: Path) -> list[dict]:
    """The ExampleRecords of an examples.jsonl that the metrics can use; every other line is warned about."""
    return read_records(path, example_problem)


def read_json_object(path: Path, what: str) -> tuple[dict | None, str | None]:
    """A JSON object file → (its dict, None), or (None, "<path>: why it cannot be used"). Never raises; a link, a
    folder, an oversized or too deeply nested file is refused like a malformed one (read_bounded, parse_json)."""
    raw, problem = read_bounded(path, MAX_JSON_BYTES)
    if raw is None and problem is None:
        return None, f"{path}: no {what}"
    if problem:
        return None, f"{path}: {what} is {problem}"
    doc, problem = parse_json(raw or b"")
    if problem:
        return None, f"{path}: {what} is {problem}"
    if not isinstance(doc, dict):
        return None, f"{path}: {what} is a JSON {type(doc).__name__}, not an object"
    return doc, None


def load_json_object(path: Path, what: str, fix: str) -> dict:
    """read_json_object for a command that cannot go on without the file: one-line SpecbenchError naming `fix`."""
    doc, problem = read_json_object(path, what)
    if problem or doc is None:
        raise SpecbenchError(f"{problem}; {fix}")
    return doc


def load_manifest(path: Path, fix: str) -> Manifest:
    """A run's manifest.json read by attribute: a one-line SpecbenchError naming `fix` if it is not one."""
    doc = load_json_object(path, "manifest.json", fix)
    problem = manifest_problem(doc)
    if problem:
        raise SpecbenchError(f"{path}: not a specbench manifest ({problem}); {fix}")
    return Manifest.from_dict(doc)


def read_summary(path: Path) -> tuple[dict | None, str | None]:
    """A summary.json → (its dict, None) or (None, why it was skipped)."""
    doc, problem = read_json_object(path, "summary.json")
    if doc is not None and (shape := summary_problem(doc)):
        return None, f"{path}: skipped, {shape}"
    return doc, problem

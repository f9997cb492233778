"""The results schema, atomic writes, and loading runs back into pandas.

A run directory `results/<run-id>/` holds:
  manifest.json   the full config, task and example hash, models, package versions, git commit, hardware
  examples.jsonl  one `ExampleRecord` per line, appended as each example finishes (a kill loses
                  nothing already measured; a rerun skips the ids already there)
  summary.json    derived metrics (specbench.measure.metrics), rewritten atomically after every example
  .lock           held (flock) by the process measuring into the directory, so a second one fails fast
The schema is versioned; each field carries its meaning as a comment here and in the README.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.files import append_jsonl

SCHEMA_VERSION = 1


@dataclass
class EngineRecord:
    """What one engine (baseline or speculative) did on one example: raw counts and times."""

    text: str  # decoded output (special tokens skipped)
    token_ids: list[int]  # generated token ids, EOS included if emitted
    n_tokens: int  # len(token_ids)
    stop_reason: str  # "eos" or "length"
    prefill_s: float  # time to first token (prompt prefill of all models + first token)
    decode_s: float  # time from the first token to the last
    target_calls: int  # target forward passes after prefill
    draft_calls: int  # draft forward passes after prefill (0 for model-free drafts and the baseline)
    drafted: int  # draft tokens proposed and verified
    accepted: int  # of those, accepted
    trials: int  # acceptance trials: Σ over steps of min(accepted + 1, γ')
    accept_lengths: list[int]  # accepted count of every verification step
    draft_lengths: list[int]  # drafted count γ' of every verification step (same order as accept_lengths)
    expected_accept: list[float]  # Σ_x min(p(x), q(x)) at every verified position (up to each step's first rejection)
    draft_s: float  # decode time spent proposing
    verify_s: float  # decode time spent in target passes and verification
    # added after results existed (older records, e.g. a sweep's stored baselines, lack it):
    proposal_lengths: list[int] = field(default_factory=list)  # tokens offered at each pass the budget did not shorten (0 = none)
    pass_lengths: list[int] = field(default_factory=list)  # tokens fed to each target pass after prefill (speculative: 1 or g+1), in order
    repeat_s: list[float] = field(default_factory=list)  # prefill + decode seconds of each timed repeat (--repeats); the times above are their medians


@dataclass
class ExampleRecord:
    """One line of examples.jsonl."""

    schema_version: int
    example_id: str  # the task's id of the example
    prompt_tokens: int  # prompt length in target tokens
    reference: str | None  # the task's reference output, if any
    baseline: EngineRecord
    speculative: EngineRecord
    identical: bool  # speculative token ids equal the baseline's (expected at T = 0 only)
    first_divergence: int | None  # index of the first differing token, None when identical
    # added later (older records lack it): at T = 0, the numerics floor and the classification of the
    # divergence (evidence/numerics.py): {"floor_positions", "floor_flips", "divergence": {...} or None}
    numerics: dict | None = None


def prepare_run_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise SpecbenchError(f"cannot write results to {path}: {exc.strerror}; pass a writable --results-dir") from exc
    return path


def append_record(path: Path, record: ExampleRecord) -> None:
    append_jsonl(path, asdict(record))


@contextmanager
def run_lock(root: Path):
    """Hold an exclusive lock on a run directory while measuring into it.

    Two processes appending to one examples.jsonl (the same command started twice, or two
    sweeps over one grid) would measure examples twice and interleave their lines; the second
    one fails fast instead. flock locks die with their process, so a killed run leaves no stale
    lock behind. (On a system without fcntl the lock is skipped.)
    """
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    path = root / ".lock"
    with path.open("a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            raise SpecbenchError(f"{root} is being measured by {holder}; wait for it to finish, or give this run "
                                 f"another --run-id (a sweep: another --sweep-id)") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"specbench process {os.getpid()} on {platform.node()}")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def read_records(path: Path) -> list[dict]:
    """Every complete line of an examples.jsonl; a truncated or malformed line is skipped with a warning."""
    if not path.exists():
        return []
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            warnings.warn(f"{path}:{i}: skipped a malformed line (an interrupted write?)", stacklevel=2)
    return rows


def repair_jsonl(path: Path) -> None:
    """Drop a partial last line left by a kill, so appends start on a clean line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        path.write_bytes(data[:cut])


def git_commit() -> str | None:
    """The checkout's commit when specbench runs from a git clone; None for an installed wheel (whose
    site-packages may sit inside some unrelated repository: that repository's HEAD would be a lie)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment_info() -> dict:
    """Package versions and hardware, for the manifest."""
    import torch
    import transformers

    import specbench

    from specbench.measure.hardware import hardware_identity

    hw = hardware_identity()
    return {
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__, "specbench": specbench.__version__},
        "git_commit": git_commit(),
        "hardware": hw,
    }


@dataclass
class RunFiles:
    """Paths of one run directory."""

    root: Path
    manifest: Path = field(init=False)
    examples: Path = field(init=False)
    summary: Path = field(init=False)

    def __post_init__(self):
        self.manifest = self.root / "manifest.json"
        self.examples = self.root / "examples.jsonl"
        self.summary = self.root / "summary.json"


def load_runs(paths: list[Path]):
    """Summaries of every run under `paths` (run dirs, sweep dirs or results/) → pandas DataFrame, one row per run."""
    import pandas as pd

    rows = []
    for summary in sorted({s for p in paths for s in ([p] if p.name == "summary.json" else Path(p).rglob("summary.json"))}):
        try:
            data = json.loads(summary.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            warnings.warn(f"skipped {summary}: {exc}", stacklevel=2)
            continue
        if not isinstance(data, dict):
            warnings.warn(f"skipped {summary}: not a JSON object", stacklevel=2)
            continue
        data["run_dir"] = str(summary.parent)
        rows.append(data)
    return pd.json_normalize(rows) if rows else pd.DataFrame()


def load_examples(run_dir: Path):
    """examples.jsonl of one run → pandas DataFrame with nested fields flattened (baseline.*, speculative.*)."""
    import pandas as pd

    return pd.json_normalize(read_records(Path(run_dir) / "examples.jsonl"))

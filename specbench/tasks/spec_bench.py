"""Spec-Bench's question set as a task source: where the file comes from, and its rows.

Spec-Bench (hemingkx/Spec-Bench, Apache-2.0) is the benchmark speculative-decoding papers
report on: 480 questions in 13 categories (MT-bench's 8, two turns each, then translation,
summarization, qa, math_reasoning and rag). Its file is one JSON object a line,
{"question_id", "category", "turns": [...], "reference": [...] (some categories)}. It is never
committed; it comes from, in this order:

  1. a task's `source: {type: spec-bench, path: ...}` (any file in that format, e.g. your own
     questions; an optional `sha256:` pins it),
  2. $SPECBENCH_SPEC_BENCH_FILE (a copy of Spec-Bench's own file: checked against the pin),
  3. `cache_dir()/data/spec-bench/question.jsonl`, downloaded once from the pinned commit's raw
     file on GitHub and checked against the pin before it is written.

Rows come out flat for the task machinery: `id` is "<category>:<question_id>" (the export and
the per-category table read both back from it), `prompt` the first turn, `turns` every user
turn (the runner asks the later ones with the model's own answers in the conversation:
measure/run/turns.py), `reference` the first reference or null.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.tasks.sources import Source, data_dir, register

COMMIT = "fd2c1cd7d2201ef71db4c5f4e455008f017967bf"
SHA256 = "4b6d33e79484f9841c487ee87d1cf6aa8c6066f61d5d482ff09e5a007fafdf04"
URL = f"https://raw.githubusercontent.com/hemingkx/Spec-Bench/{COMMIT}/data/spec_bench/question.jsonl"
ENV_FILE = "SPECBENCH_SPEC_BENCH_FILE"
DOWNLOAD_TIMEOUT_S = 60

# Spec-Bench's categories in its file's order; speed.py's mt_bench group is the first eight
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
CATEGORIES = (*MT_BENCH, "translation", "summarization", "qa", "math_reasoning", "rag")
GROUPS = {"mt_bench": MT_BENCH}
# the reference metric of each category; the others (qa, math_reasoning, rag, MT-bench) have none:
# Spec-Bench reports only speed for them (MT-bench's quality is a judge model's, out of scope here)
CATEGORY_METRIC = {"translation": "bleu", "summarization": "rouge"}

_verified: dict[tuple, str] = {}  # (path, size, mtime) → sha256 already computed this process


def known_categories() -> str:
    """'mt_bench (group: writing, …), writing, …' for error messages."""
    return ", ".join([f"mt_bench (group: {', '.join(MT_BENCH)})", *CATEGORIES])


def categories_of(category: str | None) -> tuple[str, ...]:
    """A category, a group or None (all) → the categories it covers; one line for an unknown one."""
    if category is None:
        return CATEGORIES
    if category in GROUPS:
        return GROUPS[category]
    if category in CATEGORIES:
        return (category,)
    raise SpecbenchError(f"unknown Spec-Bench category {category!r}; known: {known_categories()}")


def cached_path() -> Path:
    return data_dir() / "spec-bench" / "question.jsonl"


def file_for(source: dict) -> tuple[Path, str | None]:
    """(the question file, the SHA-256 it must have or None) for a validated source, without downloading."""
    if source.get("path"):
        return Path(source["path"]), source.get("sha256")
    env = os.environ.get(ENV_FILE)
    if env:
        return Path(env).expanduser(), SHA256
    return cached_path(), SHA256


def sha256_of(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _verified:
        _verified[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return _verified[key]


def check_hash(path: Path, want: str | None) -> None:
    """One line when the file is not the pinned one."""
    if want is None:
        return
    got = sha256_of(path)
    if got != want:
        pinned = "Spec-Bench's question.jsonl at commit " + COMMIT[:7] if want == SHA256 else "the task's pinned file"
        raise SpecbenchError(
            f"{path}: SHA-256 {got[:12]}… does not match {pinned} ({want[:12]}…); "
            f"replace it with the original, or name other questions in a task's "
            f"source: {{type: spec-bench, path: ...}}"
        )


def download(dest: Path) -> None:
    """Fetch the pinned file once into the cache: checked against the hash before anything is written."""
    import urllib.error
    import urllib.request

    from specbench.files import atomic_write_bytes

    try:
        with urllib.request.urlopen(URL, timeout=DOWNLOAD_TIMEOUT_S) as resp:
            data = resp.read()
    except (urllib.error.URLError, OSError) as e:
        raise SpecbenchError(
            f"cannot download Spec-Bench's questions ({getattr(e, 'reason', e)}); set {ENV_FILE} "
            f"to a copy of question.jsonl or put one at {dest}"
        ) from None
    got = hashlib.sha256(data).hexdigest()
    if got != SHA256:
        raise SpecbenchError(
            f"the download from {URL} has SHA-256 {got[:12]}…, not the pinned {SHA256[:12]}…; "
            f"nothing was written; set {ENV_FILE} to a checked copy"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(dest, lambda tmp: tmp.write_bytes(data))


def question_file(source: dict) -> Path:
    """The checked question file of a source, downloading Spec-Bench's own into the cache the first time."""
    path, want = file_for(source)
    if not path.is_file():
        if source.get("path") or os.environ.get(ENV_FILE):
            raise SpecbenchError(f"Spec-Bench question file {path} does not exist; check the path")
        download(path)
    check_hash(path, want)
    return path


def parse_question(raw: str, where: str) -> dict:
    """One line of the file → a flat task row; one line for a malformed question."""
    try:
        q = json.loads(raw)
    except json.JSONDecodeError as e:
        raise SpecbenchError(f"{where}: not valid JSON ({e.msg}); write one question object per line") from None
    if not isinstance(q, dict):
        raise SpecbenchError(f"{where}: expected a question object, got {type(q).__name__}")
    qid, category, turns = q.get("question_id"), q.get("category"), q.get("turns")
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or not isinstance(category, str):
        raise SpecbenchError(f"{where}: a question needs a question_id (number) and a category (string)")
    if not isinstance(turns, list) or not turns:
        raise SpecbenchError(f"{where}: question {qid} has no turns; give it a non-empty list of user turns")
    if not all(isinstance(t, str) and t.strip() for t in turns):
        raise SpecbenchError(f"{where}: question {qid} has an empty or non-text turn; every turn must be text")
    ref = q.get("reference")
    reference = ref[0] if isinstance(ref, list) and ref and isinstance(ref[0], str) else None
    return {
        "id": f"{category}:{qid}",
        "question_id": qid,
        "category": category,
        "prompt": turns[0],
        "turns": list(turns),
        "reference": reference,
    }


def read_questions(path: Path) -> list[dict]:
    """Every question of a file as flat rows, in file order."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise SpecbenchError(f"{path}: not UTF-8 text (byte {e.start}); save it as UTF-8 JSONL") from None
    return [parse_question(line, f"{path}:{n}") for n, line in enumerate(lines, start=1) if line.strip()]


@register
class SpecBenchSource(Source):
    """`source: {type: spec-bench, path?, category?, sha256?}`: Spec-Bench's questions as a registered kind."""

    kind = "spec-bench"
    per_category = True  # Spec-Bench reports per category: --limit counts per category
    keys = frozenset({"type", "path", "category", "sha256"})

    @classmethod
    def validate(cls, source: dict, where: str, base_dir: Path | None) -> dict:
        """The `spec-bench` source keys: optional path (made absolute), category (or group) and sha256."""
        out = dict(source)
        path = out.get("path")
        if path is not None:
            if not isinstance(path, str) or not path:
                raise SpecbenchError(f"{where}: spec-bench source 'path' must be a file path (got {path!r})")
            p = Path(path).expanduser()
            out["path"] = str(p if p.is_absolute() or base_dir is None else base_dir / p)
        category = out.get("category")
        if category is not None:
            if not isinstance(category, str):
                raise SpecbenchError(f"{where}: spec-bench source 'category' must be a string (got {category!r})")
            categories_of(category)
        sha = out.get("sha256")
        if sha is not None and (not isinstance(sha, str) or len(sha) != 64 or set(sha) - set("0123456789abcdef")):
            raise SpecbenchError(f"{where}: spec-bench source 'sha256' must be 64 lower-case hex digits")
        return out

    @classmethod
    def describe(cls, source: dict) -> str:
        path, want = file_for(source)
        pin = ", pinned" if want else ""
        return f"spec-bench {source.get('category') or 'all'} ({path}{pin})"

    @classmethod
    def status(cls, source: dict) -> tuple[bool, int | None]:
        """(usable without network, number of questions) — without downloading or raising."""
        path, _ = file_for(source)
        if not path.is_file():
            return False, None
        try:
            return True, len(cls.load_rows(source))
        except SpecbenchError:
            return False, None

    @classmethod
    def load_rows(cls, source: dict) -> list[dict]:
        """The rows of the source's category (or group, or all), in file order."""
        wanted = set(categories_of(source.get("category")))
        path = question_file(source)
        rows = [r for r in read_questions(path) if r["category"] in wanted]
        if not rows:
            wanted_text = source.get("category") or "any known category"
            raise SpecbenchError(f"{path} has no questions in {wanted_text}; known: {known_categories()}")
        return rows

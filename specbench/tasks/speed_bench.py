"""NVIDIA's SPEED-Bench as a task source: the hub dataset or a prepared local copy, its rows and its category labels.

SPEED-Bench (NVIDIA, 2026; the benchmark vLLM's, SGLang's and llama.cpp's serving benchmarks ship) measures
speculative decoding across semantic domains and input lengths. Where its format was read (2026-12-06):
  - the dataset card of hub `nvidia/SPEED-Bench` (README.md `dataset_info`, commit 487aa71): configs `qualitative`
    (880 questions) and `throughput_1k`, `_2k`, `_8k`, `_16k`, `_32k` (1536 each), one split `test`, fields
    question_id (text), category, sub_category, turns (list of text), source, src_id, difficulty, multiturn (bool);
  - NVIDIA's loaders, NVIDIA/Model-Optimizer examples/specdec_bench (its SPEEDBench dataset) and NVIDIA-NeMo/Skills
    nemo_skills/dataset/speed-bench/prepare.py: a question whose text the card may not redistribute holds the
    PLACEHOLDER below instead; their prepare scripts fetch it from the original sources and write the full config,
    Model-Optimizer's as parquet with `turns`, NeMo-Skills' as `<config>.jsonl` with `messages` ([{role: user,
    content}] per turn; the file vLLM's `vllm bench serve --dataset-name speed_bench` reads);
  - AIPerf's SPEED-Bench guide (ai-dynamo/aiperf docs/tutorials/speed-bench.md) and vLLM's `bench serve` options
    (--speed-bench-dataset-subset, --speed-bench-category): the 11 qualitative domains (80 questions each) and the
    throughput configs' three entropy tiers, low_entropy, mixed and high_entropy (512 each).
Nothing of the dataset is committed; tests use a fixture of our own in that format.

Rows come from, in this order: a task's `source: {type: speed-bench, path: ...}`, $SPECBENCH_SPEED_BENCH_FILE (a
prepared .jsonl/.json/.parquet), else the hub at a pinned revision. Files and hub take one code path
(`sources.load_hub`, `datasets.load_dataset`), so the tests exercise the loader real runs use. A hub that cannot be
reached with no local file named is a usage error (exit 2) naming both ways to a copy; a placeholder among the
chosen questions is refused (a run never measures the placeholder's text), naming the prepare step.

Rows come out flat, as Spec-Bench's do: `id` is "<label>:<question_id>" where the label is the category's task
name (`speed-bench:coding`, `speed-bench:throughput_8k:mixed`), so a run's records group by category in
`report --by category` without ever merging with Spec-Bench's own categories of the same name; `prompt` is the
first turn and `turns` every user turn (later ones are asked after the model's own answers, as Spec-Bench's).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from specbench.errors import SpecbenchError, UsageError
from specbench.tasks.rows import short
from specbench.tasks.sources import HubUnreachable, Source, load_hub, register

DATASET = "nvidia/SPEED-Bench"
REVISION = "487aa718444e816458d1a0a52bfce7a454285cf4"  # the card's commit read above; a task's `revision:` overrides
ENV_FILE = "SPECBENCH_SPEED_BENCH_FILE"
TASK = "speed-bench"  # the shipped task's name and every category label's prefix
QUALITATIVE = "qualitative"
THROUGHPUT = ("throughput_1k", "throughput_2k", "throughput_8k", "throughput_16k", "throughput_32k")
CONFIGS = (QUALITATIVE, *THROUGHPUT)
DOMAINS = (
    "coding",
    "humanities",
    "math",
    "multilingual",
    "qa",
    "rag",
    "reasoning",
    "roleplay",
    "stem",
    "summarization",
    "writing",
)
ENTROPY_TIERS = ("low_entropy", "mixed", "high_entropy")
PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}  # file suffix → datasets builder
PREPARE_FIX = "build the full config with NVIDIA's prepare.py (docs/tasks.md#speed-bench)"


def categories(config: str) -> tuple[str, ...]:
    """The categories of a config: the 11 domains of `qualitative`, the 3 entropy tiers of a throughput config."""
    return DOMAINS if config == QUALITATIVE else ENTROPY_TIERS


# --------------------------------------------------------------------------- names and labels


def parse_selector(selector: str) -> tuple[str, str | None]:
    """What follows 'speed-bench:' → (config, category or None): 'coding' → (qualitative, coding), 'throughput_8k' →
    (throughput_8k, None), 'throughput_8k:mixed' → (throughput_8k, mixed); one line for anything else."""
    first, _, second = selector.partition(":")
    config, category = (first, second or None) if first in CONFIGS else (QUALITATIVE, selector)
    if category is not None and category not in categories(config):
        raise SpecbenchError(
            f"unknown SPEED-Bench task speed-bench:{selector[:60]}; use speed-bench:<domain> ({', '.join(DOMAINS)}), "
            f"speed-bench:<config> ({', '.join(THROUGHPUT)}) or speed-bench:<config>:<tier> "
            f"({', '.join(ENTROPY_TIERS)})"
        )
    return config, category


def label(config: str, category: str) -> str:
    """A category's label (its task name): 'speed-bench:coding', 'speed-bench:throughput_8k:mixed'."""
    return f"{TASK}:{category}" if config == QUALITATIVE else f"{TASK}:{config}:{category}"


def parse_label(text: str) -> tuple[str, str] | None:
    """A category label → (config, category); None for any other text (a Spec-Bench category, a task name)."""
    prefix, colon, rest = str(text).partition(":")
    if prefix != TASK or not colon:
        return None
    first, _, second = rest.partition(":")
    if second:
        return (first, second) if first in THROUGHPUT and second in ENTROPY_TIERS else None
    return (QUALITATIVE, first) if first in DOMAINS else None


def overall_label(config: str) -> str:
    """The label of all of a run's questions of one config (as Spec-Bench's 'overall')."""
    return f"{TASK} overall" if config == QUALITATIVE else f"{TASK}:{config} overall"


def table_order(text: str) -> tuple[int, int] | None:
    """Where a category or overall label sits in a table (configs in CONFIGS order, each one's categories, then its
    overall); None for any other text."""
    for i, config in enumerate(CONFIGS):
        if text == overall_label(config):
            return i, len(categories(config))
    parsed = parse_label(text)
    if parsed is None:
        return None
    return CONFIGS.index(parsed[0]), categories(parsed[0]).index(parsed[1])


# --------------------------------------------------------------------------- rows


def question_turns(q: dict, where: str) -> list[str]:
    """The user turns of a question: its `turns` (the card's format), else the user contents of its `messages`
    (NeMo-Skills' prepared file); one line when neither is a non-empty list of text."""
    turns = q.get("turns")
    messages = q.get("messages")
    if turns is None and isinstance(messages, list):
        if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            raise SpecbenchError(f"{where}: 'messages' must be a list of {{role, content}} objects with text content")
        turns = [m["content"] for m in messages if m.get("role") in (None, "user")]
    if not isinstance(turns, list) or not turns:
        raise SpecbenchError(
            f"{where}: question {short(q.get('question_id'))} has no turns; give it 'turns' (a non-empty list of "
            f"text) or 'messages' (NVIDIA's prepared format)"
        )
    if not all(isinstance(t, str) and t.strip() for t in turns):
        raise SpecbenchError(
            f"{where}: question {short(q.get('question_id'))} has an empty or non-text turn; every turn must be text"
        )
    return list(turns)


def parse_row(q: object, config: str, where: str) -> dict:
    """One question → a flat task row; one line for a malformed one."""
    if not isinstance(q, dict):
        raise SpecbenchError(f"{where}: expected a question object, got {type(q).__name__}")
    qid, category = q.get("question_id"), q.get("category")
    if isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip() or ":" in str(qid):
        raise SpecbenchError(f"{where}: a question needs a question_id (text without ':'), got {short(qid)}")
    if category not in categories(config):
        raise SpecbenchError(
            f"{where}: category {short(category)} is not one of SPEED-Bench {config}'s "
            f"({', '.join(categories(config))}); set the source's config to the file's ({', '.join(CONFIGS)})"
        )
    turns = question_turns(q, where)
    return {
        "id": f"{label(config, category)}:{qid}",
        "question_id": str(qid),
        "category": category,
        "sub_category": q.get("sub_category"),
        "difficulty": q.get("difficulty"),
        "prompt": turns[0],
        "turns": turns,
    }


def is_placeholder(row: dict) -> bool:
    return any(t.startswith(PLACEHOLDER) for t in row["turns"])


def check_complete(rows: list[dict], chosen: list[dict], config: str, where: str) -> None:
    """Refuse placeholders among the chosen questions, naming the prepare step and the categories complete here."""
    missing = Counter(r["category"] for r in chosen if is_placeholder(r))
    if not missing:
        return
    holed = {r["category"] for r in rows if is_placeholder(r)}
    whole = [label(config, c) for c in categories(config) if c not in holed and any(r["category"] == c for r in rows)]
    counts = ", ".join(f"{c} {n}" for c, n in sorted(missing.items()))
    raise SpecbenchError(
        f"{where}: {sum(missing.values())} of the {len(chosen)} questions are placeholders for text SPEED-Bench may "
        f"not redistribute ({counts}); {PREPARE_FIX} and set {ENV_FILE}=<its output>/{config}.jsonl"
        + (f", or run a category complete here: {', '.join(whole)}" if whole else "")
    )


# --------------------------------------------------------------------------- where the rows come from


def file_for(source: dict) -> Path | None:
    """The local copy a validated source names (its path, else $SPECBENCH_SPEED_BENCH_FILE); None: the hub."""
    if source.get("path"):
        return Path(source["path"])
    env = os.environ.get(ENV_FILE)
    return Path(env).expanduser() if env else None


def read_dataset(source: dict) -> tuple[Sequence[dict], str]:
    """(the questions, where they came from for messages): a local copy through datasets' json/parquet builder, or
    the hub config at the pinned revision; both through `load_hub`."""
    config = source.get("config", QUALITATIVE)
    path = file_for(source)
    if path is None:
        try:
            found = load_hub(DATASET, config=config, split="test", revision=source.get("revision", REVISION))
        except HubUnreachable as e:
            raise UsageError(
                f"cannot reach the Hugging Face hub for {DATASET} ({e.reason}) and no local copy is named; set "
                f"{ENV_FILE}=<file> or give a task source: {{type: speed-bench, path: <file>}} (a .jsonl or .parquet "
                f"of SPEED-Bench {config}, see docs/tasks.md#speed-bench)"
            ) from None
        return found, f"{DATASET} ({config})"
    builder = BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise SpecbenchError(f"{path}: a SPEED-Bench copy must be a .jsonl, .json or .parquet file")
    if not path.is_file():
        raise SpecbenchError(f"SPEED-Bench file {path} does not exist; check the path or unset {ENV_FILE}")
    import datasets  # heavy; only when a speed-bench task is loaded

    try:
        return load_hub(builder, split="test", data_files={"test": str(path)}), str(path)
    except datasets.exceptions.DatasetGenerationError as e:
        cause = str(e.__cause__ or e).strip().splitlines() or [type(e).__name__]
        raise SpecbenchError(
            f"{path}: not a table datasets can read ({cause[0][:160]}); write one question object per line, "
            f"each with question_id, category and turns (a list of text)"
        ) from None


@register
class SpeedBenchSource(Source):
    """`source: {type: speed-bench, config?, category?, path?, revision?}`: SPEED-Bench as a registered kind."""

    kind = "speed-bench"
    keys = frozenset({"type", "config", "category", "path", "revision"})
    per_category = True  # SPEED-Bench reports per category: --limit counts per category

    @classmethod
    def validate(cls, source: dict, where: str, base_dir: Path | None) -> dict:
        """Config (default qualitative) and category checked against the card's; path made absolute."""
        out = {"config": QUALITATIVE, "revision": REVISION, **source}  # the revision read is in the manifest
        if out["config"] not in CONFIGS:
            raise SpecbenchError(
                f"{where}: speed-bench source 'config' {short(out['config'])} is unknown; "
                f"use one of {', '.join(CONFIGS)}"
            )
        category = out.get("category")
        if category is not None and category not in categories(out["config"]):
            raise SpecbenchError(
                f"{where}: speed-bench source 'category' {short(category)} is not one of {out['config']}'s: "
                f"{', '.join(categories(out['config']))}"
            )
        for key in ("path", "revision"):
            if key in out and (not isinstance(out[key], str) or not out[key]):
                raise SpecbenchError(f"{where}: speed-bench source '{key}' must be a non-empty string")
        if out.get("path"):
            p = Path(out["path"]).expanduser()
            out["path"] = str(p if p.is_absolute() or base_dir is None else base_dir / p)
        return out

    @classmethod
    def describe(cls, source: dict) -> str:
        what = source["config"] + (f", {source['category']}" if source.get("category") else "")
        path = file_for(source)
        return f"speed-bench file {path} ({what})" if path else f"hub {DATASET} ({what}, test)"

    @classmethod
    def status(cls, source: dict) -> tuple[bool, int | None]:
        """(usable without network, size unknown until loaded) — without downloading or reading the file."""
        path = file_for(source)
        return (path is not None and path.is_file()), None

    @classmethod
    def load_rows(cls, source: dict) -> list[dict]:
        """The source's questions (its category, or all), in file order; placeholders among them refused."""
        config, wanted = source.get("config", QUALITATIVE), source.get("category")
        found, where = read_dataset(source)
        rows = [parse_row(q, config, f"{where} row {n}") for n, q in enumerate(found, start=1)]
        chosen = [r for r in rows if wanted is None or r["category"] == wanted]
        if not chosen:
            raise SpecbenchError(
                f"{where} has no {config} questions in {wanted or 'any category'}; "
                f"check the file or the source's config"
            )
        check_complete(rows, chosen, config, where)
        return chosen

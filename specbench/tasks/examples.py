"""Examples: a task's rows turned into the prompts a run decodes, chosen by seed and hashed.

A `TaskSpec` (specs.py) says which row fields fill which template variables; this module picks a
seeded, deterministic sample of rows (each Spec-Bench or SPEED-Bench category apart), renders each into an
`Example` (prompt, reference, later turns), refuses what would measure nonsense (an empty prompt, a
NaN field, two rows with one id), and hashes the chosen examples so two runs can prove they measured
the same prompts. It also wraps a prompt in the model's chat template, the last step before tokens.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specbench.errors import SpecbenchError
from specbench.tasks import sources as data
from specbench.tasks.rows import check_unique_ids, example_id

if TYPE_CHECKING:
    from specbench.tasks.specs import TaskSpec


@dataclass(frozen=True)
class Example:
    """One prompt to decode, as the runner receives it."""

    id: str  # stable id within the source: the row's 'id' field, else its index
    prompt: str  # the rendered prompt text (template applied, chat template NOT yet applied)
    reference: str | None  # the reference output, when the task has one
    turns: tuple[str, ...] = ()  # later user turns of a multi-turn question, asked after the model's own answers


def select_examples(spec: TaskSpec, limit: int, seed: int) -> list[Example]:
    """A seeded sample of min(limit, max_examples, size) examples, identical on every machine.

    Rows are ordered by sha256(seed, row index), so the choice does not depend on Python's
    RNG and a smaller limit gives a prefix of a larger one's sample.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SpecbenchError(f"limit must be an integer >= 1 (got {limit!r})")
    rows = data.load_rows(spec.source)
    n = len(rows)
    if n == 0:
        raise SpecbenchError(f"task {spec.name}: its source has no rows; check the source")
    check_fields(spec, rows[0])
    check_unique_ids(rows, spec.source, f"task {spec.name}")
    order = sorted(range(n), key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).digest())
    strata = stratify(spec, rows, order)
    if strata is not None:
        return [make_example(spec, rows[i], i) for i in per_stratum(strata, limit)[: spec.max_examples or n]]
    k = min(limit, n, spec.max_examples or n)
    return [make_example(spec, rows[i], i) for i in order[:k]]


def stratify(spec: TaskSpec, rows, order: list[int]) -> list[list[int]] | None:
    """A Spec-Bench or SPEED-Bench task over several categories samples each one apart (both report per
    category): the seeded order split by category, categories in file order; None for every other task."""
    kind = data.SOURCES.get(spec.source.get("type", ""))
    if kind is None or not kind.per_category:
        return None
    groups: dict[str, list[int]] = {}
    for row in rows:  # categories in file order
        groups.setdefault(row["category"], [])
    for i in order:
        groups[rows[i]["category"]].append(i)
    return list(groups.values()) if len(groups) > 1 else None


def per_stratum(strata: list[list[int]], limit: int) -> list[int]:
    """`limit` rows of each stratum, rank-major (every stratum's first, then every second …), so a
    smaller limit's sample is a prefix of a larger one's, as for unstratified tasks."""
    return [s[rank] for rank in range(limit) for s in strata if rank < len(s)]


def check_fields(spec: TaskSpec, row: dict) -> None:
    """Fail early when a mapped field (or the reference) is absent from the data."""
    for data_field in [*spec.fields.values(), *([spec.reference] if spec.reference else [])]:
        get_field(row, data_field, spec.name)


def make_example(spec: TaskSpec, row: dict, index: int) -> Example:
    """Render one row: fill the template from the mapped fields and read the reference."""
    ex_id = example_id(row, index)
    values = {}
    for var, data_field in spec.fields.items():
        value = _as_text(get_field(row, data_field, spec.name), data_field, spec.name, ex_id)
        if not value.strip():
            raise SpecbenchError(
                f"task {spec.name}: field '{data_field}' of example {ex_id} is empty; remove that row from the source"
            )
        values[var] = value
    prompt = spec.template.format(**values)
    if not prompt.strip():
        raise SpecbenchError(f"task {spec.name}: example {ex_id} renders an empty prompt; fix the template or the data")
    reference = None
    if spec.reference:
        ref_value = get_field(row, spec.reference, spec.name)
        # a speed-only task may lack some references (Spec-Bench gives them for some categories only)
        reference = (
            None if ref_value is None and not spec.metric else _as_text(ref_value, spec.reference, spec.name, ex_id)
        )
        if spec.metric and not (reference or "").strip():
            raise SpecbenchError(
                f"task {spec.name}: reference of example {ex_id} is empty; remove that row or set metric: none"
            )
    return Example(id=ex_id, prompt=prompt, reference=reference, turns=later_turns(spec, row, ex_id))


def later_turns(spec: TaskSpec, row: dict, ex_id: str) -> tuple[str, ...]:
    """The user turns after the first, from the task's `turns` field (a list of text); () for one turn."""
    if not spec.turns:
        return ()
    turns = get_field(row, spec.turns, spec.name)
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise SpecbenchError(
            f"task {spec.name}: example {ex_id} has no turns (field '{spec.turns}' must be a "
            f"non-empty list of text); fix or remove that row"
        )
    return tuple(turns[1:])


def get_field(row: dict, path: str, task: str = "task") -> object:
    """row[path], where 'a.b' reaches into nested mappings; an exact key 'a.b' wins over nesting."""
    if path in row:
        return row[path]
    node: object = row
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise SpecbenchError(
                f"task {task}: data field '{path}' is missing; available fields: "
                f"{', '.join(flat_fields(row))}; fix 'fields'/'reference' in the task"
            )
        node = node[part]
    return node


def flat_fields(row: dict, prefix: str = "") -> list[str]:
    """Every field path of a row, nested mappings spelled with dots: ['id', 'translation.de', ...]."""
    out = []
    for key, value in row.items():
        path = f"{prefix}{key}"
        out.extend(flat_fields(value, path + ".") if isinstance(value, dict) else [path])
    return out


def _as_text(value: object, data_field: str, task: str, ex_id: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):  # JSON's NaN/Infinity: no text to benchmark
        raise SpecbenchError(
            f"task {task}: field '{data_field}' of example {ex_id} is {value}, not text; fix or remove that row"
        )
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise SpecbenchError(
        f"task {task}: field '{data_field}' of example {ex_id} is a {type(value).__name__}, "
        f"not text; map a text field (use a dotted path for nested data)"
    )


def examples_hash(examples: list[Example]) -> str:
    """sha256 of the chosen examples' ids, prompts and references, in order."""
    payload = json.dumps(
        [[e.id, e.prompt, e.reference, *([list(e.turns)] if e.turns else [])] for e in examples],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def render_for_model(spec: TaskSpec, prompt: str, tokenizer) -> str:
    """The text the model sees: the prompt as a user turn of the chat template, when both ask for it."""
    if spec.chat_template and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
    return prompt


def render_conversation(spec: TaskSpec, messages: list[dict], tokenizer) -> str:
    """A later turn's text: the conversation so far (user and assistant messages, the model's own answers)
    through the chat template, ending with the assistant's cue; without a template, the messages' contents
    one after another, separated by blank lines."""
    if spec.chat_template and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return "\n\n".join(m["content"] for m in messages)

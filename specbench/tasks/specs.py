"""Tasks are data: a YAML file in tasks/builtin/ (or a JSONL of prompts) validated into a `TaskSpec`.

A task says where rows come from (`sources.py` loads them), which row fields fill which
template variables, whether to wrap the prompt in the model's chat template, the reference
field and the quality metric. This module validates that once, picks a seeded,
deterministic sample of `Example`s and hashes them, so two runs can prove they measured the
same prompts. The runner gets finished prompt strings and never sees task files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import reprlib
import string
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from specbench.errors import SpecbenchError
from specbench.tasks import sources as data

TASKS_DIR = Path(__file__).parent / "builtin"  # package data: the tasks that ship with specbench
METRICS = ("bleu", "rouge")
TASK_KEYS = (
    "name",
    "description",
    "source",
    "fields",
    "template",
    "chat_template",
    "reference",
    "metric",
    "max_new_tokens",
    "max_examples",
    "turns",
)
REQUIRED_KEYS = ("source", "template")
JSONL_MAX_NEW_TOKENS = 64


class _NoAliasLoader(yaml.SafeLoader):
    """safe_load without YAML aliases: a task never needs `*name`, and nested aliases expand a few hundred bytes
    into gigabytes (the 'billion laughs')."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in a task file; write the value out", mark
            )
        return super().compose_node(parent, index)


_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist = 60, 60, 2, 4, 4


def short(value: object) -> str:
    """repr(value) bounded to about a line, whatever the value's size (a message must not hold a whole file)."""
    return _SHORT.repr(value)


@dataclass(frozen=True)
class Example:
    """One prompt to decode, as the runner receives it."""

    id: str  # stable id within the source: the row's 'id' field, else its index
    prompt: str  # the rendered prompt text (template applied, chat template NOT yet applied)
    reference: str | None  # the reference output, when the task has one
    turns: tuple[str, ...] = ()  # later user turns of a multi-turn question, asked after the model's own answers


@dataclass(frozen=True)
class TaskSpec:
    """A validated task; build it with `load_task`."""

    name: str
    description: str
    source: dict  # validated by data.validate_source: {'type': hub|jsonl|offline, ...}
    fields: dict[str, str]  # template variable → data field (dotted path for nested rows: 'translation.de')
    template: str  # str.format template whose {variables} are exactly the keys of `fields`
    chat_template: bool  # wrap the prompt with the tokenizer's chat template when it has one
    reference: str | None  # data field holding the reference output (dotted path allowed)
    metric: str | None  # 'bleu', 'rouge', or None for speed-only tasks
    max_new_tokens: int  # default generation budget for this task
    max_examples: int | None = None  # cap on examples drawn from this task, whatever --limit asks
    path: str | None = None  # the file the task was read from
    turns: str | None = None  # data field listing every user turn (the first is the prompt); None: one turn
    variables: tuple[str, ...] = field(default=(), repr=False)  # template variables, in order

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("variables")
        return d


# --------------------------------------------------------------------------- loading specs


def load_task(name_or_path: str) -> TaskSpec:
    """A task by name (tasks/<name>.yaml), a path to a .yaml task, or a path to a .jsonl of prompts."""
    path = Path(name_or_path).expanduser()
    if path.suffix == ".jsonl":
        return _jsonl_task(path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise SpecbenchError(f"task file {path} does not exist; check the path")
        return _yaml_task(path)
    if name_or_path.startswith(SPEC_BENCH + ":"):
        return spec_bench_task(name_or_path)
    named = TASKS_DIR / f"{name_or_path}.yaml"
    if "/" not in name_or_path and named.is_file():
        return _yaml_task(named)
    known = ", ".join(_task_names()) or "none"
    raise SpecbenchError(f"unknown task {name_or_path!r}; use one of {known}, a .yaml task file or a .jsonl of prompts")


def _task_names() -> list[str]:
    return sorted(p.stem for p in TASKS_DIR.glob("*.yaml"))


SPEC_BENCH = "spec-bench"  # the shipped task; `spec-bench:<category or group>` narrows it


def spec_bench_task(name: str) -> TaskSpec:
    """`spec-bench:<category>` (or `:mt_bench`): the shipped spec-bench task on that category, with the
    category's reference metric (BLEU for translation, ROUGE for summarization, none for the others)."""
    from specbench.tasks import spec_bench

    category = name.partition(":")[2]
    spec_bench.categories_of(category)  # one line for an unknown one, listing the known
    path = TASKS_DIR / f"{SPEC_BENCH}.yaml"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    metric = spec_bench.CATEGORY_METRIC.get(category)
    raw.update(
        name=name,
        metric=metric or "none",
        source={**raw["source"], "category": category},
        description=f"Spec-Bench's {category} questions; reference metric: "
        f"{metric or 'none (Spec-Bench reports speed only for this category)'}",
    )
    return dataclasses.replace(parse_task(raw, where=name, default_name=name, base_dir=path.parent), path=str(path))


def _yaml_task(path: Path) -> TaskSpec:
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as e:
        raise SpecbenchError(f"{path}: not valid YAML ({str(e).splitlines()[0]}); fix the syntax") from None
    except UnicodeDecodeError as e:
        raise SpecbenchError(f"{path}: not UTF-8 text (byte {e.start}); save the task file as UTF-8") from None
    except RecursionError:
        raise SpecbenchError(f"{path}: nested too deeply to be a task file") from None
    spec = parse_task(raw, where=str(path), default_name=path.stem, base_dir=path.parent)
    return dataclasses.replace(spec, path=str(path))


def parse_task(raw: object, where: str, default_name: str, base_dir: Path | None = None) -> TaskSpec:
    """Validate a task mapping (as read from YAML) into a TaskSpec; relative paths resolve against base_dir."""
    if not isinstance(raw, dict):
        raise SpecbenchError(f"{where}: a task file must be a mapping of keys ({', '.join(TASK_KEYS)})")
    unknown = sorted(set(raw) - set(TASK_KEYS), key=str)
    if unknown:
        shown = [k[:60] if isinstance(k, str) else short(k) for k in unknown]
        raise SpecbenchError(f"{where}: unknown key(s) {', '.join(shown)}; allowed keys: {', '.join(TASK_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise SpecbenchError(f"{where}: missing required key(s) {', '.join(missing)}")

    name = raw.get("name", default_name)
    _check_str(name, "name", where, allow_empty=False)
    description = raw.get("description", "")
    _check_str(description, "description", where)
    source = data.validate_source(raw["source"], where, base_dir)

    template = raw["template"]
    _check_str(template, "template", where, allow_empty=False)
    variables = template_variables(template, where)
    fields = raw.get("fields") or {}
    if not isinstance(fields, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in fields.items()
    ):
        raise SpecbenchError(f"{where}: 'fields' must map template variables to data field names (strings)")
    for var in variables:
        if var not in fields:
            raise SpecbenchError(
                f"{where}: template variable {{{var}}} is not in fields ({', '.join(fields) or 'none'}); "
                f"add '{var}: <data field>' under fields"
            )
    for var in fields:
        if var not in variables:
            raise SpecbenchError(
                f"{where}: fields maps {var!r} but the template never uses {{{var}}}; remove it or use it"
            )

    chat_template = raw.get("chat_template", True)
    if not isinstance(chat_template, bool):
        raise SpecbenchError(f"{where}: 'chat_template' must be true or false (got {short(chat_template)})")
    reference = raw.get("reference")
    if reference is not None:
        _check_str(reference, "reference", where, allow_empty=False)

    metric = raw.get("metric")
    metric = None if metric in (None, "none") else metric
    if metric is not None and metric not in METRICS:
        raise SpecbenchError(f"{where}: unknown metric {short(metric)}; use one of {', '.join(METRICS)} or none")
    if metric is not None and reference is None:
        raise SpecbenchError(f"{where}: metric {metric} needs a 'reference' data field; add one or set metric: none")

    max_new_tokens = raw.get("max_new_tokens", JSONL_MAX_NEW_TOKENS)
    _check_positive_int(max_new_tokens, "max_new_tokens", where)
    max_examples = raw.get("max_examples")
    if max_examples is not None:
        _check_positive_int(max_examples, "max_examples", where)
    turns = raw.get("turns")
    if turns is not None:
        _check_str(turns, "turns", where, allow_empty=False)

    return TaskSpec(
        name=name,
        description=description,
        source=source,
        fields=dict(fields),
        template=template,
        chat_template=chat_template,
        reference=reference,
        metric=metric,
        max_new_tokens=max_new_tokens,
        max_examples=max_examples,
        path=None,
        turns=turns,
        variables=variables,
    )


def _check_str(value: object, key: str, where: str, allow_empty: bool = True) -> None:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise SpecbenchError(
            f"{where}: '{key}' must be a {'non-empty ' if not allow_empty else ''}string (got {short(value)})"
        )


def _check_positive_int(value: object, key: str, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecbenchError(f"{where}: '{key}' must be an integer >= 1 (got {short(value)})")


def template_variables(template: str, where: str = "template") -> tuple[str, ...]:
    """Named {variables} of a str.format template; positional, dotted or indexed ones are refused, and so are
    format specs and conversions ({t:d} fails on text, {t:>4000000000} allocates gigabytes per example)."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise SpecbenchError(
            f"{where}: template is not a valid format string ({e}); write literal braces as {{{{ }}}}"
        ) from None
    for _, var, spec, conversion in parsed:
        if var is None:
            continue
        if not var.isidentifier():
            raise SpecbenchError(
                f"{where}: template placeholder {{{var[:60]}}} must be a plain name; "
                f"map nested data under fields (e.g. src: translation.de) and write {{src}}"
            )
        if spec or conversion:
            shown = f"{{{var}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}"
            raise SpecbenchError(
                f"{where}: template placeholder {short(shown)} has a format spec or conversion; "
                f"write a plain {{{var}}} (only plain placeholders are filled)"
            )
        if var not in names:
            names.append(var)
    return tuple(names)


def _jsonl_task(path: Path) -> TaskSpec:
    """A task from a JSONL of {"prompt": ..., optional "reference": ...}: no template, no metric."""
    rows = data.read_jsonl(path)
    if not rows:
        raise SpecbenchError(f'{path}: no prompts; write one {{"prompt": ...}} object per line')
    for n, row in enumerate(rows, start=1):
        if "prompt" not in row:
            raise SpecbenchError(f"{path}: line {n} has no 'prompt' key (keys: {', '.join(row) or 'none'})")
    check_unique_ids(rows, {"type": "jsonl", "path": str(path)}, str(path))
    with_ref = [("reference" in row) for row in rows]
    if any(with_ref) and not all(with_ref):
        raise SpecbenchError(
            f"{path}: line {with_ref.index(False) + 1} has no 'reference' while others do; "
            f"give every line a reference or none"
        )
    return TaskSpec(
        name=path.stem,
        description=f"prompts from {path}",
        source={"type": "jsonl", "path": str(path.resolve())},
        fields={"prompt": "prompt"},
        template="{prompt}",
        chat_template=True,
        reference="reference" if all(with_ref) else None,
        metric=None,
        max_new_tokens=JSONL_MAX_NEW_TOKENS,
        path=str(path),
        variables=("prompt",),
    )


# --------------------------------------------------------------------------- examples


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
    """A Spec-Bench task over several categories samples each one apart (Spec-Bench reports per category):
    the seeded order split by category, categories in file order; None for every other task."""
    if spec.source.get("type") != "spec-bench":
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


def example_id(row: dict, index: int) -> str:
    """An example's id: the row's 'id' field (text or integer), else its index in the source."""
    value = row.get("id")
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else str(index)


def check_unique_ids(rows, source: dict, where: str) -> None:
    """Refuse two rows with one example id (a resume skips ids already measured: the second would never run, and
    the run would stay incomplete forever), naming both rows: their lines in a JSONL file, else their numbers."""
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        ex_id = example_id(row, i)
        if ex_id in seen:
            first, second = _row_places(source, [seen[ex_id], i])
            raise SpecbenchError(
                f"{where}: example id {short(ex_id)} is used twice ({first} and {second}); give every row its own id"
            )
        seen[ex_id] = i


def _row_places(source: dict, indices: list[int]) -> list[str]:
    """'line N' of each row index in a JSONL source (blank lines are not rows), else 'row N' (from 1)."""
    path = Path(source.get("path", "")) if source.get("type") == "jsonl" else None
    if path is not None and path.is_file():
        try:
            with path.open(encoding="utf-8") as fh:
                lines = [n for n, line in enumerate(fh, start=1) if line.strip()]
            return [f"line {lines[i]}" for i in indices]
        except (OSError, UnicodeDecodeError, IndexError):
            pass
    return [f"row {i + 1}" for i in indices]


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


# --------------------------------------------------------------------------- listing


def list_tasks() -> list[dict]:
    """One row per shipped task: name, source, size (None if unknown), offline availability, metric."""
    rows = []
    for name in _task_names():
        spec = load_task(name)
        available, size = data.source_status(spec.source)
        if size is not None and spec.max_examples:
            size = min(size, spec.max_examples)
        rows.append(
            {
                "name": spec.name,
                "source": data.describe_source(spec.source),
                "size": size,
                "available": available,
                "metric": spec.metric,
            }
        )
    return rows

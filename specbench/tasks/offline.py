"""Offline task data: sources this machine can prepare without the Hugging Face hub, as the `offline` kind.

Two ship (see shared/ASSETS.md): Ding's German→English example sentences, from Debian's
`trans-de-en` package (GPL data: fetched at setup into `cache_dir()/data`, never committed), and
ACLSum's abstracts with human aspect summaries, read from the installed `aclsum` package. Each is an
`OfflineDataset` in `OFFLINE_SOURCES`: how it loads, whether it is ready, how to fetch it
(`fetch_offline_data`, behind `specbench data fetch` and `specbench setup`). The `offline` source kind
registers itself in sources.SOURCES like any other kind (the package's __init__ imports this module).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.files import atomic_write_jsonl
from specbench.tasks.sources import Source, count_lines, data_dir, read_jsonl, register

FETCH_COMMAND = (
    "specbench data fetch"  # the CLI command that calls fetch_offline_data (or: python -m specbench.tasks.offline)
)


def write_jsonl_atomic(rows: Iterable[dict], dest: Path) -> int:
    """Write rows to dest atomically (a reader never sees half a file); returns the number of rows."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # e.g. $SPECBENCH_CACHE names a file (issue 41: a traceback)
        raise SpecbenchError(
            f"cannot create {dest.parent}: {exc.strerror}; point $SPECBENCH_CACHE at a writable folder"
        ) from None
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


# --------------------------------------------------------------------------- the offline datasets


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
        return f"ding-de-en: already fetched ({count_lines(ding_path())} sentence pairs in {ding_path()})"
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


@register
class OfflineSource(Source):
    """Data this machine can get without the hub (OFFLINE_SOURCES above, prepared by fetch_offline_data)."""

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


if __name__ == "__main__":
    import sys

    fetch_offline_data(force="--force" in sys.argv[1:])

"""A cell's files copied to a worker's scratch folder, and the worker's new lines copied back.

Workers share no file system with the driver. The driver sends the cell's folder as it is on
disk (torn last lines repaired first); the worker measures
into that copy with the ordinary runner, and after each example sends what changed: the new
whole lines of every JSONL file and the new contents of every JSON file, as text. The driver
appends and replaces them verbatim through files.py, so its folder holds exactly what a local
sweep would have written, and a worker that dies costs only the lines it had not sent yet.
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench.files import append_jsonl_text, atomic_write_text
from specbench.measure.results.record_writing import repair_jsonl

SKIPPED = (".lock",)  # the worker's own lock; hidden temporaries start with '.' too


def folder_files(root: Path, rels: list[str]) -> dict[str, bytes]:
    """rel path → bytes of each regular file under root/rel (a folder: its files; JSONL repaired first)."""
    out: dict[str, bytes] = {}
    for rel in rels:
        base = root / rel
        paths = sorted(p for p in base.iterdir() if p.is_file()) if base.is_dir() else [base] if base.is_file() else []
        for path in paths:
            if path.name.startswith(".") or path.name in SKIPPED:
                continue
            if path.suffix == ".jsonl":
                repair_jsonl(path)
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def seed(scratch: Path, files: dict[str, bytes]) -> None:
    """Write the driver's files into the worker's scratch folder."""
    for rel, data in files.items():
        path = scratch / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class Mirror:
    """Watches the JSON and JSONL files under scratch/<rel> and reports what changed since the last call."""

    def __init__(self, scratch: Path, rels: list[str]):
        self.scratch, self.rels = scratch, rels
        seeded = folder_files(scratch, rels)
        self.offsets: dict[str, int] = {rel: len(data) for rel, data in seeded.items() if rel.endswith(".jsonl")}
        self.json_seen: dict[str, bytes] = {rel: data for rel, data in seeded.items() if rel.endswith(".json")}

    def changes(self) -> dict:
        """{"rows": {rel: new whole JSONL lines}, "json": {rel: new text}} since the previous call, as written.

        Text, not parsed objects: the driver writes it verbatim (re-encoding a summary with indent runs
        json's pure-Python encoder, the driver's largest CPU cost per example, competing with the worker
        for the node's cores) and parses only the lines it must read."""
        rows, docs = {}, {}
        for rel in self._files():
            if rel.endswith(".jsonl"):
                start = self.offsets.get(rel, 0)
                with open(self.scratch / rel, "rb") as f:  # only what was appended since the last call
                    f.seek(start)
                    data = f.read()
                end = data.rfind(b"\n") + 1  # whole lines only: a line being written is sent next time
                if end > 0:
                    rows[rel] = data[:end].decode("utf-8")
                    self.offsets[rel] = start + end
                continue
            data = (self.scratch / rel).read_bytes()
            if rel.endswith(".json") and self.json_seen.get(rel) != data:
                docs[rel] = data.decode("utf-8")
                self.json_seen[rel] = data
        return {"rows": rows, "json": docs}

    def _files(self) -> list[str]:
        found = []
        for rel in self.rels:
            base = self.scratch / rel
            paths = base.iterdir() if base.is_dir() else [base] if base.is_file() else []
            found += [str(p.relative_to(self.scratch)) for p in paths if p.is_file() and not p.name.startswith(".")]
        return sorted(found)


def apply(root: Path, change: dict) -> list[tuple[str, dict]]:
    """Write a worker's changes into the sweep folder → the (rel, row) pairs appended.

    The manifest goes first and the summary last, so the folder never describes records it lacks.
    Lines and documents are written as the worker wrote them (by the same files.py writers, so the
    bytes are what a local cell writes)."""
    manifests = {rel: text for rel, text in change["json"].items() if Path(rel).name == "manifest.json"}
    for rel, text in manifests.items():
        _write_json(root / rel, text)
    appended = []
    for rel, lines in change["rows"].items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        rows = [json.loads(line) for line in lines.splitlines() if line.strip()]
        append_jsonl_text(root / rel, lines)
        appended += [(rel, row) for row in rows]
    for rel, text in change["json"].items():
        if rel not in manifests:
            _write_json(root / rel, text)
    return appended


def _write_json(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)

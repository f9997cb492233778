"""The results schema's words stay with its fields: every field of every schema dataclass declares its meaning as its
metadata (measure/results/field_docs.py), docs/results.md is exactly what results/schema_doc.py generates from it, the
`run` table's rows and units come from it, and Summary/Manifest read a run's files back by attribute without changing
a byte of what was written."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specbench.measure.results import schema_doc
from specbench.measure.results.field_docs import UndocumentedField, doc, field_docs, undocumented
from specbench.measure.results.schema import CellPlacement, EngineRecord, ExampleRecord, LoadBatch, Manifest, Summary

ROOT = Path(__file__).parents[1]
FIXTURE_RUN = ROOT / "tests" / "fixtures" / "results_v0_1" / "task-draft-g3-t0-0caf17bc"
SCHEMAS = [Summary, Manifest, ExampleRecord, EngineRecord, CellPlacement, LoadBatch]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_field_declares_its_meaning(schema):
    """One declaration per field: its meaning (and unit, label) is the field's metadata, in the field's order."""
    assert undocumented(schema) == []
    docs = field_docs(schema)
    assert [d.name for d in docs] == [f.name for f in dataclasses.fields(schema)]
    assert all(d.meaning.strip() for d in docs)
    assert all(set(f.metadata) == {"doc", "unit", "label"} for f in dataclasses.fields(schema))


def test_a_field_without_a_meaning_is_caught():
    """Negative control for the test above: a field declared without doc(...), or with an empty one, is named, and
    docs/results.md is not generated without it."""

    @dataclasses.dataclass
    class Partly:
        said: int = dataclasses.field(default=0, metadata=doc("a field that says what it is"))
        unsaid: int = 0
        blank: int = dataclasses.field(default=0, metadata=doc("  "))

    assert undocumented(Partly) == ["unsaid", "blank"]
    with pytest.raises(UndocumentedField, match="unsaid, blank"):
        field_docs(Partly)
    with pytest.raises(UndocumentedField):
        schema_doc.field_table(Partly)


def test_docs_results_md_is_the_generated_text():
    """Edit a field's doc(...) (results/schema.py, results/record_schema.py) or the prose (results/schema_doc.py),
    then run `python -m specbench.measure.results.schema_doc` to regenerate."""
    assert (ROOT / schema_doc.DOC_PATH).read_text(encoding="utf-8") == schema_doc.results_doc()
    assert schema_doc.PACKAGED_DOC.read_text(encoding="utf-8") == schema_doc.results_doc()  # the wheel's copy


def test_a_changed_meaning_changes_the_doc(monkeypatch):
    """Negative control for the test above: the doc really is made from the fields' metadata, as schema_doc reads it."""
    declared = {f.name: f for f in dataclasses.fields(Summary)}["schema_version"]
    monkeypatch.setattr(declared, "metadata", doc("SOMETHING ELSE", unit="UNIT"))
    assert "| `schema_version` | int | UNIT | SOMETHING ELSE |" in schema_doc.results_doc()


def test_the_run_table_rows_come_from_the_labels():
    rows = schema_doc.run_table_rows(batch=True, verbose=True)
    every = schema_doc.RUN_TABLE + schema_doc.RUN_TABLE_BATCH + schema_doc.RUN_TABLE_VERBOSE
    labelled = {d.name for d in field_docs(Summary) if d.label}
    assert [k for k, _ in rows] == list(every) and set(every) == labelled
    assert all(label for _, label in rows) and len(set(every)) == len(rows)


def test_the_default_run_table_is_compact_and_names_the_peers_metrics():
    """Issue 29: at B = 1 the table answers first in ≤ 12 rows; batch rows only at B > 1; the rest behind --verbose."""
    compact = [k for k, _ in schema_doc.run_table_rows()]
    assert len(compact) <= 12 and not set(compact) & set(schema_doc.RUN_TABLE_BATCH)
    assert {"speedup_geomean", "alpha", "mean_acceptance_length", "baseline_ttft_s", "greedy_identity"} <= set(compact)
    assert len(schema_doc.run_table_rows(batch=True)) == len(compact) + len(schema_doc.RUN_TABLE_BATCH)


def test_summary_from_dict_reads_by_attribute_and_drops_unknown_keys():
    doc = json.loads((FIXTURE_RUN / "summary.json").read_text())
    summary = Summary.from_dict({**doc, "run_dir": "x", "a_newer_field": 1})
    assert summary.speedup == doc["speedup"] and summary.n_examples == 3
    assert summary.speedup_geomean is None  # written before the field existed
    assert {k: v for k, v in dataclasses.asdict(summary).items() if k in doc} == doc


def test_manifest_round_trips_a_written_manifest_byte_for_byte():
    """Manifest.to_dict(from_dict(d)) keeps every key and its order, the optional keys absent as written."""
    doc = json.loads((FIXTURE_RUN / "manifest.json").read_text())
    assert json.dumps(Manifest.from_dict(doc).to_dict()) == json.dumps(doc)
    optional = {"auto": {"requested": {}}, "batch_calibration": {"batch_size": 2}, "prompt_length": {"bucket": "x"}}
    full = {**doc, **optional, "engine": {"engine": "llama-cpp"}}
    order = [f.name for f in dataclasses.fields(Manifest)]
    full = {k: full[k] for k in order}
    assert json.dumps(Manifest.from_dict(full).to_dict()) == json.dumps(full)
    assert Manifest.from_dict(doc).task["n_examples"] == 3 and Manifest.from_dict(doc).auto is None

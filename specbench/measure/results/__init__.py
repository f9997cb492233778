"""Results on disk: the schema (each field declared once), writing a run folder (append-only, atomic), reading
run folders back (records, summaries, sweeps), the tidy tables for pandas and the generated field docs.

The names below load their module on first use (PEP 562), so importing this face for one name costs no
torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench.faces import lazy_attributes

if TYPE_CHECKING:
    from specbench.measure.results.provenance import git_commit
    from specbench.measure.results.record_writing import prepare_run_dir
    from specbench.measure.results.records import load_examples, load_runs
    from specbench.measure.results.schema import SUMMARY_NAMES, Manifest, RunFiles, Summary
    from specbench.measure.results.schema_doc import SUMMARY_UNITS, run_table_rows
    from specbench.measure.results.tidy_table import csv_safe, export_frames, spec_bench_files

FACE = {
    "Manifest": "schema",
    "Summary": "schema",
    "RunFiles": "schema",
    "SUMMARY_NAMES": "schema",
    "load_runs": "records",
    "load_examples": "records",
    "export_frames": "tidy_table",
    "csv_safe": "tidy_table",
    "spec_bench_files": "tidy_table",
    "run_table_rows": "schema_doc",
    "SUMMARY_UNITS": "schema_doc",
    "prepare_run_dir": "record_writing",
    "git_commit": "provenance",
}  # public name → the module of this package that defines it

__all__ = [
    "Manifest",
    "RunFiles",
    "SUMMARY_NAMES",
    "SUMMARY_UNITS",
    "Summary",
    "csv_safe",
    "export_frames",
    "git_commit",
    "load_examples",
    "load_runs",
    "prepare_run_dir",
    "run_table_rows",
    "spec_bench_files",
]

__getattr__ = lazy_attributes(__name__, FACE)

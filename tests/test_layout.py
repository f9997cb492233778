"""Results written before the layout change (tests/fixtures/results_v0_1, commit 6175e53) stay readable:
they load, export, and a `run` resumes the old run folder instead of starting a new one."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import pytest
from helpers import CORPUS, save_tiny
from typer.testing import CliRunner

from specbench.cli import app
from specbench.measure.results.records import load_examples, load_runs, read_examples
from specbench.measure.results.schema import EngineRecord, ExampleRecord, Manifest, Summary
from specbench.measure.results.tidy_table import export_frames

FIXTURE = Path(__file__).parent / "fixtures" / "results_v0_1"
OLD_RUN = "task-draft-g3-t0-0caf17bc"
RUN_ARGS = [
    "run",
    "--target",
    "target",
    "--draft",
    "draft",
    "--task",
    "task.jsonl",
    "--limit",
    "3",
    "--max-new-tokens",
    "12",
    "--device",
    "cpu",
    "--results-dir",
    "res",
    "--gamma",
    "3",
    "--json",
]


def quietly(fn, *args):
    """Call fn with warnings turned into errors: the old files must load without a single skipped line."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args)


def test_old_runs_and_sweep_cells_load():
    runs = quietly(load_runs, [FIXTURE])
    assert sorted(runs["run_id"]) == ["task-draft-g1-t0", "task-draft-g2-t0", OLD_RUN]
    old = runs[runs["run_id"] == OLD_RUN].iloc[0]
    assert (
        old["n_examples"] == 3 and old["complete"] and old["speedup_ci95"] == pytest.approx([0.2992, 0.3695], abs=1e-4)
    )
    assert set(runs.columns) - {"run_dir"} <= {f.name for f in Summary.__dataclass_fields__.values()}


def test_load_examples_on_a_run_and_on_a_sweep_folder():
    run = quietly(load_examples, FIXTURE / OLD_RUN)
    assert list(run["example_id"]) == ["2", "0", "1"] and set(run["run_id"]) == {OLD_RUN}
    assert run["sweep_id"].isna().all() and (run["speculative.n_tokens"] == 12).all()
    sweep = quietly(load_examples, FIXTURE / "old-sweep")
    assert sorted(zip(sweep["run_id"], sweep["example_id"])) == [
        ("task-draft-g1-t0", "0"),
        ("task-draft-g1-t0", "2"),
        ("task-draft-g2-t0", "0"),
        ("task-draft-g2-t0", "2"),
    ]
    assert set(sweep["sweep_id"]) == {"old-sweep"}
    everything = quietly(load_examples, FIXTURE)  # a results folder holding both
    assert len(everything) == 7


def test_export_one_row_per_run_and_per_example():
    runs, notes = export_frames([FIXTURE], examples=False)
    assert notes == [] and len(runs) == 3
    cell = runs.set_index("run_id").loc["task-draft-g2-t0"]
    assert cell["sweep_id"] == "old-sweep" and cell["gamma"] == 2 and cell["device"] == "cpu"
    assert cell["backend"] == "eager" and cell["dtype"] == "float32" and cell["cpu"] == "AMD EPYC"
    assert (
        cell["suspect"]
        and "re-timed" in cell["timing_notes"]
        and cell["baseline_drift"] == pytest.approx(0.6757, abs=1e-4)
    )
    old = runs.set_index("run_id").loc[OLD_RUN]
    assert old["speedup_ci95_low"] < old["speedup"] < old["speedup_ci95_high"]
    assert old["tokens_per_target_call"] == pytest.approx(1.03125) and old["hardware"].startswith("AMD EPYC")
    assert "confidence" not in runs.columns  # axes written by later versions only appear where a run has them
    examples, notes = export_frames([FIXTURE / "old-sweep", FIXTURE / OLD_RUN], examples=True)
    assert notes == [] and len(examples) == 7
    assert set(examples[examples["gamma"] == 3]["run_id"]) == {OLD_RUN}
    assert (examples["speculative_n_tokens"] > 0).all() and examples["speedup"].notna().all()


def test_export_turns_unusable_folders_into_notes(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "r")
    (tmp_path / "r" / OLD_RUN / "summary.json").write_text('{"n_examples": "three"}')
    (tmp_path / "r" / "old-sweep" / "task-draft-g1-t0" / "summary.json").unlink()
    runs, notes = export_frames([tmp_path / "r"], examples=False)
    assert list(runs["run_id"]) == ["task-draft-g2-t0"]
    assert len(notes) == 2 and any("n_examples is str" in n for n in notes)
    assert any("task-draft-g1-t0: skipped, a run folder without summary.json" in n for n in notes)


def old_run_workspace(tmp_path: Path, monkeypatch) -> Path:
    """The fixture's README: models from save_tiny (target seed 0, draft seed 1), task.jsonl from CORPUS[:3],
    the old run folder under res/; returns its examples.jsonl."""
    shutil.copytree(FIXTURE / OLD_RUN, tmp_path / "res" / OLD_RUN)
    monkeypatch.chdir(tmp_path)
    save_tiny("target", 0)
    save_tiny("draft", 1)
    Path("task.jsonl").write_text("\n".join(json.dumps({"prompt": p, "reference": p}) for p in CORPUS[:3]) + "\n")
    return Path("res", OLD_RUN, "examples.jsonl")


def test_a_run_resumes_the_old_run_folder(tmp_path, monkeypatch):
    examples = old_run_workspace(tmp_path, monkeypatch)
    kept = examples.read_text().splitlines(keepends=True)[:-1]
    examples.write_text("".join(kept))
    Path("res", OLD_RUN, "summary.json").unlink()
    result = CliRunner().invoke(app, RUN_ARGS, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [p.name for p in Path("res").iterdir()] == [OLD_RUN]  # resumed, not a new folder
    records = read_examples(examples)
    assert sorted(r["example_id"] for r in records) == ["0", "1", "2"]  # the dropped one measured again, once
    assert examples.read_text().splitlines(keepends=True)[:2] == kept  # the old lines untouched
    summary = json.loads(Path("res", OLD_RUN, "summary.json").read_text())
    assert summary["n_examples"] == 3 and summary["complete"] and summary["run_id"] == OLD_RUN
    assert list(summary) == [f.name for f in Summary.__dataclass_fields__.values()]


def test_a_rerun_skips_a_line_of_the_wrong_shape(tmp_path, monkeypatch):
    """Issue 19: a valid-JSON line of the wrong shape made write_summary raise TypeError on the rerun."""
    examples = old_run_workspace(tmp_path, monkeypatch)
    with examples.open("a") as fh:
        fh.write('{"example_id": 5, "baseline": 3}\n')
    result = CliRunner().invoke(app, RUN_ARGS, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if "skipped a line of the wrong shape" in line]
    assert warned and all(line.startswith("warning: ") and "examples.jsonl:4" in line for line in warned), result.stderr
    summary = json.loads(Path("res", OLD_RUN, "summary.json").read_text())
    assert summary["n_examples"] == 3 and summary["complete"]
    rows, notes = export_frames([Path("res")], examples=True)
    assert len(rows) == 3 and len(notes) == 1 and "examples.jsonl:4: skipped a line of the wrong shape" in notes[0]


@pytest.mark.parametrize("schema", [ExampleRecord, EngineRecord, Summary, Manifest])
def test_every_schema_field_is_documented(schema):
    """The schema lives in code with a meaning per field (its metadata), and docs/results.md (generated) has a row for
    each."""
    doc = (Path(__file__).parents[1] / "docs" / "results.md").read_text()
    for f in dataclasses.fields(schema):
        assert str(f.metadata.get("doc", "")).strip(), f"{schema.__name__}.{f.name} declares no meaning"
        assert f"| `{f.name}` |" in doc, f"docs/results.md does not document {schema.__name__}.{f.name}"


def test_export_and_load_runs_carry_the_peers_columns_and_the_device_that_ran(tmp_path):
    """Issue 29 item 8: the run table has acceptance, tokens/s, TTFT and TPOT columns; `device` is what the target
    ran on (the manifest's models.target.device), not the requested "auto"; specbench.load_runs is the same table."""
    import specbench

    run = tmp_path / OLD_RUN
    shutil.copytree(FIXTURE / OLD_RUN, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["device"] = "auto"
    manifest["models"]["target"]["device"] = "cuda:0"
    (run / "manifest.json").write_text(json.dumps(manifest))
    frame = quietly(specbench.load_runs, run)
    row = frame.iloc[0]
    assert row["device"] == "cuda:0"
    for column in ("acceptance_rate", "mean_acceptance_length", "baseline_tokens_per_s", "speculative_ttft_s"):
        assert column in frame.columns
    summary = json.loads((run / "summary.json").read_text())
    assert row["mean_acceptance_length"] == pytest.approx(1 + summary["mean_accepted_length"])  # older summary
    assert row["speculative_tokens_per_s"] == pytest.approx(summary["speculative_tokens_per_s"])
    del manifest["models"]  # a manifest without the loaded device: the requested one stays
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert quietly(specbench.load_runs, [run]).iloc[0]["device"] == "auto"

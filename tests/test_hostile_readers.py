"""Issue 41: result folders damaged, hand-edited or laced with links read the same through every output.

The report (report/collect.py), the export (tidy_table.export_frames) and pandas users (records.load_runs) read run
folders through one reader (measure/results/reader.py). Each case below plants one defect the hostile probe found and
checks all three: nothing wrong that looks right (a deleted record file read as a complete run, a hand-edited
speedup believed), nothing outside the results folder read, and the reason listed in every output.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from helpers import N_EXAMPLES, make_run
from typer.testing import CliRunner

from specbench.cli import app
from specbench.measure.results.records import load_runs
from specbench.measure.results.tidy_table import export_frames
from specbench.report.collect import collect

SPEEDUP = 1.5  # make_run's speedup: every example's, so the geometric mean too


def outputs(root: Path, examples: bool = False) -> dict:
    """{output: (run ids, the text of everything it listed as skipped or recomputed)} for report, export, load_runs."""
    data = collect([root])
    frame, notes = export_frames([root], examples=examples)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = load_runs([root])
    ids = lambda f: list(f["run_id"]) if "run_id" in f else []  # noqa: E731
    return {
        "report": (ids(data.runs), "\n".join([f"{s.path}: {s.reason}" for s in data.skipped] + data.notes)),
        "export": (ids(frame), "\n".join(notes)),
        "load_runs": (ids(df), "\n".join(str(w.message) for w in caught)),
    }, (data, frame, df)


def edit_json(path: Path, **changes) -> None:
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def deep_json(levels: int = 100_000) -> str:
    return "[" * levels + "]" * levels


# --------------------------------------------------------------------------- links (defect 4; minor: doubled rows)


def test_a_summary_linked_out_of_the_results_folder_is_read_by_no_output(tmp_path):
    outside = make_run(tmp_path / "elsewhere", "outside", speedup=9.0)
    secret = tmp_path / "passwd"
    secret.write_text('{"n_examples": 5, "run_id": "secret", "speedup": 9.9}')
    root = tmp_path / "results"
    for run_id, target in (("to-file", secret), ("to-run", outside / "summary.json")):
        run = make_run(root, run_id)
        (run / "summary.json").unlink()
        (run / "summary.json").symlink_to(target)
    make_run(root, "good")
    seen, _ = outputs(root)
    for name, (ids, listed) in seen.items():
        assert ids == ["good"], (name, ids)
        for run_id in ("to-file", "to-run"):
            assert f"{run_id}/summary.json: a symbolic link" in listed, (name, listed)


def test_a_linked_manifest_or_run_folder_is_not_followed(tmp_path):
    root = tmp_path / "results"
    elsewhere = make_run(tmp_path / "elsewhere", "foreign")
    run = make_run(root, "linked-manifest")
    (run / "manifest.json").unlink()
    (run / "manifest.json").symlink_to(elsewhere / "manifest.json")
    make_run(root, "good")
    (root / "good-again").symlink_to(root / "good", target_is_directory=True)
    seen, _ = outputs(root)
    for name, (ids, listed) in seen.items():
        assert ids == ["good"], (name, ids)  # not linked-manifest, not foreign, not good twice
        assert "linked-manifest/manifest.json: a symbolic link" in listed and "good-again: a symbolic link" in listed
    frame, _ = export_frames([root / "good", root / "good-again"], examples=False)
    assert list(frame["run_id"]) == ["good"]  # a run and a link to it, both named: one row


# --------------------------------------------------------------------------- deep JSON (defect 5)


@pytest.mark.parametrize("name", ["summary.json", "manifest.json", "sweep.json"])
def test_a_100000_deep_json_is_one_listed_skip_in_every_output(tmp_path, name):
    root = tmp_path / "results"
    run = make_run(root, "deep")
    (run / name).write_text(deep_json())
    make_run(root, "good")
    seen, _ = outputs(root)
    for output, (ids, listed) in seen.items():
        assert "deep" not in ids or name == "sweep.json", (output, ids)
        assert f"deep/{name}: {name} is not valid JSON (nested more than" in listed, (output, listed)
    result = CliRunner().invoke(app, ["report", str(root), "--out", str(tmp_path / "rep"), "--json"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


def test_json_nested_below_the_recursion_limit_but_too_deep_is_refused_too(tmp_path):
    root = tmp_path / "results"
    run = make_run(root, "deep")
    edit_json(run / "summary.json", quality={"x": json.loads(deep_json(500))})
    for output, (ids, listed) in outputs(root)[0].items():
        assert ids == [] and "nested more than 64 levels" in listed, output


# --------------------------------------------------------------------------- records gone (defect 3)


@pytest.mark.parametrize("damage", ["empty", "deleted", "folder"])
def test_a_run_whose_records_are_gone_is_no_output_s_complete_run(tmp_path, damage):
    root = tmp_path / "results"
    run = make_run(root, "gone")
    records = run / "examples.jsonl"
    records.unlink()
    if damage == "empty":
        records.write_text("")
    elif damage == "folder":
        records.mkdir()
    make_run(root, "good")
    for output, (ids, listed) in outputs(root)[0].items():
        assert ids == ["good"], (output, ids)
        assert "gone" in listed, (output, listed)


def test_a_truncated_record_file_gives_the_figures_of_what_remains(tmp_path):
    root = tmp_path / "results"
    run = make_run(root, "cut")
    lines = (run / "examples.jsonl").read_text().splitlines(keepends=True)
    (run / "examples.jsonl").write_text(lines[0])
    seen, (data, frame, df) = outputs(root)
    for output, (ids, listed) in seen.items():
        assert ids == ["cut"] and "summary.json counts 3 examples but examples.jsonl holds 1" in listed, output
    for table in (data.runs, frame, df):
        (row,) = table.to_dict("records")
        assert row["n_examples"] == 1 and not row["complete"]


# ---------------------------------------------------------------- duplicates, foreign ids, zero times (6, 10)


def test_a_duplicated_record_is_counted_once_and_named(tmp_path):
    root = tmp_path / "results"
    run = make_run(root, "dup")
    lines = (run / "examples.jsonl").read_text().splitlines(keepends=True)
    (run / "examples.jsonl").write_text("".join([*lines, lines[0]]))
    seen, (data, frame, df) = outputs(root, examples=True)
    for output, (_, listed) in seen.items():
        assert "skipped a second record of example 'ex0'" in listed, (output, listed)
    assert len(data.examples[str(run.resolve())]) == N_EXAMPLES and len(frame) == N_EXAMPLES
    assert list(data.runs["n_examples"]) == list(df["n_examples"]) == [N_EXAMPLES]


def test_a_record_of_an_example_the_manifest_does_not_list_is_dropped(tmp_path):
    root = tmp_path / "results"
    run = make_run(root, "foreign", manifest_extra={})
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["task"]["example_ids"] = ["ex0", "ex1", "ex2"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    lines = (run / "examples.jsonl").read_text().splitlines(keepends=True)
    (run / "examples.jsonl").write_text("".join(lines[:2]) + lines[2].replace('"ex2"', '"zz"'))
    seen, (data, frame, df) = outputs(root, examples=True)
    for output, (_, listed) in seen.items():
        assert "example 'zz', which its manifest does not list" in listed, (output, listed)
    assert list(frame["example_id"]) == ["ex0", "ex1"] and list(df["n_examples"]) == [2]


def test_more_records_than_the_manifest_plans_leave_the_run_out(tmp_path):
    root = tmp_path / "results"
    run = make_run(root, "extra")
    lines = (run / "examples.jsonl").read_text().splitlines(keepends=True)
    (run / "examples.jsonl").write_text("".join(lines) + lines[0].replace('"ex0"', '"ex9"'))
    for output, (ids, listed) in outputs(root)[0].items():
        assert ids == [] and "holds 4 records but its manifest plans 3" in listed, output


def test_a_record_measured_in_no_time_is_refused(tmp_path):
    root = tmp_path / "results"
    run = make_run(root, "zero")
    rows = [json.loads(line) for line in (run / "examples.jsonl").read_text().splitlines()]
    rows[0]["speculative"].update(prefill_s=0.0, decode_s=0.0, draft_s=0.0, verify_s=0.0)
    (run / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen, (data, frame, df) = outputs(root, examples=True)
    for output, (_, listed) in seen.items():
        assert "examples.jsonl:1: skipped" in listed and "tokens in 0 seconds" in listed, (output, listed)
    assert list(frame["example_id"]) == ["ex1", "ex2"]


# --------------------------------------------------------------------------- hand-edited summaries (defect 9)


def test_a_hand_edited_speedup_reads_the_same_everywhere(tmp_path):
    root = tmp_path / "results"
    run = make_run(root, "edited")
    edit_json(run / "summary.json", speedup_geomean=42)
    seen, (data, frame, df) = outputs(root)
    for output, (ids, listed) in seen.items():
        assert ids == ["edited"] and "summary.json says speedup_geomean 42 but its records give 1.5" in listed, output
    for table in (data.runs, frame, df):
        assert table["speedup_geomean"].iloc[0] == pytest.approx(SPEEDUP)


def test_a_gamma_that_is_neither_a_number_nor_a_policy_is_refused_by_every_output(tmp_path):
    root = tmp_path / "results"
    edit_json(make_run(root, "odd-gamma") / "summary.json", gamma="xyz")
    for output, (ids, listed) in outputs(root)[0].items():
        assert ids == [] and "gamma is 'xyz', neither a number nor a γ policy" in listed, output


# --------------------------------------------------------------------------- the run's own timing verdict (defect 1)


def test_the_report_keeps_the_run_s_own_timing_verdict(tmp_path):
    root = tmp_path / "results"
    run = make_run(root, "stolen")
    stolen = "the hypervisor stole 64 % of the CPU during the run"
    edit_json(run / "summary.json", suspect_timing=True, timing_notes=[stolen])
    make_run(root, "quiet")
    data = collect([root])
    rows = {r["run_id"]: r for r in data.runs.to_dict("records")}
    assert rows["stolen"]["timing_suspect"] and stolen in rows["stolen"]["timing_warnings"]
    assert not rows["quiet"]["timing_suspect"]
    from specbench.report import write_report

    md = (write_report([root], tmp_path / "rep").out / "report.md").read_text()
    assert "Timing warnings" in md and "64 % of the CPU" in md  # rendered, not only carried


# --------------------------------------------------------------------------- where nothing is (minor)


def test_load_runs_says_why_a_missing_path_or_a_file_gives_no_rows(tmp_path):
    (tmp_path / "note.txt").write_text("x")
    for path, words in ((tmp_path / "nope", "does not exist"), (tmp_path / "note.txt", "not a run folder")):
        with pytest.warns(UserWarning, match=words):
            assert load_runs([path]).empty


def test_an_export_with_nothing_usable_is_one_line_with_its_reasons(tmp_path):
    root = tmp_path / "results"
    edit_json(make_run(root, "odd-gamma") / "summary.json", gamma="xyz")
    result = CliRunner().invoke(app, ["export", str(root)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith("error: no results to export") and "gamma is 'xyz'" in lines[0]


def test_export_to_a_missing_folder_names_out_and_a_read_only_disk_is_not_told_to_free_space(tmp_path):
    import errno

    from specbench.files import disk_error

    make_run(tmp_path / "results", "good")
    result = CliRunner().invoke(
        app, ["export", str(tmp_path / "results"), "--out", str(tmp_path / "missing" / "x.csv")]
    )
    assert result.exit_code == 2 and "--out" in result.output and "does not exist" in result.output, result.output
    assert "--results-dir" not in result.output
    read_only = str(disk_error(OSError(errno.EROFS, "Read-only file system"), tmp_path / "x.csv"))
    assert "read-only file system" in read_only and "free space" not in read_only

"""Sweeps: grid parsing, cell and sweep ids, shared baselines, and resuming a killed sweep (tiny random models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import MAX_NEW, FakeSession, make_grid, write_prompts
from typer.testing import CliRunner

import specbench.measure.engines as engines
import specbench.measure.runner as runner
from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.measure.records import read_records
from specbench.measure.sweep import parse_float_list, parse_int_list, parse_str_list
from specbench.measure.sweep_run import BaselineStore, cell_ids, run_sweep, sweep_id_for


@pytest.fixture
def task_file(tmp_path) -> str:
    return write_prompts(tmp_path)


@pytest.fixture
def baseline_calls(monkeypatch) -> list:
    """Count measured baseline decodes (warm-up ones and the per-cell drift probe excluded)."""
    calls, probing = [], []
    real, real_probe = engines.decode_autoregressive, runner.probe_shared_baseline

    def counting(*args, **kwargs):
        if kwargs["max_new_tokens"] == MAX_NEW and not probing:
            calls.append(1)
        return real(*args, **kwargs)

    def probe(*args, **kwargs):
        probing.append(1)
        try:
            return real_probe(*args, **kwargs)
        finally:
            probing.pop()

    monkeypatch.setattr(engines, "decode_autoregressive", counting)
    monkeypatch.setattr(runner, "probe_shared_baseline", probe)
    return calls


def cell_records(root: Path, cell_id: str) -> list[dict]:
    return read_records(root / cell_id / "examples.jsonl")


# --------------------------------------------------------------------------- grid specs


def test_int_lists_and_ranges():
    assert parse_int_list("1,2,3,5,7") == [1, 2, 3, 5, 7]
    assert parse_int_list("1-8") == list(range(1, 9))
    assert parse_int_list(" 5, 1-3 ,3") == [1, 2, 3, 5]
    assert parse_float_list("1,0,0.5") == [0.0, 0.5, 1.0]
    assert parse_str_list("b,a,b", "--draft") == ["a", "b"]


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("0", ">= 1"),
        ("3-1", "empty"),
        ("x", "not an integer"),
        ("", "empty"),
        ("1,,2", "empty"),
        ("-1", ">= 1"),
        ("1.5", "not an integer"),
        ("1-x", "not an integer"),
    ],
)
def test_bad_gamma_specs_are_one_line_errors(spec, needle):
    with pytest.raises(SpecbenchError, match=needle) as err:
        parse_int_list(spec, "--gamma")
    assert "\n" not in str(err.value) and "--gamma" in str(err.value)


@pytest.mark.parametrize("spec", ["x", "-1", "nan", "0-1", "inf"])
def test_bad_temperature_specs(spec):
    with pytest.raises(SpecbenchError, match="--temperature"):
        parse_float_list(spec)


def test_grid_validates_every_cell(task_file):
    with pytest.raises(SpecbenchError, match="--top-p"):
        make_grid(task_file, top_p=0.0)
    with pytest.raises(SpecbenchError, match="--limit"):
        make_grid(task_file, limit=0)
    with pytest.raises(SpecbenchError, match="cells"):
        make_grid(task_file, gamma="1-6000")  # × 2 drafts: 12 000 cells
    with pytest.raises(SpecbenchError, match="range '1-20000' holds 20000 values"):
        make_grid(task_file, gamma="1-20000")  # refused before it is expanded


def test_sweep_id_is_deterministic_and_order_free(task_file):
    a = make_grid(task_file, draft="tiny-draft,prompt-lookup", gamma="3,1", temperature="1,0")
    b = make_grid(task_file, draft="prompt-lookup,tiny-draft", gamma="1,3", temperature="0,1")
    assert sweep_id_for(a) == sweep_id_for(b)
    assert sweep_id_for(a) != sweep_id_for(make_grid(task_file, gamma="1,2"))
    assert sweep_id_for(a) != sweep_id_for(make_grid(task_file, gamma="1,3", temperature="0,1", seed=1))


def test_cell_ids_readable_unique_and_grouped(task_file):
    grid = make_grid(task_file, temperature="0,1")
    cells = cell_ids(grid)
    ids = [cid for cid, _ in cells]
    assert len(ids) == 8 == len(set(ids))
    assert "prompts-tiny-draft-g3-t1" in ids and "prompts-prompt-lookup-g1-t0" in ids
    temps = [cfg.sampling.temperature for _, cfg in cells]
    assert temps == sorted(temps)  # cells sharing a baseline run back to back
    clash = cell_ids(make_grid(task_file, draft="org1/draft,org2/draft", gamma="2"))
    assert len({cid for cid, _ in clash}) == 2


# --------------------------------------------------------------------------- running


def test_sweep_shares_one_baseline_per_task_and_temperature(tmp_path, task_file, baseline_calls):
    grid = make_grid(task_file)
    out = run_sweep(grid, tmp_path, session=FakeSession())
    root = out.root
    assert root == tmp_path / sweep_id_for(grid)
    assert len(out.cells) == 4 and out.new_examples == 12
    assert len(baseline_calls) == 3  # 3 examples, once each, not once per cell
    doc = json.loads((root / "sweep.json").read_text())
    assert doc["grid"] == grid.to_dict() and len(doc["cells"]) == 4 and len(doc["complete_cells"]) == 4
    store = read_records(root / doc["baselines"][0])
    assert len(store) == 3
    by_id = {r["example_id"]: r["baseline"] for r in store}
    for cid, _ in cell_ids(grid):
        recs = cell_records(root, cid)
        assert sorted(r["example_id"] for r in recs) == sorted(by_id)
        for r in recs:
            assert r["baseline"] == by_id[r["example_id"]]  # the same measurement, timings included
    for r in cell_records(root, "prompts-tiny-draft-g3-t0"):
        assert r["identical"]  # greedy: speculative output equals the shared baseline


def test_each_later_cell_re_times_one_shared_baseline(tmp_path, task_file):
    """The drift probe: every cell after the one that timed the baselines decodes one stored example
    again and records fresh ÷ stored seconds; the summary carries the worst ratio."""
    out = run_sweep(make_grid(task_file), tmp_path, session=FakeSession())
    first, *later = [c.cell_id for c in out.cells]
    assert not (out.root / first / "baseline_probes.jsonl").exists()
    assert json.loads((out.root / first / "summary.json").read_text())["baseline_drift"] is None
    for cid in later:
        probes = read_records(out.root / cid / "baseline_probes.jsonl")
        assert len(probes) == 1 and probes[0]["same_tokens"] and probes[0]["ratio"] > 0
        summary = json.loads((out.root / cid / "summary.json").read_text())
        assert summary["baseline_drift"] == pytest.approx(probes[0]["ratio"])


def test_a_sweep_resumes_on_baselines_stored_before_proposal_lengths_existed(tmp_path, task_file):
    grid = make_grid(task_file)
    out = run_sweep(grid, tmp_path, session=FakeSession())
    store = out.root / json.loads((out.root / "sweep.json").read_text())["baselines"][0]
    rows = read_records(store)
    for row in rows:  # as an older specbench wrote them
        del row["baseline"]["proposal_lengths"]
    store.write_text("".join(json.dumps(r) + "\n" for r in rows))
    last = out.cells[-1].cell_id
    for name in ("examples.jsonl", "summary.json"):
        (out.root / last / name).unlink()
    again = run_sweep(grid, tmp_path, session=FakeSession())
    assert again.new_examples == 3 and again.cells[-1].summary["complete"]


def test_baseline_drift_beyond_tolerance_is_flagged():
    from specbench.report import timing_note

    row = {"run_id": "r", "gamma": 3, "verify_cost": 1.3}
    assert timing_note({**row, "baseline_drift": 1.05}) is None
    assert timing_note({**row, "baseline_drift": None}) is None
    for drift in (1.25, 0.8):
        assert f"{drift:.2f}× the stored time" in timing_note({**row, "baseline_drift": drift})


@pytest.mark.parametrize("kill_after", [2, 5])
def test_killed_sweep_resumes_without_loss_or_duplicates(tmp_path, task_file, baseline_calls, kill_after):
    grid = make_grid(task_file)
    seen = []

    def die(cell_id, record):
        seen.append((cell_id, record["example_id"]))
        if len(seen) == kill_after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(grid, tmp_path, session=FakeSession(), on_example=die)
    root = tmp_path / sweep_id_for(grid)
    killed_cell = seen[-1][0]
    with (root / killed_cell / "examples.jsonl").open("a") as fh:
        fh.write('{"schema_version": 1, "example_id": "ex')  # a kill in the middle of a write
    assert len(baseline_calls) == min(kill_after, 3)
    baseline_calls.clear()

    out = run_sweep(grid, tmp_path, session=FakeSession())
    assert out.new_examples == 12 - kill_after
    assert len(baseline_calls) == 3 - min(kill_after, 3)  # baselines persisted before the kill are reused
    for cid, _ in cell_ids(grid):
        ids = [r["example_id"] for r in cell_records(root, cid)]
        assert len(ids) == 3 == len(set(ids))
        summary = json.loads((root / cid / "summary.json").read_text())
        assert summary["complete"] and summary["n_examples"] == 3


def test_no_state_carries_over_between_cells(tmp_path, task_file):
    """A cell's sampled outputs are the same whether other cells ran before it in the same session or not."""
    shared = run_sweep(
        make_grid(task_file, draft="tiny-draft", gamma="1,3", temperature="1"), tmp_path / "a", session=FakeSession()
    )
    alone = run_sweep(
        make_grid(task_file, draft="tiny-draft", gamma="3", temperature="1"), tmp_path / "b", session=FakeSession()
    )
    cell = "prompts-tiny-draft-g3-t1"
    after_other = {r["example_id"]: r["speculative"]["token_ids"] for r in cell_records(shared.root, cell)}
    fresh = {r["example_id"]: r["speculative"]["token_ids"] for r in cell_records(alone.root, cell)}
    assert after_other == fresh and len(fresh) == 3
    assert any(not r["identical"] for r in cell_records(alone.root, cell))  # T = 1 really sampled


def test_finished_sweep_reruns_without_loading_models(tmp_path, task_file, monkeypatch):
    grid = make_grid(task_file, draft="prompt-lookup")
    run_sweep(grid, tmp_path, session=FakeSession())

    def no_models(*args, **kwargs):
        raise AssertionError("a finished sweep must not load models")

    monkeypatch.setattr(engines, "Session", no_models)
    plan, cells = [], []
    out = run_sweep(
        grid,
        tmp_path,
        on_plan=lambda total, n: plan.append((total, n)),
        on_cell=lambda cid, total, done: cells.append((total, done)),
    )
    assert out.new_examples == 0 and plan == [(6, 2)] and cells == [(3, 3), (3, 3)]


def test_same_sweep_id_with_another_grid_is_refused(tmp_path, task_file):
    run_sweep(make_grid(task_file, draft="prompt-lookup", gamma="1"), tmp_path, sweep_id="mine", session=FakeSession())
    with pytest.raises(SpecbenchError, match="different grid"):
        run_sweep(
            make_grid(task_file, draft="prompt-lookup", gamma="2"), tmp_path, sweep_id="mine", session=FakeSession()
        )
    with pytest.raises(SpecbenchError, match="folder name"):
        run_sweep(make_grid(task_file, draft="prompt-lookup", gamma="2"), tmp_path, sweep_id="../x")


def stored_baseline(n: int) -> dict:
    """A whole baseline EngineRecord of n tokens (the store skips lines that are not one)."""
    return {
        "text": "",
        "token_ids": [5] * n,
        "n_tokens": n,
        "stop_reason": "length",
        "prefill_s": 0.1,
        "decode_s": 0.2,
        "target_calls": n,
        "draft_calls": 0,
        "drafted": 0,
        "accepted": 0,
        "trials": 0,
        "accept_lengths": [],
        "draft_lengths": [],
        "expected_accept": [],
        "draft_s": 0.0,
        "verify_s": 0.2,
    }


def test_baseline_store_persists_first_write_wins(tmp_path):
    path = tmp_path / "baselines" / "t.jsonl"
    store = BaselineStore(path)
    store["a"] = stored_baseline(1)
    store["a"] = stored_baseline(99)  # ignored: cells already compared against the first
    store["b"] = stored_baseline(2)
    with path.open("a") as fh:
        fh.write('{"example_id": "d", "baseline": {"n_tokens": 4}}\n')  # not a whole record: skipped
        fh.write('{"example_id": "c", "base')  # torn last line
    with pytest.warns(UserWarning, match="t.jsonl:3: skipped a line of the wrong shape"):
        again = BaselineStore(path)
    assert dict(again) == {"a": stored_baseline(1), "b": stored_baseline(2)}
    again["c"] = stored_baseline(3)
    assert len(read_records(path)) == 4


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("gamma", ["0", "3-1", "x"])
def test_cli_bad_grid_is_one_line(gamma, tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--gamma", gamma, "--results-dir", str(tmp_path)])
    assert result.exit_code == 2  # a bad command line
    text = result.output.strip()
    assert text.startswith("error:") and "--gamma" in text and "Traceback" not in text


def test_cli_sweep_runs_and_resumes(tmp_path, task_file, monkeypatch):
    monkeypatch.setattr(engines, "Session", FakeSession)
    args = [
        "sweep",
        "--target",
        "tiny-target",
        "--draft",
        "prompt-lookup,tiny-draft",
        "--gamma",
        "1-2",
        "--temperature",
        "0",
        "--task",
        task_file,
        "--limit",
        "2",
        "--max-new-tokens",
        str(MAX_NEW),
        "--device",
        "cpu",
        "--results-dir",
        str(tmp_path),
        "--json",
    ]
    FakeSession.instances = 0
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert FakeSession.instances == 1  # one session for all four cells
    cells = json.loads(first.stdout)
    assert len(cells) == 4 and all(c["summary"]["complete"] for c in cells)
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0 and FakeSession.instances == 1  # nothing left to do: no models loaded


# --------------------------------------------------------------------------- resume checks the records, not the summary


@pytest.mark.parametrize("damage", ["torn", "lost", "deleted"])
def test_a_finished_cell_with_damaged_records_is_repaired(tmp_path, task_file, damage):
    """A complete cell whose examples.jsonl lost its last record after the summary was written
    (a torn line, a line cut off whole, the file gone) goes back to the runner: the file is
    repaired and only the missing examples are measured again."""
    grid = make_grid(task_file, draft="prompt-lookup", gamma="1,3")
    first = run_sweep(grid, tmp_path, session=FakeSession())
    damaged, intact = first.cells[0].cell_id, first.cells[1].cell_id
    path = first.root / damaged / "examples.jsonl"
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    if damage == "torn":
        path.write_bytes(data[:-25])  # the last record cut mid-line, no newline at the end
    elif damage == "lost":
        path.write_bytes(data[:last_start])
    else:
        path.unlink()
    assert (
        json.loads((first.root / damaged / "summary.json").read_text())["n_examples"] == 3
    )  # the summary still says done

    again = run_sweep(grid, tmp_path, session=FakeSession())
    by_id = {c.cell_id: c for c in again.cells}
    assert by_id[damaged].new_examples == (3 if damage == "deleted" else 1)
    assert by_id[intact].new_examples == 0
    text = path.read_text()
    assert text.endswith("\n")
    ids = [json.loads(line)["example_id"] for line in text.splitlines()]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 3
    assert by_id[damaged].summary["complete"] and by_id[damaged].summary["n_examples"] == 3


def test_an_intact_finished_cell_is_not_rerun(tmp_path, task_file, monkeypatch):
    grid = make_grid(task_file, draft="prompt-lookup", gamma="1")
    run_sweep(grid, tmp_path, session=FakeSession())
    monkeypatch.setattr(
        "specbench.measure.runner.execute_run", lambda *a, **k: pytest.fail("a finished cell ran again")
    )
    assert run_sweep(grid, tmp_path, session=FakeSession()).new_examples == 0


# ------------------------------------------------------------------ ids, folders and γ before anything is written


@pytest.mark.parametrize("sweep_id", ["../escaped", "/abs/path", "a/b", "", ".", "..", ".hidden", "a\\b", "x" * 256])
def test_bad_sweep_ids_write_nothing(tmp_path, task_file, sweep_id):
    results = tmp_path / "res"
    with pytest.raises(SpecbenchError, match="--sweep-id .* folder name") as err:
        run_sweep(
            make_grid(task_file, draft="prompt-lookup", gamma="1"), results, sweep_id=sweep_id, session=FakeSession()
        )
    assert "\n" not in str(err.value)
    assert not results.exists() and not Path("/abs/path").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.jsonl"]


def test_empty_results_dir_is_refused(tmp_path, task_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecbenchError, match="--results-dir"):
        run_sweep(make_grid(task_file, draft="prompt-lookup", gamma="1"), "", session=FakeSession())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.jsonl"]


def test_gamma_beyond_the_token_budget_is_refused_before_any_write(tmp_path, task_file):
    grid = make_grid(task_file, draft="prompt-lookup", gamma=f"1,{MAX_NEW + 1}")
    with pytest.raises(SpecbenchError, match=f"--gamma {MAX_NEW + 1} is more than the {MAX_NEW} new tokens"):
        run_sweep(grid, tmp_path / "res", session=FakeSession())
    assert not (tmp_path / "res").exists()
    # γ up to the budget is accepted (the last step drafts what is left)
    assert (
        run_sweep(
            make_grid(task_file, draft="prompt-lookup", gamma=str(MAX_NEW)), tmp_path / "ok", session=FakeSession()
        )
        .cells[0]
        .summary["complete"]
    )


@pytest.mark.parametrize("spec", ["inf", "nan", "-inf", "1,inf"])
def test_non_finite_temperatures_share_the_run_validator(spec):
    from specbench.config import check_temperature

    with pytest.raises(SpecbenchError) as from_sweep:
        parse_float_list(spec)
    with pytest.raises(SpecbenchError) as from_run:
        check_temperature(float(spec.split(",")[-1]))
    assert str(from_sweep.value).split(" (got")[0] == str(from_run.value).split(" (got")[0]

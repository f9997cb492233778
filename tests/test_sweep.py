"""Sweeps: grid parsing, cell and sweep ids, shared baselines, and resuming a killed sweep (tiny random models)."""

from __future__ import annotations

import io
import json
import statistics
from pathlib import Path

import pytest
from helpers import MAX_NEW, FakeSession, make_grid, write_prompts
from typer.testing import CliRunner

import specbench.engines.torch.engine as loop_engine
import specbench.engines.torch.session as torch_session
import specbench.measure.run.arms as engines
from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.measure.results.records import read_records
from specbench.measure.run.sweep import parse_float_list, parse_int_list, parse_str_list
from specbench.measure.run.sweep_run import cell_ids, run_sweep, sweep_id_for


@pytest.fixture
def task_file(tmp_path) -> str:
    return write_prompts(tmp_path)


@pytest.fixture
def baseline_calls(monkeypatch) -> list:
    """Count measured baseline decodes (warm-up ones excluded)."""
    calls = []
    real = loop_engine.decode_autoregressive

    def counting(*args, **kwargs):
        if kwargs["max_new_tokens"] == MAX_NEW:
            calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop_engine, "decode_autoregressive", counting)
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


def temperatures(n: int) -> str:
    """n distinct temperatures, a cheap way to a large grid (nothing in these tests decodes at them)."""
    return ",".join(f"{i / 10000:g}" for i in range(n))


def test_max_cells_refuses_a_larger_grid_and_admits_its_own_size(task_file):
    big = temperatures(51)  # 51 temperatures × 2 drafts × 2 γ = 204 cells
    with pytest.raises(SpecbenchError, match=r"204 cells \(more than 200\).*pass --max-cells 204") as err:
        make_grid(task_file, temperature=big, max_cells=200)
    assert "\n" not in str(err.value)
    assert len(make_grid(task_file, temperature=big, max_cells=204).configs()) == 204


def test_cli_refuses_more_than_10000_cells_as_a_usage_error(tmp_path, task_file, monkeypatch):
    monkeypatch.setattr(torch_session, "TorchSession", lambda *a, **k: pytest.fail("a refused grid loaded a model"))
    args = ["sweep", "--target", "tiny-target", "--draft", "prompt-lookup", "--gamma", "1,2", "--task", task_file]
    args += ["--temperature", temperatures(5001), "--results-dir", str(tmp_path / "res")]  # 10 002 cells
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output  # a bad command line
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error:") and "10002 cells (more than 10000)" in line and "--max-cells 10002" in line
    assert not (tmp_path / "res").exists()  # refused before anything was written


def test_a_large_sweep_prints_its_size_and_a_rough_time_before_loading_models(tmp_path, task_file, monkeypatch):
    def no_models(*args, **kwargs):
        raise SpecbenchError("stopped where the models would load")

    monkeypatch.setattr(torch_session, "TorchSession", no_models)
    args = ["sweep", "--target", "tiny-target", "--draft", "prompt-lookup,tiny-draft", "--gamma", "1,2"]
    args += ["--task", task_file, "--limit", "3", "--max-new-tokens", str(MAX_NEW), "--device", "cpu"]
    large = CliRunner().invoke(app, [*args, "--temperature", temperatures(51), "--results-dir", str(tmp_path / "a")])
    assert large.exit_code == 1 and "stopped where the models would load" in large.output
    (line,) = [x for x in large.output.splitlines() if "estimate" in x]
    # 204 cells × 3 examples; each example decodes MAX_NEW tokens per engine: 2 × 612 × 5 × 50 ms = 306 s
    assert line.startswith("204 cells, 612 examples, 1224 timed decodes") and "rough estimate" in line
    assert line.endswith("about 5 min")
    small = CliRunner().invoke(app, [*args, "--temperature", temperatures(50), "--results-dir", str(tmp_path / "b")])
    assert small.exit_code == 1 and "estimate" not in small.output  # 200 cells: no line
    with pytest.raises(SpecbenchError, match="more than 204"):
        run_sweep(make_grid(task_file, temperature=temperatures(52), max_cells=208), tmp_path / "c", max_cells=204)


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


def test_every_cell_times_its_own_baseline(tmp_path, task_file, baseline_calls):
    grid = make_grid(task_file)
    out = run_sweep(grid, tmp_path, session=FakeSession())
    root = out.root
    assert root == tmp_path / sweep_id_for(grid)
    assert len(out.cells) == 4 and out.new_examples == 12
    assert len(baseline_calls) == 12  # 3 examples in each of 4 cells (a shared baseline timed 3): the sweep's cost
    doc = json.loads((root / "sweep.json").read_text())
    assert doc["grid"] == grid.to_dict() and len(doc["cells"]) == 4 and len(doc["complete_cells"]) == 4
    from specbench.report.environment import sweep_line

    assert "each cell timed its own baseline" in sweep_line(doc) and "shared" not in sweep_line(doc)
    for r in cell_records(root, "prompts-tiny-draft-g3-t0"):
        assert r["identical"]  # greedy: speculative output equals the cell's own baseline


def test_each_cell_times_its_own_baseline_a_b_b_a(tmp_path, task_file, monkeypatch):
    """Per-cell baselines (issue 26 item 7): every cell decodes both engines on its own examples in the run's
    A B B A order, and each record's timings are the medians of that cell's own repeats. On the shared-baseline
    code this fails: later cells decoded no baseline and copied the first cell's timings."""
    order: dict[str, list[str]] = {}
    current: list[str] = []
    real_base, real_spec = loop_engine.decode_autoregressive, loop_engine.decode_speculative

    def logged(name, real):
        def decode(*args, **kwargs):
            if kwargs["max_new_tokens"] == MAX_NEW:  # a timed decode (warm-up runs WARMUP_TOKENS)
                order.setdefault(current[-1], []).append(name)
            return real(*args, **kwargs)

        return decode

    monkeypatch.setattr(loop_engine, "decode_autoregressive", logged("baseline", real_base))
    monkeypatch.setattr(loop_engine, "decode_speculative", logged("speculative", real_spec))
    grid = make_grid(task_file, repeats=2)
    out = run_sweep(grid, tmp_path, session=FakeSession(), on_cell=lambda cid, total, done: current.append(cid))
    assert len(out.cells) == 4
    expected = [e for i in range(3) for e in engines.engine_order(2, i)]  # 3 examples: A B B A, B A A B, A B B A
    assert expected[:4] == ["baseline", "speculative", "speculative", "baseline"]
    for cell in out.cells:
        assert order[cell.cell_id] == expected, cell.cell_id
        for r in cell_records(out.root, cell.cell_id):
            for engine in ("baseline", "speculative"):
                rec = r[engine]
                assert len(rec["repeat_s"]) == 2  # this cell's two repeats of this engine on this example
                assert rec["prefill_s"] + rec["decode_s"] == pytest.approx(statistics.mean(rec["repeat_s"]))
    first, second = (
        {r["example_id"]: r["baseline"]["repeat_s"] for r in cell_records(out.root, c.cell_id)} for c in out.cells[:2]
    )
    assert first.keys() == second.keys() and all(first[k] != second[k] for k in first)  # timed apart, not shared
    assert not (out.root / "baselines").exists()
    assert not any(out.root.glob("*/baseline_probes.jsonl"))  # no shared baseline, so no drift probe
    doc = json.loads((out.root / "sweep.json").read_text())
    assert doc["baselines_per_cell"] is True and "baselines" not in doc


def test_a_sweep_begun_with_shared_baselines_resumes_and_keeps_their_list(tmp_path, task_file):
    """A sweep folder from before per-cell baselines stays readable and resumable: its sweep.json keeps naming the
    shared baseline files its earlier cells were compared with, and the missing examples are measured."""
    grid = make_grid(task_file)
    out = run_sweep(grid, tmp_path, session=FakeSession())
    doc = json.loads((out.root / "sweep.json").read_text())
    del doc["baselines_per_cell"]
    doc["baselines"] = ["baselines/prompts-t0-k0-p1.jsonl"]  # as an older specbench wrote it
    (out.root / "sweep.json").write_text(json.dumps(doc))
    last = out.cells[-1].cell_id
    for name in ("examples.jsonl", "summary.json"):
        (out.root / last / name).unlink()
    again = run_sweep(grid, tmp_path, session=FakeSession())
    assert again.new_examples == 3 and again.cells[-1].summary["complete"]
    kept = json.loads((out.root / "sweep.json").read_text())
    assert kept["baselines"] == doc["baselines"] and "baselines_per_cell" not in kept


def test_baseline_drift_beyond_tolerance_is_flagged():
    """Cells of sweep folders from before per-cell baselines carry a drift; the report still flags it."""
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
    assert len(baseline_calls) == kill_after  # each example measured its own baseline before its record
    baseline_calls.clear()

    out = run_sweep(grid, tmp_path, session=FakeSession())
    assert out.new_examples == 12 - kill_after
    assert len(baseline_calls) == 12 - kill_after  # only the examples not on disk are measured again
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

    monkeypatch.setattr(torch_session, "TorchSession", no_models)
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


# --------------------------------------------------------------------------- CLI


def test_cell_table_shows_the_primary_measure_with_its_interval():
    from rich.console import Console

    from specbench.cli.sweep import cells_table
    from specbench.measure.run.sweep_run import CellOutcome, SweepOutcome
    from specbench.measure.stats.statistics import MIN_INTERVAL_N

    summaries = {
        "new": {"n_examples": 20, "speedup_geomean": 1.4321, "speedup_geomean_ci95": [1.2, 1.7], "speedup": 9.87},
        "few": {"n_examples": 4, "speedup_geomean": 1.1, "speedup_geomean_ci95": [None, None], "interval_note": "n"},
        "old": {"n_examples": 8, "speedup": 1.25, "speedup_ci95": [1.1, 1.4]},  # written before the geomean
    }
    outcome = SweepOutcome(Path("sweep"), [CellOutcome(k, None, s, 0) for k, s in summaries.items()])  # type: ignore[arg-type]
    console = Console(width=200, record=True)
    console.print(cells_table(outcome))
    text = console.export_text()
    lines = {cell: next(line for line in text.splitlines() if f" {cell} " in line) for cell in summaries}
    assert "speedup (geomean)" in text
    assert "1.432" in lines["new"] and "1.20 – 1.70" in lines["new"] and "9.87" not in lines["new"]  # not Σ/Σ
    assert "1.100" in lines["few"] and f"n < {MIN_INTERVAL_N}" in lines["few"]
    assert "1.250 (ratio of sums)" in lines["old"] and "1.10 – 1.40" in lines["old"]


def test_a_piped_cell_table_keeps_every_cell_name_and_column():
    """Piped (80 columns, not a terminal), rich squeezed the cell names to nothing beside the numbers once a timing
    read "suspect"; print_table renders a pipe's table at its own width. The control: the plain print loses them."""
    from rich.console import Console

    from specbench.cli.output import print_table
    from specbench.cli.sweep import cells_table
    from specbench.measure.run.sweep_run import CellOutcome, SweepOutcome

    summary = {"n_examples": 26, "speedup_geomean": 1.1, "speedup_geomean_ci95": [1.0, 1.2], "suspect_timing": True}
    names = [f"spec-bench-eagle3-u3-v4096-g{g}-t0" for g in (1, 2, 3)]
    outcome = SweepOutcome(Path("sweep"), [CellOutcome(n, None, summary, 0) for n in names])  # type: ignore[arg-type]
    piped, plain = (Console(width=80, record=True, force_terminal=False, file=io.StringIO()) for _ in range(2))
    print_table(cells_table(outcome), piped)
    plain.print(cells_table(outcome))
    text = piped.export_text()
    assert all(n in text for n in names) and "timing" in text and "suspect" in text and piped.width == 80
    assert not any(n in plain.export_text() for n in names)


@pytest.mark.parametrize("gamma", ["0", "3-1", "x"])
def test_cli_bad_grid_is_one_line(gamma, tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--gamma", gamma, "--results-dir", str(tmp_path)])
    assert result.exit_code == 2  # a bad command line
    text = result.output.strip()
    assert text.startswith("error:") and "--gamma" in text and "Traceback" not in text


def test_cli_sweep_runs_and_resumes(tmp_path, task_file, monkeypatch):
    monkeypatch.setattr(torch_session, "TorchSession", FakeSession)
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
        "specbench.measure.run.runner.execute_run", lambda *a, **k: pytest.fail("a finished cell ran again")
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

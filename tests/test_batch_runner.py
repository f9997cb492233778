"""--batch-size through the runner, sweep, metrics and cost model: grouping, records, resume, bad input (tiny
models)."""

from __future__ import annotations

import json
import math

import pytest
from helpers import MAX_NEW, PROMPTS, FakeSession
from typer.testing import CliRunner

import specbench.measure.run.runner as runner
from specbench.cli import app
from specbench.config import LOAD_KEYS, LoadSpec, RunConfig, SamplingConfig
from specbench.decoding import theory
from specbench.engines import check_config
from specbench.errors import SpecbenchError
from specbench.measure.results.records import read_records
from specbench.measure.run.batch_runner import batch_groups
from specbench.measure.run.planning import run_id_for
from specbench.measure.run.sweep import SweepGrid
from specbench.measure.run.sweep_run import cell_ids, run_sweep
from specbench.measure.stats import metrics

MORE = PROMPTS + ["Fifth prompt, a little longer than the others here.", "Six."]


@pytest.fixture
def task_file(tmp_path) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": f"ex{i}", "prompt": p}) + "\n" for i, p in enumerate(MORE)))
    return str(path)


def config(task: str, **over) -> RunConfig:
    load = dict(device="cpu") | {k: over.pop(k) for k in LOAD_KEYS if k in over}  # e.g. backend
    kw = dict(draft="tiny-draft", task=task, gamma=3, limit=5, max_new_tokens=MAX_NEW)
    kw.update(over)
    return RunConfig(LoadSpec("tiny-target", **load), **kw)


def run(cfg: RunConfig, tmp_path, **kw):
    return runner.execute_run(cfg, tmp_path, session=FakeSession(), **kw)


# --------------------------------------------------------------------------- config and ids


def test_batch_1_keeps_todays_run_ids_and_manifest_config(task_file):
    cfg = config(task_file)
    assert "batch_size" not in cfg.to_dict() and "batch_policy" not in cfg.to_dict()
    assert run_id_for(cfg) == run_id_for(config(task_file, batch_size=1, batch_policy="ragged"))
    batched = config(task_file, batch_size=2)
    assert run_id_for(batched) != run_id_for(cfg) and "-b2-" in run_id_for(batched)
    assert "-b2-min-" in run_id_for(config(task_file, batch_size=2, batch_policy="min"))
    assert RunConfig.from_dict(batched.to_dict()) == batched


@pytest.mark.parametrize(
    "over, needle",
    [
        (dict(batch_size=0), "--batch-size must be an integer between 1"),
        (dict(batch_size=-3), "--batch-size must be an integer between 1"),
        (dict(batch_size=2, batch_policy="max"), "--batch-policy must be one of ragged, min"),
        (dict(batch_size=2, engine="hf-assisted"), "--engine hf-assisted: it decodes one sequence at a time"),
        (dict(batch_size=2, backend="static"), "batches run eager"),
        (dict(batch_size=2, gamma="adaptive"), "pass an integer γ"),
        (dict(batch_size=2, gamma="heuristic"), "pass an integer γ"),
        (dict(batch_size=2, gamma="auto"), "pass an integer γ"),
        (dict(batch_size=2, draft="auto"), "--draft auto and --dtype auto"),
        (dict(batch_size=2, draft_confidence=0.5), "--draft-confidence"),
    ],
)
def test_bad_batch_options_are_one_line(task_file, over, needle):
    with pytest.raises(SpecbenchError, match=needle) as err:
        check_config(config(task_file, **over))
    assert "\n" not in str(err.value)


def test_a_batch_larger_than_the_examples_is_refused_before_any_write(tmp_path, task_file):
    with pytest.raises(SpecbenchError, match="--batch-size 8 is more than the 6 examples"):
        run(config(task_file, limit=20, batch_size=8), tmp_path / "results")
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


# --------------------------------------------------------------------------- the measure loop


def test_examples_are_grouped_in_seeded_order_with_the_remainder_last():
    items = list(range(7))
    assert batch_groups(items, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert batch_groups(items, 7) == [items]
    assert batch_groups(items, 1) == [[i] for i in items]


def test_a_batched_run_writes_one_record_per_example_with_its_batch(tmp_path, task_file):
    out = run(config(task_file, batch_size=2), tmp_path)
    records = read_records(out.files.examples)
    single = run(config(task_file), tmp_path)
    order = [r["example_id"] for r in read_records(single.files.examples)]
    assert [r["example_id"] for r in records] == order  # the task's seeded order, batch by batch
    assert [(r["batch_index"], r["row"], r["batch_rows"]) for r in records] == [
        (0, 0, 2),
        (0, 1, 2),
        (1, 0, 2),
        (1, 1, 2),
        (2, 0, 1),
    ]
    for r in records:
        assert r["batch_size"] == 2
        for engine in ("baseline", "speculative"):
            assert r[engine]["batch_s"] > 0 and r[engine]["batch_pass_rows"]
    # greedy rows equal their batch-1 outputs (the engine's exactness, seen through the runner)
    alone = {r["example_id"]: r["baseline"]["token_ids"] for r in read_records(single.files.examples)}
    assert {r["example_id"]: r["speculative"]["token_ids"] for r in records} == alone
    s = out.summary
    assert s["batch_size"] == 2 and s["batch_policy"] == "ragged" and s["complete"] and s["n_examples"] == 5
    assert s["greedy_identity"] == 1.0
    assert s["tokens_per_batch_pass"] > 1 and s["batch_verify_cost"] > 0 and s["predicted_speedup_batch"] > 0
    assert s["replayed_speedup_batch"] > 0
    assert s["peak_memory_mb"] > 0 and s["peak_memory_kind"]
    manifest = json.loads(out.files.manifest.read_text())
    assert manifest["batch_calibration"]["batch_size"] == 2 and "3" in manifest["batch_calibration"]["verify_cost"]
    assert sorted(manifest["batch_calibration"]["rows"]) == ["1", "2"]  # t(b, k) at b = 1 and 2 for the cost model
    assert manifest["batch_calibration"]["rows"]["2"] == manifest["batch_calibration"]["target_ms"]


def test_batch_1_records_carry_no_batch_fields(tmp_path, task_file):
    out = run(config(task_file, limit=2), tmp_path)
    line = json.loads(out.files.examples.read_text().splitlines()[0])
    assert not {"batch_size", "batch_index", "row", "batch_rows"} & set(line)
    assert not {"batch_s", "batch_pass_rows", "batch_pass_widths", "kept_lengths"} & set(line["speculative"])
    assert "batch_calibration" not in json.loads(out.files.manifest.read_text())
    assert out.summary["batch_size"] == 1 and out.summary["tokens_per_batch_pass"] is None


@pytest.mark.parametrize("kill_after", [1, 3])
def test_a_killed_batched_run_resumes_per_batch_without_duplicates(tmp_path, task_file, kill_after):
    cfg = config(task_file, batch_size=2)
    seen = []

    def die(record):
        seen.append(record["example_id"])
        if len(seen) == kill_after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(cfg, tmp_path, on_example=die)
    path = tmp_path / run_id_for(cfg) / "examples.jsonl"
    assert len(read_records(path)) == kill_after  # a kill mid-batch leaves the rows already appended
    out = run(cfg, tmp_path)
    records = read_records(path)
    ids = [r["example_id"] for r in records]
    assert len(ids) == 5 == len(set(ids)) and out.new_examples == 5 - kill_after
    # a batch cut short is decoded again whole: its missing row keeps its own batch and row
    assert sorted((r["batch_index"], r["row"]) for r in records) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    assert out.summary["complete"]


def test_sampled_rows_do_not_depend_on_the_batch(tmp_path, task_file):
    """At T > 0 each row draws from its own generator: the same outputs at B = 2 and B = 3."""
    a = run(config(task_file, batch_size=2, sampling=SamplingConfig(1.0)), tmp_path / "a")
    b = run(config(task_file, batch_size=3, sampling=SamplingConfig(1.0)), tmp_path / "b")
    tokens = lambda out: {r["example_id"]: r["speculative"]["token_ids"] for r in read_records(out.files.examples)}  # noqa: E731
    assert tokens(a) == tokens(b)


# --------------------------------------------------------------------------- metrics and the cost model


def fake_record(batch_index: int, row: int, tokens: int, batch_s: float, prefill: float, accepted: int) -> dict:
    def engine(n, s):
        return {
            "n_tokens": n,
            "prefill_s": prefill,
            "decode_s": s - prefill,
            "target_calls": 4,
            "draft_calls": 0,
            "drafted": 8,
            "accepted": accepted,
            "trials": 8,
            "draft_s": 0.1,
            "verify_s": 0.2,
            "batch_s": batch_s,
            "accept_lengths": [],
            "draft_lengths": [],
            "expected_accept": [],
            "token_ids": [0] * n,
            "stop_reason": "length",
            "repeat_s": [],
        }

    return {
        "batch_size": 2,
        "batch_index": batch_index,
        "row": row,
        "identical": True,
        "first_divergence": None,
        "baseline": {**engine(tokens, 2.0), "batch_s": 2.0},
        "speculative": engine(tokens, batch_s),
    }


def test_batch_throughput_counts_each_batch_once():
    records = [fake_record(0, 0, 10, 1.0, 0.1, 4), fake_record(0, 1, 10, 1.0, 0.1, 8)]
    s = metrics.summarize(records, gamma=3, greedy=True)
    assert s["speculative_tokens_per_s"] == pytest.approx(20 / 1.0)  # not 20 / 2.0 (rows share the batch's second)
    assert s["baseline_tokens_per_s"] == pytest.approx(20 / 2.0)
    assert s["speedup"] == pytest.approx(2.0)
    assert s["alpha_row_mean"] == pytest.approx(0.75) and s["alpha_row_range"] == [0.5, 1.0]
    assert s["alpha"] == pytest.approx(12 / 16)  # pooled
    assert s["tokens_per_batch_pass"] == pytest.approx(18 / 4)  # 18 decode tokens over the batch's 4 passes


def test_min_policy_law_matches_a_simulation():
    """E[min over B rows of (accepted + 1)] by Monte Carlo equals Eq. 1 with α^B: what min advance costs independent
    rows."""
    import numpy as np

    rng, alpha, gamma, b = np.random.default_rng(0), 0.7, 4, 3
    accepts = rng.random((200_000, b, gamma)) < alpha
    kept = np.where(accepts.all(-1), gamma, accepts.argmin(-1)) + 1  # [trials, B]: accepted + 1 per row
    assert kept.min(-1).mean() == pytest.approx(theory.expected_tokens_per_step(alpha**b, gamma), rel=0.01)


# --------------------------------------------------------------------------- sweeps and the CLI


def test_sweep_batch_axis_runs_b1_once_and_times_each_cells_baseline_at_its_batch_size(tmp_path, task_file):
    grid = SweepGrid.from_specs(
        target="tiny-target",
        draft="tiny-draft",
        gamma="2",
        temperature="0",
        task=task_file,
        limit=4,
        max_new_tokens=MAX_NEW,
        device="cpu",
        batch_size=(1, 2),
        batch_policy=("ragged", "min"),
    )
    ids = [cid for cid, _ in cell_ids(grid)]
    assert ids == ["prompts-tiny-draft-g2-t0", "prompts-tiny-draft-g2-t0-b2", "prompts-tiny-draft-g2-t0-b2-min"]
    out = run_sweep(grid, tmp_path, session=FakeSession())
    assert not (out.root / "baselines").exists()
    for c in out.cells:  # a batched cell's baseline was timed in batches of its own size (batch_s)
        rows = read_records(out.root / c.cell_id / "examples.jsonl")
        assert len(rows) == 4 and all((r["baseline"].get("batch_s") is not None) == ("-b2" in c.cell_id) for r in rows)
    b2 = [c.summary for c in out.cells if c.cell_id.endswith("-b2")][0]
    assert b2["batch_size"] == 2 and b2["complete"]
    single = SweepGrid.from_specs(
        target="tiny-target",
        draft="tiny-draft",
        gamma="2",
        temperature="0",
        task=task_file,
        limit=4,
        max_new_tokens=MAX_NEW,
        device="cpu",
    )
    assert "batch_size" not in single.to_dict() and "batch_policy" not in single.to_dict()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--batch-size", "0"], "--batch-size must be an integer between 1"),
        (
            ["run", "--batch-size", "2", "--engine", "hf-assisted"],
            "--engine hf-assisted: it decodes one sequence at a time",
        ),
        (["run", "--batch-size", "2", "--gamma", "adaptive"], "pass an integer γ"),
        (["sweep", "--batch-size", "0,2"], "--batch-size: values must be >= 1"),
        (["sweep", "--batch-policy", "ragged,max"], "--batch-policy: 'max' is not one of"),
    ],
)
def test_cli_bad_batch_input_is_one_line(tmp_path, args, needle):
    result = CliRunner().invoke(app, args + ["--results-dir", str(tmp_path)])
    assert result.exit_code == 2  # the options are refused before anything runs: a bad command line
    assert needle in result.output and len(result.output.strip().splitlines()) == 1


# --------------------------------------------------------------------------- the report


def test_report_draws_speedup_against_batch_size_with_a_verdict(tmp_path, task_file):
    import pandas as pd

    from specbench.report.analysis import batch_curves, batch_sentence

    rows = [
        {
            "task": "t",
            "draft": "d",
            "gamma": 3,
            "temperature": 0.0,
            "batch_size": b,
            "batch_policy": p,
            "speedup": s,
            "predicted_speedup_batch": s * 1.05,
            "predicted_decode_speedup": 1.5,
            "run_id": f"r{b}{p}",
            "speedup_ci95": [s - 0.1, s + 0.1],
            "decode_speedup": s + 0.05,
            "replayed_speedup_batch": s,
        }
        for b, p, s in [(1, "ragged", 1.5), (2, "ragged", 1.4), (4, "ragged", 1.3), (2, "min", 1.2), (4, "min", 0.9)]
    ]
    curves = batch_curves(pd.DataFrame(rows))
    assert [(c["policy"], [p["batch_size"] for p in c["points"]]) for c in curves] == [
        ("ragged", [1, 2, 4]),
        ("min", [1, 2, 4]),
    ]
    assert curves[0]["points"][0]["predicted"] == 1.5 and curves[0]["points"][1]["predicted"] == pytest.approx(1.47)
    assert curves[0]["points"][1]["ci_low"] == pytest.approx(1.3) and curves[0]["points"][1]["decode_speedup"] == 1.45
    assert math.isnan(curves[0]["points"][0]["replayed"]) and curves[0]["points"][1]["replayed"] == 1.4
    sentence = batch_sentence(curves)  # the range only: the verdict is the claims table's (intervals), never a 2nd rule
    assert "from 0.90× (B=4" in sentence and "to 1.50× (B=1" in sentence and "claims table" in sentence
    assert "holds" not in sentence and "does not hold" not in sentence
    assert batch_curves(pd.DataFrame(rows[:1])) == []

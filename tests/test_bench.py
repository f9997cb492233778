"""The benchmark scripts run end to end on CPU (tiny models), so they cannot rot untested. No timing is asserted."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import CORPUS, auto_run_args, save_tiny

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import gpu  # noqa: E402
import hostile  # noqa: E402


def test_gpu_script_runs_on_cpu_and_says_what_it_skipped(tmp_path, capsys):
    target, draft = save_tiny(tmp_path / "t", 0), save_tiny(tmp_path / "d", 1)
    task = tmp_path / "task.jsonl"
    task.write_text("\n".join(json.dumps({"prompt": p}) for p in CORPUS[:3]) + "\n")
    results = gpu.main(
        [
            "--target",
            target,
            "--draft",
            draft,
            "--task",
            str(task),
            "--gamma",
            "2",
            "--limit",
            "2",
            "--max-new-tokens",
            "6",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    printed = capsys.readouterr().out
    assert "no CUDA GPU" in printed and "skipped" in printed
    assert set(results["bench"]) == {"eager", "static"}
    for run in results["bench"].values():
        names = [f[0] for f in run["figures"]]
        assert [n[:3] for n in names if n.startswith("(")] == ["(a)", "(b)", "(c)", "(d)"]
    assert set(results["backend_ratio"]) == {"ours_base", "ours_spec"}
    assert results["greedy_checks"] and all(c["passed"] for c in results["greedy_checks"])
    assert (tmp_path / "out" / "gpu-check.json").exists()


def test_verify_price_bench_reads_a_run_folder_and_sees_a_costlier_verify(tmp_path):
    """bench/verify_price.py on a synthetic auto run whose verify passes cost exactly their price reads 1.0, and
    1.3 when they cost 1.3× (the control that the comparison can move)."""
    import verify_price

    from specbench.measure.auto.prediction import verify_prices

    bare = {1: 20.0, 2: 21.0, 3: 22.0, 4: 23.0, 5: 24.0}
    prices = verify_prices(30.0, bare)
    for factor in (1.0, 1.3):
        run = tmp_path / f"x{factor}" / "task-auto-gauto-t0-0"
        run.mkdir(parents=True)
        manifest = {"auto": {"dtype": "bfloat16", "calibrations": {"bfloat16": {"target_ms": bare}}}}
        (run / "manifest.json").write_text(json.dumps(manifest))
        passes = [5, 5, 1, 3]
        record = {
            "baseline": {"decode_s": 0.3, "n_tokens": 11},  # a 30 ms step
            "speculative": {"verify_s": factor * sum(prices[k] for k in passes) / 1e3, "pass_lengths": passes},
        }
        (run / "examples.jsonl").write_text(json.dumps(record) + "\n")
        got = verify_price.timed_over_priced(verify_price.extract(run))
        assert abs(got - factor) < 1e-9, (factor, got)


def test_verify_price_rules_differ_only_where_t1_lies_above_the_line():
    """A bare curve whose one-token pass sits 5 % above the line through k ≥ 2 (the aclsum shape on the EPYC): the
    shipped rule prices against the line at 1, `line-t1` against t(1), `raw` reads the points. On a curve whose t(1)
    is on the line (control) the three agree; folder names group runs by task."""
    import verify_price

    above = {1: 21.0, 2: 20.2, 3: 20.4, 4: 20.6, 5: 20.8}  # the line: 19.8 + 0.2 k, so 20.0 at 1
    on = {k: 20.0 + 0.2 * k for k in range(1, 6)}
    line, t1, raw = (verify_price.RULES[r](30.0, above) for r in ("line", "line-t1", "raw"))
    assert line[5] == pytest.approx(30.0 * 20.8 / 20.0) and t1[5] == pytest.approx(30.0)  # t1: 20.8 < t(1), floored
    assert raw[5] == pytest.approx(30.0 * 20.8 / 21.0) and line[1] == t1[1] == raw[1] == 30.0
    for rule in ("line", "line-t1", "raw"):
        assert verify_price.RULES[rule](30.0, on) == pytest.approx({k: 30.0 * on[k] / on[1] for k in on})
    assert verify_price.task_of("x/ding-de-en-auto-gauto-t0-1a") == "ding-de-en" and verify_price.task_of("y") == "runs"


def test_verify_price_recheck_gives_the_runs_own_check_back_under_its_rule_and_moves_with_the_price():
    """`--check` re-prices a run's whole cost-model check from the rounds it kept: under the rule the run used
    (its verify_ms) the check comes back exactly; under a rule that prices every pass over 1 token 10 % higher the
    check falls by each example's own share of verify time (hand-computed here), and a run without rounds is None."""
    import verify_price

    bare = {1: 21.0, 2: 20.2, 3: 20.4, 4: 20.6, 5: 20.8}  # t(1) above the line: the rules differ
    used = verify_price.RULES["raw"](30.0, bare)
    costs = {"step_ms": 30.0, "verify_ms": {str(k): v for k, v in used.items()}, "verify_bare_ms": bare}
    manifest = {"auto": {"dtype": "bfloat16", "loop_costs": {"bfloat16": costs}}}
    summary = {"auto_check_speedup": 1.5, "speedup_geomean": 1.6}
    examples = [
        {
            "baseline": {"decode_s": 0.6, "n_tokens": 21},
            "speculative": {"pass_lengths": [5, 3, 1], "prefill_s": 0.1, "decode_s": 0.2},
        },  # a 30 ms plain step: prices apply as they are
        {
            "baseline": {"decode_s": 1.2, "n_tokens": 21},
            "speculative": {"pass_lengths": [], "prefill_s": 0.1, "decode_s": 0.5},
        },  # no passes: no change
    ]
    assert verify_price.repriced_check(manifest, summary, examples, "raw") == pytest.approx(1.5)
    verify_price.RULES["dearer"] = lambda step, b: {k: v * (1.1 if k > 1 else 1.0) for k, v in used.items()}
    try:
        got = verify_price.repriced_check(manifest, summary, examples, "dearer")
    finally:
        del verify_price.RULES["dearer"]
    delta = 0.1 * (used[5] + used[3]) / 1e3  # seconds at a 30 ms step
    assert got == pytest.approx(1.5 * math.sqrt(0.3 / (0.3 + delta)))
    assert (
        verify_price.repriced_check({"auto": {"dtype": "bfloat16", "loop_costs": {}}}, summary, examples, "raw") is None
    )


def test_verify_price_check_without_a_usable_run_says_so_in_one_line(tmp_path, capsys):
    """`--check` on folders holding no auto run that kept its rounds: exit 2 and one line naming what to give."""
    import verify_price

    assert verify_price.main(["--check", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "no run to re-price: give auto run folders that kept their verify rounds (verify_bare_ms)"
    )


def test_tree_step_costs_paired_ratio_is_the_geometric_mean_with_its_t_interval():
    """bench/tree_step_cost.py's per-k figure: exp(mean log) of the rounds' ratios with Student's t on the logs, here
    checked against the textbook formula; rounds all at 1.0 give the point at both ends (no spread, no interval)."""
    import tree_step_cost
    from scipy import stats

    ratios = [1.02, 0.99, 1.05, 1.01, 0.97, 1.04]
    logs = [math.log(r) for r in ratios]
    mean, sd = sum(logs) / len(logs), float(np.std(logs, ddof=1))
    half = stats.t.ppf(0.975, len(logs) - 1) * sd / math.sqrt(len(logs))
    got = tree_step_cost.paired(ratios)
    assert got["n"] == 6 and got["ratio"] == pytest.approx(math.exp(mean))
    assert (got["low"], got["high"]) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert tree_step_cost.paired([1.0, 1.0])["low"] == tree_step_cost.paired([1.0, 1.0])["high"] == 1.0


def test_bench_auto_cross_fits_the_grids_best_cell_so_a_tie_reads_as_a_tie():
    """Twelve grid cells and the default job all equally fast (per-example log speedups with σ 0.15 noise, 40
    examples): the best cell on all examples is the luckiest, so the default job reads below it (winner's curse);
    cross-fitted (chosen on one half, compared on the other) the ratio is about 1, and its interval covers 1.
    Control: a default job truly 20 % slower than the cells reads about 0.8 cross-fitted too."""
    import math

    import auto_vs_sweep as bench
    import numpy as np

    rng = np.random.default_rng(3)
    ids = [f"ex{i}" for i in range(40)]
    base = rng.normal(0.4, 0.3, len(ids))  # how well each example drafts, shared by every configuration

    def run(shift: float) -> dict[str, float]:
        return {k: float(b + shift + rng.normal(0.0, 0.15)) for k, b in zip(ids, base)}

    cells = {f"cell{c}": run(0.0) for c in range(12)}
    default = run(0.0)
    best = max(cells, key=lambda c: np.mean(list(cells[c].values())))
    naive = math.exp(np.mean([default[k] - cells[best][k] for k in ids]))
    fit = bench.cross_fit(default, cells)
    assert naive < fit["ratio"] and fit["n"] == 40 and len(fit["picked"]) == 2
    assert abs(fit["ratio"] - 1.0) < 0.06 and fit["ci95"][0] < 1.0 < fit["ci95"][1]
    slower = bench.cross_fit({k: v - math.log(1.25) for k, v in run(0.0).items()}, cells)
    assert abs(slower["ratio"] - 0.8) < 0.06 and slower["ci95"][1] < 0.95


def test_the_hostile_battery_prints_its_counts(capsys):
    """bench/hostile.py (issue 41) on one planted defect through every output, and one bad command line."""
    counts = hostile.main(["--only", "export: a duplicated record"])
    assert counts["cases"] == 1 and counts["failing"] == [], counts
    assert "cases 1: wrong-but-plausible 0, tracebacks 0, wrong exit codes 0" in capsys.readouterr().out
    assert hostile.main(["--only=--gpus-per-cell"])["cases"] == 1


def test_prediction_coverage_counts_a_run_as_covered_only_inside_the_held_out_interval():
    """bench/prediction_coverage.py (issue 40): a measurement inside the held-out interval is covered, one outside
    is not (the control), the check's ±5 % is judged on measured ÷ check, and the tally gives k/n with its
    Clopper–Pearson interval and the goal (≥ 90 % of ≥ 10 runs)."""
    import prediction_coverage as pc

    def summary(measured, low, high, check):
        return {
            "speedup_geomean": measured,
            "auto_predicted_speedup": (low + high) / 2,
            "auto_predicted_interval": [low, high],
            "auto_check_speedup": check,
        }

    inside = pc.coverage_row("t", 1, summary(1.5, 1.3, 1.7, 1.52))
    outside = pc.coverage_row("t", 2, summary(1.8, 1.3, 1.7, 1.6))
    old = pc.coverage_row("t", 3, summary(1.5, 1.3, 1.7, 1.5) | {"auto_predicted_interval": None})
    assert (inside["covered"], outside["covered"], old["covered"]) == (True, False, None)
    assert inside["check_within"] is True and outside["check_within"] is False  # 1.8 / 1.6 = 1.125
    tally = pc.tally([inside, outside, old])["t"]
    assert (tally["covered"], tally["runs"], tally["checks"]) == (1, 2, 3)
    assert tally["coverage_ci95"][0] < 0.5 < tally["coverage_ci95"][1] and not tally["coverage_goal_met"]
    ten = pc.tally([pc.coverage_row("u", s, summary(1.5, 1.3, 1.7, 1.5)) for s in range(10)])["u"]
    assert ten["coverage_goal_met"] and ten["check_goal_met"] and ten["coverage_ci95"][0] > 0.69


def test_check_bias_puts_an_unbiased_pricing_inside_five_percent_and_a_biased_one_outside():
    """bench/prediction_coverage.check_bias: runs whose measured ÷ check scatter ±6 % around 1 (single runs outside
    ±5 %) have a mean inside ±5 %; the same scatter around 1.08 (a pricing 8 % off: the control) does not."""
    import prediction_coverage as pc

    scatter = [0.94, 1.06, 0.97, 1.03, 1.0, 0.95, 1.05, 0.99, 1.01, 1.0]
    fair = pc.check_bias(scatter)
    assert fair["bias_within"] and fair["ci95"][0] < 1 < fair["ci95"][1] and fair["runs"] == 10
    biased = pc.check_bias([1.08 * r for r in scatter])
    assert not biased["bias_within"] and biased["ci95"][0] > 1.04
    assert pc.check_bias([1.0])["ci95"] is None  # one run: no interval


def test_bench_engines_refuses_a_bad_torch_rows_value_in_one_line_with_exit_2(capsys):
    import engines as bench_engines

    assert bench_engines.parse_args(["--torch-rows", "float32:eager,bfloat16:compiled"]).torch_rows  # a good value
    for bad in ("float16:eager", "float32", "bfloat16:jit"):
        with pytest.raises(SystemExit) as exit_:
            bench_engines.parse_args(["--torch-rows", bad])
        assert exit_.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"--torch-rows {bad!r}: each row is dtype:backend" in line


def test_prediction_coverage_resumes_from_its_appended_rows(tmp_path, monkeypatch, capsys):
    """An interrupted coverage run keeps every finished run (rows.jsonl, appended): --resume reruns only the rest, a
    torn last line is dropped, and a folder of another --job is refused in one line."""
    import prediction_coverage as pc

    ran = []

    def fake_run(task, seed, job, out):
        ran.append((task, seed))
        return {"speedup_geomean": 1.5, "auto_predicted_interval": [1.3, 1.7], "auto_check_speedup": 1.5}

    monkeypatch.setattr(pc, "run_one", fake_run)
    folder = tmp_path / "cov"
    folder.mkdir()
    done = pc.coverage_row("a", 1, fake_run("a", 1, [], folder))
    (folder / pc.ROWS_FILE).write_text(json.dumps({"job": "J", **done}) + "\n" + '{"job": "J", "task"')
    ran.clear()
    result = pc.main(["--tasks", "a,b", "--runs", "2", "--job", "J", "--resume", str(folder)])
    assert ran == [("b", 1), ("a", 2), ("b", 2)] and len(result["rows"]) == 4
    assert result["tasks"]["a"]["runs"] == 2 and len((folder / pc.ROWS_FILE).read_text().splitlines()) == 4
    with pytest.raises(SystemExit) as exit_:
        pc.main(["--tasks", "a", "--runs", "1", "--job", "other", "--resume", str(folder)])
    assert exit_.value.code == 2 and "resume it with that --job" in capsys.readouterr().err


def test_planted_bug_resumes_only_a_run_of_the_same_settings(tmp_path):
    """bench/planted_bug.py keeps the examples an interrupted run left in --out, with each plant's step count (where
    its one-in-`every` falls next); another run's file (other settings, other plants, or written before the step
    counts were kept) starts afresh."""
    import argparse

    import planted_bug as pb

    args = argparse.Namespace(
        target="t",
        draft="prompt-lookup",
        task="aclsum",
        dtype="bfloat16",
        max_new_tokens=64,
        gamma=4,
        every=20,
        offset=0,
    )
    names = ["shift", "lower 8"]
    out = tmp_path / "planted.json"
    assert pb.resumed(out, args, names, 40) == ([], {"shift": 0, "lower 8": 0})  # nothing there yet
    before = {k: getattr(args, k) for k in pb.RESUME_KEYS} | {"examples": 40, "plants": dict.fromkeys(names, {})}
    out.write_text(json.dumps(before | {"records": [{"example": 0}], "plant_steps": {"shift": 7, "lower 8": 7}}))
    assert pb.resumed(out, args, names, 40) == ([{"example": 0}], {"shift": 7, "lower 8": 7})
    assert pb.resumed(out, args, names, 20) == ([], {"shift": 0, "lower 8": 0})  # another --limit: another sample
    assert pb.resumed(out, args, ["shift"], 40)[0] == []  # other plants
    assert pb.resumed(out, argparse.Namespace(**vars(args) | {"offset": 40}), names, 40)[0] == []  # other examples
    old = {k: v for k, v in before.items() if k != "offset"}  # written before --offset existed: its examples start at 0
    out.write_text(json.dumps(old | {"records": [{"example": 0}], "plant_steps": {"shift": 7, "lower 8": 7}}))
    assert pb.resumed(out, args, names, 40)[0] == [{"example": 0}]
    out.write_text(json.dumps(before | {"records": [{"example": 0}]}))  # written before resuming existed
    assert pb.resumed(out, args, names, 40)[0] == []


def test_planted_bug_offset_takes_the_examples_after_a_smaller_runs():
    """--offset N --limit M: the seeded order's examples N..N+M-1, none of those a run at --limit N measured."""
    import planted_bug as pb

    from specbench.tasks.examples import select_examples
    from specbench.tasks.specs import load_task

    spec = load_task("aclsum")
    first = [e.id for e in select_examples(spec, 10, 0)]
    after = [e.id for e in pb.examples_after(spec, 10, 5)]
    assert len(after) == 5 and not set(after) & set(first)
    assert after == [e.id for e in select_examples(spec, 15, 0)][10:]


def test_contention_dose_response_pairs_each_hogged_run_with_the_idle_run_before_it():
    """Slowdowns are hogged ÷ the idle neighbour, per strength; flag counts per strength and on idle runs come with
    Clopper–Pearson intervals (a strength the alarm never flags reads 0 of n: the control)."""
    import noise

    def row(label, duty, ms, flagged):
        return {"label": label, "duty": duty, "probe_ms": ms, "contention": 0.1 if flagged else 0.0, "flagged": flagged}

    runs = []
    for i in range(10):
        runs += [row("idle", None, 30.0, i == 0), row("hog", 0.3, 39.0, True)]
        runs += [row("idle", None, 30.0, False), row("hog", 0.05, 31.5, False)]
    doc = noise.dose_response(runs)
    assert doc["idle"]["k"] == 1 and doc["idle"]["n"] == 20
    assert doc["idle"]["ci95"][0] < 0.05 < doc["idle"]["ci95"][1] < 0.26
    strong, weak = doc["duties"]["0.3"], doc["duties"]["0.05"]
    assert strong["k"] == 10 and strong["slowdown_median"] == pytest.approx(1.3) and strong["ci95"][0] > 0.69
    assert weak["k"] == 0 and weak["slowdown_median"] == pytest.approx(1.05) and weak["ci95"][1] < 0.31


def test_contention_idle_only_plans_idle_runs_after_the_rounds_already_held():
    import noise

    pairs = noise.contention_plan([], [0.1, 0.3], 2, idle_only=False)
    assert pairs == [(0, "idle", 0.1), (0, "hog", 0.1), (0, "idle", 0.3), (0, "hog", 0.3)] + [
        (1, "idle", 0.3), (1, "hog", 0.3), (1, "idle", 0.1), (1, "hog", 0.1)
    ]  # fmt: skip
    held = [{"round": 0}, {"round": 4}]
    assert noise.contention_plan(held, [0.1], 3, idle_only=True) == [
        (5, "idle", None),
        (6, "idle", None),
        (7, "idle", None),
    ]
    assert noise.contention_plan([], [0.1], 1, idle_only=True) == [(0, "idle", None)]


@pytest.mark.parametrize("bad", [["--duty", "abc"], ["--duty", "0.1,0"], ["--duty", "1.5"], ["--runs", "0"]])
def test_contention_refuses_a_bad_duty_or_run_count_in_one_line_with_exit_2(bad, capsys, monkeypatch):
    import noise

    monkeypatch.setattr(sys, "argv", ["noise.py", "contention", *bad])
    with pytest.raises(SystemExit) as exit_:
        noise.main()
    assert exit_.value.code == 2 and bad[0] in capsys.readouterr().err


def test_contention_resumes_only_rows_of_the_same_job(tmp_path, monkeypatch, capsys):
    import noise

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"round": 0, "label": "idle", "duty": None, "task": "aclsum", "limit": 6}) + "\n")
    monkeypatch.setattr(sys, "argv", ["noise.py", "contention", "--out", str(rows)])  # --task ding-de-en
    with pytest.raises(SystemExit) as exit_:
        noise.main()
    assert exit_.value.code == 2 and "--task aclsum --limit 6" in capsys.readouterr().err


def test_the_feature_probes_paired_test_reads_only_the_positions_where_the_heads_differ():
    """bench/eagle_features.py's exact McNemar test: two heads that differ at 30 positions, all in one's favour, are
    told apart; the same two with the differences split 15/15 (the control) are not, whatever they share."""
    import eagle_features  # bench/ is on the path (above)
    import torch

    shared = torch.tensor([True] * 500 + [False] * 470)
    a = torch.cat([shared, torch.ones(30, dtype=torch.bool)])
    b = torch.cat([shared, torch.zeros(30, dtype=torch.bool)])
    told = eagle_features.paired_difference(a, b)
    assert (told["only_a"], told["only_b"]) == (30, 0) and told["p"] < 1e-6
    assert told["difference"] == pytest.approx(0.03)
    split = torch.cat([torch.ones(15, dtype=torch.bool), torch.zeros(15, dtype=torch.bool)])
    even = eagle_features.paired_difference(torch.cat([shared, split]), torch.cat([shared, ~split]))
    assert (even["only_a"], even["only_b"]) == (15, 15) and even["p"] == pytest.approx(1.0)


def test_check_misses_reads_each_parts_timed_over_priced(tmp_path, capsys):
    """bench/check_misses.py's row on a run with known costs: the verify pass timed 10 % over its price and the plain
    step on price gives verify ÷ step 1.10; folders that hold no auto run it can read (a fabricated folder the checked
    reader refuses, an empty one) are skipped with their reason, and with nothing read it says so in one line."""
    import check_misses

    def example(step_s: float, verify_s: float) -> dict:
        base = {"decode_s": step_s, "n_tokens": 11}  # 10 decoded tokens
        spec = {"pass_lengths": [5, 5], "verify_s": verify_s, "draft_calls": 4, "draft_s": 0.008}
        return {"baseline": base, "speculative": spec}

    costs = {"step_ms": 30.0, "verify_ms": {"1": 30.0, "5": 33.0}, "draft_call_ms": {"d": 2.0}}
    costs["verify_bare_ms"] = {"1": 20.0, "5": 24.2}  # raw t(5)/t(1) 1.21: 36.3 ms a pass, what was timed
    manifest = {"run_id": "r", "auto": {"dtype": "bfloat16", "draft": "d", "loop_costs": {"bfloat16": costs}}}
    summary = {"task": "t", "speedup_geomean": 1.5, "auto_check_speedup": 1.6, "repeat_halves_ratio": 1.01}
    r = check_misses.run_misses(manifest, summary, [example(0.3, 0.0726)] * 3)
    assert (
        r["step"] == pytest.approx(1.0)
        and r["verify"] == pytest.approx(1.1)
        and r["verify_per_step"] == pytest.approx(1.1)
    )
    assert r["draft_call"] == pytest.approx(1.0) and r["measured_over_check"] == pytest.approx(1.5 / 1.6)
    assert r["verify_raw_per_step"] == pytest.approx(1.0)  # priced by the rounds' raw medians, it is on price
    older = {k: v for k, v in costs.items() if k != "verify_bare_ms"}  # a run from before verify_bare_ms
    manifest["auto"]["loop_costs"]["bfloat16"] = older
    assert math.isnan(check_misses.run_misses(manifest, summary, [example(0.3, 0.0726)])["verify_raw_per_step"])
    assert check_misses.run_misses({"run_id": "plain"}, summary, [example(0.3, 0.0726)]) is None  # not an auto run
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps(manifest))  # no run manifest's fields: the reader refuses it
    (run / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "runs" / "plain").mkdir()  # no files
    assert check_misses.main([str(tmp_path / "runs")]) == []
    err = capsys.readouterr().err
    assert f"skipped {run}:" in err and "no run to read: give `--gamma auto` run folders" in err


def test_check_misses_reads_a_real_auto_run_through_the_checked_reader(tmp_path):
    """check_misses on the folder a real `specbench run --gamma auto` wrote (a tiny pair): one row, read through
    specbench's checked reader, whose measured ÷ check is the run's own summary's."""
    import check_misses
    from typer.testing import CliRunner

    from specbench.cli import app

    args = auto_run_args(tmp_path, examples=8, limit=2, max_new=8, gamma_max=2)
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    (row,) = check_misses.main([str(tmp_path / "r")])
    assert row["measured_over_check"] == pytest.approx(summary["speedup_geomean"] / summary["auto_check_speedup"])
    assert row["task"] == summary["task"] and row["verify_rounds"] >= 1


def test_check_misses_fits_the_timed_verify_passes_line():
    """verify_shape recovers a known line (a one-token pass 0.9 plain steps, 0.04 a token past it) from examples of
    mixed pass lengths, and a miss that falls with the context gives a negative context slope."""
    import check_misses

    ex = [
        {
            "passes": p,
            "extra": e,
            "steps": 0.9 * p + 0.04 * e,
            "context": 100.0 + 50 * i,
            "log_miss": -0.0003 * (100 + 50 * i),
        }
        for i, (p, e) in enumerate([(10, 30), (12, 20), (8, 40), (15, 15), (9, 36)])
    ]
    fit = check_misses.verify_shape([{"examples": ex, "priced_slope": 0.026}])
    assert fit["level"] == pytest.approx(0.9) and fit["slope"] == pytest.approx(0.04)
    assert fit["context_slope_per_100"] == pytest.approx(-0.03) and fit["context_r"] == pytest.approx(-1.0)
    assert check_misses.priced_slope({1: 30.0, 2: 31.0, 5: 34.0}, 30.0) == pytest.approx(1 / 30)


def test_rerun_spread_pools_identical_runs_and_prices_the_floor_under_a_per_run_check():
    """bench/rerun_spread.py: the spread of identical reruns' log speedups (reruns with another auto choice kept
    apart), pooled over tasks with its chi-square interval, and the share a check with no error would leave outside
    ±5 %: about 31 % at s_m = ln 1.05 (one sd), about 0 at s_m = 0.01 (the control: a quiet machine)."""
    import rerun_spread

    def rows(task, measured, choice="d γ 4 bfloat16"):
        return [
            {"task": task, "rerun": i, "choice": choice, "measured": m, "check": 1.5, "halves": 1.0}
            for i, m in enumerate(measured)
        ]

    wide = [1.5 * math.exp(x * math.log(1.05)) for x in (-1.5, -0.5, 0.5, 1.5)]  # sd of the logs: 1.29 ln 1.05
    s = rerun_spread.spread(rows("a", wide) + rows("a", [9.0], choice="other γ 2 float32"))
    assert s["n"] == 4 and s["other_choice"] == 1
    assert s["s_m"] == pytest.approx(statistics.stdev(math.log(m) for m in wide))
    assert s["s_e"] == pytest.approx(s["s_m"])  # the check is one number: log(measured ÷ check) spreads alike
    one_sd = {"n": 5, "s_m": math.log(1.05)}
    pooled = rerun_spread.floor([one_sd, one_sd])
    assert pooled["df"] == 8 and pooled["s_m"] == pytest.approx(math.log(1.05))
    assert pooled["outside"] == pytest.approx(0.3055, abs=1e-3)  # ±5 % of the ratio: ln 0.95 and ln 1.05
    assert pooled["s_m_ci95"][0] < pooled["s_m"] < pooled["s_m_ci95"][1]
    quiet = rerun_spread.floor([{"n": 5, "s_m": 0.01}])
    assert quiet["outside"] < 1e-5
    assert rerun_spread.floor([{"n": 1, "s_m": float("nan")}]) == {"df": 0}

"""Reports from fake run folders shaped like runner output: tables, figures, escaping, and what is skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import N_EXAMPLES, make_run
from typer.testing import CliRunner

from specbench.cli import app
from specbench.decoding import theory
from specbench.errors import SpecbenchError
from specbench.measure.machine.hardware import describe
from specbench.report.analysis import best_gamma_rows
from specbench.report.calibrations import calibration_curves
from specbench.report.collect import collect
from specbench.report.figures.detail import fig_histograms, fig_pass_cost, fig_time_split
from specbench.report.figures.speedup import fig_speedup
from specbench.report.render import write_report
from specbench.report.tables import PAPER_TABLE2, with_ci
from specbench.report.timing_checks import DRIFT_CONSEQUENCE

SPEEDUPS = {
    ("small", 0.0): {1: 1.2, 2: 1.5, 4: 1.3},
    ("small", 1.0): {1: 1.1, 2: 1.2, 4: 1.25},
    ("big", 0.0): {1: 0.9, 2: 0.8, 4: 0.7},
    ("big", 1.0): {1: 0.8, 2: 0.7, 4: 0.6},
}


def fake_sweep(base: Path) -> Path:
    root = base / "results" / "sweep-fake"
    for (draft, temp), by_gamma in SPEEDUPS.items():
        for gamma, speedup in by_gamma.items():
            make_run(
                root, f"ende-{draft}-g{gamma}-t{temp:g}", draft=draft, gamma=gamma, temperature=temp, speedup=speedup
            )
    return root


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    """A fresh fake sweep, for tests that damage it."""
    return fake_sweep(tmp_path)


@pytest.fixture(scope="module")
def shared_report(tmp_path_factory):
    """One report of an intact fake sweep, shared by the read-only tests (figures take seconds to draw)."""
    base = tmp_path_factory.mktemp("shared")
    root = fake_sweep(base)
    return root, write_report([root], base / "rep")


def read(out: Path) -> tuple[str, str]:
    return (out / "report.md").read_text(), (out / "report.html").read_text()


# --------------------------------------------------------------------------- content


def test_report_writes_md_html_and_figures(shared_report):
    _, outcome = shared_report
    assert outcome.n_runs == 12 and outcome.skipped == []
    md, page = read(outcome.out)
    for stem in ("speedup_vs_gamma", "alpha", "accepted_lengths_0", "time_per_token"):
        for ext in ("png", "svg"):
            assert (outcome.out / "figures" / f"{stem}.{ext}").stat().st_size > 1000
        assert f"figures/{stem}.png" in md
    assert page.count("data:image/png;base64,") == 4  # self-contained: figures inline, nothing fetched
    assert 'src="figures' not in page and "<link" not in page and "<script" not in page.lower()
    assert "ende-small-g2-t0" in md and "Skipped (0)" in md
    assert "## Quality" not in md  # no quality in these summaries


def test_default_report_folder_is_named_after_the_input(tmp_path, monkeypatch):
    make_run(tmp_path / "results" / "my-run", "r1")
    monkeypatch.chdir(tmp_path)
    outcome = write_report([Path("results/my-run")])
    assert outcome.out == Path("reports") / "my-run" and (tmp_path / "reports/my-run/report.html").exists()


def test_recommended_gamma_measured_and_predicted(shared_report):
    data = collect([shared_report[0]])
    rows = {(r["series"]): r for r in best_gamma_rows(data.runs)}
    small0 = rows["small, T=0"]
    assert small0["measured_gamma"] == 2 and small0["measured_speedup"] == pytest.approx(1.5)
    runs = data.runs[data.runs["series"] == "small, T=0"]
    alpha, c = runs["alpha"].mean(), runs["c"].mean()
    assert small0["alpha"] == pytest.approx(alpha)
    assert small0["thm_gamma"] == theory.optimal_gamma(alpha, c).gamma
    costs = dict(zip(runs["gamma"], runs["verify_cost"]))
    assert small0["ext_gamma"] == theory.optimal_gamma_extended(alpha, c, costs).gamma
    assert small0["ext_gamma"] in (1, 2, 4)  # the extended model only picks among measured γ
    assert rows["small, T=1"]["measured_gamma"] == 4 and rows["big, T=0"]["measured_gamma"] == 1


def test_paper_table_rows_beside_ours(shared_report):
    md, _ = read(shared_report[1].out)
    section = md.split("## Compared with the paper")[1].split("\n## ")[0]
    assert "| source | task | draft | T | γ | α | speedup |" in section
    for task, draft, t, gamma, alpha, speed in PAPER_TABLE2:
        assert f"| {task} | {draft} | {t} | {gamma} | {alpha:.3f} | {speed:.1f}× |" in section
    assert "| ende | small | 0 | 2 |" in section and "1.50×" in section  # our best γ for small at T = 0


def test_speedup_figure_draws_measured_and_both_predictions(shared_report):
    runs = collect([shared_report[0]]).runs
    fig = fig_speedup(runs)
    ax = fig.axes[0]
    sub = runs[runs["series"] == "small, T=0"].sort_values("gamma")
    lines = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [1, 2, 4]]
    by_style = {}
    for ln in lines:
        by_style.setdefault(ln.get_linestyle(), []).append(list(ln.get_ydata()))
    assert list(sub["speedup_geomean"]) in by_style["-"]  # the primary measure, not the ratio of sums
    assert list(sub["predicted_speedup"]) in by_style["--"]
    assert list(sub["predicted_speedup_extended"]) in by_style["-."]
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title() and fig.legends


def test_histogram_overlays_the_law_for_measured_alpha(shared_report):
    runs = collect([shared_report[0]]).runs
    fig = fig_histograms(runs, "ende")
    ax = next(a for a in fig.axes if a.get_title() == "small, T=0, γ=4")
    row = runs[(runs["series"] == "small, T=0") & (runs["gamma"] == 4)].iloc[0]
    law = [ln for ln in ax.get_lines() if ln.get_marker() == "o"][0]
    assert list(law.get_ydata()) == pytest.approx(theory.accepted_length_law(row["alpha"], 4))
    counts = row["accepted_length_histogram"]
    assert [p.get_height() for p in ax.patches] == pytest.approx([c / sum(counts) for c in counts])


def test_time_split_bars_add_up_to_speculative_time_per_token(shared_report):
    runs = collect([shared_report[0]]).runs
    ax = fig_time_split(runs).axes[0]
    n = len(runs)
    widths = [p.get_width() for p in ax.patches]  # horizontal bars, one per run
    assert len(widths) == 4 * n  # prefill, draft, verify, overhead per run
    totals = [sum(widths[i::n]) for i in range(n)]
    expected = runs["speculative_s"] / runs["speculative_tokens"] * 1e3
    assert totals == pytest.approx(list(expected))


def test_quality_and_checks_sections(tmp_path):
    root = tmp_path / "runs"
    q = {
        "metric": "bleu",
        "baseline": {"bleu": 30.0, "signature": "x", "bleu_ci95": [28.0, 32.0]},
        "speculative": {"bleu": 29.5, "signature": "x", "bleu_ci95": [27.0, 31.0]},
    }
    make_run(root, "r1", quality=q)
    checks = [
        {
            "name": "step/T=1/gof",
            "kind": "gof",
            "statistic": 3.2,
            "p_value": 0.52,
            "n": 20000,
            "threshold": 0.001,
            "power": 0.99,
            "alternative": "TV>=0.01",
            "passed": True,
        },
        {
            "name": "negative-control",
            "statistic": 80.0,
            "p_value": 1e-9,
            "n": 20000,
            "threshold": 0.001,
            "power": 0.99,
            "passed": False,
        },
    ]
    (root / "checks.json").write_text(json.dumps(checks))
    (root / "verify").mkdir()  # the shape verification.write_checks writes: an object holding the list
    (root / "verify" / "checks.json").write_text(
        json.dumps({"schema_version": 1, "passed": True, "checks": checks[:1]})
    )
    out = write_report([root], tmp_path / "rep")
    md, _ = read(out.out)
    assert (
        "Verification checks (1/2 passed)" in md
        and "| negative-control | 80.000 | 1.00e-09 | 20000 | 0.001 | 0.990 | no |" in md
    )
    assert "Verification checks (1/1 passed)" in md and out.skipped == []
    assert "Quality: baseline vs speculative" in md and "| r1 | bleu | 30.000 | [28.00, 32.00] | 29.500 |" in md
    assert not (out.out / "figures" / "quality.png").exists()  # T = 0: the same tokens, a figure would say nothing


def test_every_user_and_model_string_is_escaped(tmp_path):
    evil = "<script>alert('x')</script>"
    root = tmp_path / "runs"
    make_run(root, "r1", draft=f"d{evil}", task=f"t{evil}", text=f"output {evil} & more", reference=f"ref {evil}")
    make_run(root, "r2", draft="cost$\\frac{$", gamma=3)  # mathtext would fail on this; it must be literal text
    (root / "checks.json").write_text(
        json.dumps(
            [{"name": evil, "statistic": 1.0, "p_value": 0.5, "n": 1, "threshold": 0.1, "power": None, "passed": True}]
        )
    )
    md, page = read(write_report([root], tmp_path / "rep").out)
    assert "<script" not in page.lower() and "<script" not in md.lower()
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page  # jinja2 autoescape (markupsafe) spells ' as &#39;
    assert "output &lt;script&gt;" in md and "&amp; more" in page


# --------------------------------------------------------------------------- calibration, timing, policies

HW = {
    "cpu_model": "AMD EPYC 7B13",
    "isa_flags": ["avx2", "avx512f", "avx512_bf16"],
    "cpu_count": 4,
    "usable_cpus": 2,
    "torch_threads": 2,
    "memory_gib": 23.4,
    "gpus": [],
    "cuda": None,
    "gpu_driver": None,
    "platform": "Linux-6.1-x86_64",
    "machine": "x86_64",
}


def calibration(dtype: str, ms: list[float], context: int = 40, draft_ms: float | None = 5.0) -> dict:
    """A Calibration.to_dict() as the runner records it: t(k) for k = 1..len(ms)."""
    target_ms = {str(k): v for k, v in enumerate(ms, 1)}
    return {
        "dtype": dtype,
        "device": "cpu",
        "context_tokens": context,
        "target_ms": target_ms,
        "target_spread": {k: 0.03 for k in target_ms},
        "pass_cost": {k: v / ms[0] for k, v in target_ms.items()},
        "repeats": 7,
        "draft": "small",
        "draft_ms": draft_ms,
        "seconds": 1.5,
        "extra": {},
    }


FP32 = calibration("float32", [43.0, 60.0, 90.0, 59.0, 70.0])
BF16 = calibration("bfloat16", [22.0, 23.0, 24.0, 24.5, 26.0])


def test_pass_cost_curve_figure_and_auto_reasons(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "fixed", manifest_extra={"hardware": HW, "calibration": FP32})
    auto = {
        "requested": {"dtype": "auto"},
        "dtype": "bfloat16",
        "draft": "small",
        "gamma": 3,
        "policy_gamma": 3,
        "reasons": ["dtype bfloat16: 9.1 ms/token predicted <b>bold</b>", "γ 3: predicted speedup 1.2"],
        "calibrations": {"float32": FP32, "bfloat16": BF16},
        "draft_ms": {},
        "pilots": {},
        "candidates": [],
    }
    make_run(root, "chosen", gamma=3, manifest_extra={"hardware": HW, "calibration": BF16, "auto": auto})
    data = collect([root])
    curves = calibration_curves(data.manifests, data.notes)
    assert sorted(c["label"] for c in curves) == [
        "bfloat16, 40-token context, AMD EPYC 7B13",
        "float32, 40-token context, AMD EPYC 7B13",
    ]  # shared curves: one line
    fp32 = next(c for c in curves if c["dtype"] == "float32")
    assert fp32["curve"][3] == pytest.approx(90 / 43) and fp32["runs"] == ["chosen", "fixed"]
    ax = fig_pass_cost(curves).axes[0]
    free = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(free) == 1 and set(free[0].get_ydata()) == {1.0}
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()

    out = write_report([root], tmp_path / "rep")
    md, page = read(out.out)
    for ext in ("png", "svg"):
        assert (out.out / "figures" / f"pass_cost_curve.{ext}").stat().st_size > 1000
    assert "figures/pass_cost_curve.png" in md and "## Pass-cost curve" in md and ">Pass-cost curve</h2>" in page
    assert page.count("data:image/png;base64,") == 5  # speedup, pass cost, α, histograms, time split
    assert "## Automatic choices" in md
    assert "chosen (asked for dtype auto): γ 3: predicted speedup 1.2" in md
    assert "&lt;b&gt;bold&lt;/b&gt;" in md and "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold" not in page


def test_no_calibration_no_curve(shared_report):
    md, _ = read(shared_report[1].out)
    assert "pass_cost_curve" not in md and not (shared_report[1].out / "figures" / "pass_cost_curve.png").exists()


def test_hardware_is_a_sentence_not_json(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "r1", manifest_extra={"hardware": HW})
    md, page = read(write_report([root], tmp_path / "rep").out)
    setup = md.split("## Setup")[1].split("\n## ")[0]
    assert (
        f"hardware: {describe(HW)}" in setup and "AMD EPYC 7B13, 2 CPUs (avx2, avx512f, avx512_bf16; no AMX)" in setup
    )
    assert "cpu_model" not in md and "cpu_model" not in page and "isa_flags" not in page


def test_speedup_tables_show_the_bootstrap_interval(shared_report):
    """The ratio of sums (details table) with its interval, and the primary measure (geometric mean of per-example
    speedups) in the runs, best-γ and paper tables, each with its own interval where there is one."""
    root, outcome = shared_report
    md, page = read(outcome.out)
    runs = collect([root]).runs
    r = runs[runs["run_id"] == "ende-small-g2-t0"].iloc[0]
    lo, hi = r["speedup_ci95"]
    assert lo <= r["speedup"] <= hi
    text = with_ci(r["speedup"], r["speedup_ci95"])
    assert text == f"{r['speedup']:.2f} [{lo:.2f}, {hi:.2f}]"
    geo = with_ci(r["speedup_geomean"], r["speedup_geomean_ci95"])
    runs_section = md.split("## Runs")[1].split("\n## ")[0]
    assert "ratio-of-sums speedup [95% CI]" in runs_section and f"| {text} |" in runs_section
    assert "| speedup (geomean) [95% CI] |" in runs_section and f"| {geo} |" in runs_section
    best = md.split("## Recommended γ")[1].split("\n## ")[0]
    held_out = f"{r['speedup_geomean']:.2f}"  # every example alike: the other half (ex0) has the same speedup
    assert "its speedup (geomean) [95% CI]" in best and f"| {held_out} (other half, n = 1) |" in best
    paper = md.split("## Compared with the paper")[1].split("\n## ")[0]
    assert f"| {held_out}× (other half, n = 1) |" in paper
    assert f"<td>{text}</td>" in page and f"<td>{geo}</td>" in page
    assert "## Timing warnings" not in md  # a quiet fake sweep: nothing to warn about


def test_suspect_timing_runs_are_listed_at_the_top(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "quiet", gamma=1)
    noisy = make_run(root, "noisy", gamma=2)
    (noisy / "noise_probes.jsonl").write_text(
        "".join(
            json.dumps(p) + "\n"
            for p in (
                {"after": None, "ms": 10.0},
                {"after": "ex0", "ms": 11.0},
                {"after": "ex1", "ms": 30.0},
                {"after": "ex2", "ms": 32.0},
            )
        )
    )
    drifted = make_run(root, "drifted", gamma=4)
    (drifted / "baseline_probes.jsonl").write_text(json.dumps({"ratio": 1.3}) + "\n")
    data = collect([root])
    flags = dict(zip(data.runs["run_id"], data.runs["timing_suspect"]))
    assert flags == {"quiet": False, "noisy": True, "drifted": True}
    noisy_row = data.runs[data.runs["run_id"] == "noisy"].iloc[0]
    assert noisy_row["suspect_timing"] and "the machine was busy" in noisy_row["timing_notes"][0]

    md, page = read(write_report([root], tmp_path / "rep").out)
    assert md.index("## Timing warnings (2 of 3 runs)") < md.index("## Runs") < md.index("## Setup")
    warnings = md.split("## Timing warnings")[1].split("\n## ")[0]
    assert "- noisy: 2 of 4 probes of a one-token target pass took up to 32.0 ms" in warnings
    assert (
        "- drifted: the shared baseline, re-timed before this cell, took 1.30× its stored time; " + DRIFT_CONSEQUENCE
        in warnings
    )
    assert "- quiet" not in warnings
    runs_section = md.split("## Runs")[1].split("\n## ")[0]
    assert runs_section.count("| SUSPECT |") == 2
    assert md.count("1.30×") == 1  # the drift is told once, at the top, not again under Notes
    assert ">Timing warnings (2 of 3 runs)</h2>" in page


def test_gamma_policy_runs_do_not_crash_and_are_shown_apart(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "adaptive-only", gamma=4, policy="adaptive")
    md, _ = read(write_report([root], tmp_path / "rep-policy-only").out)  # no fixed γ at all: no γ axis to draw
    assert "| adaptive-only | ende | small, T=0 | adaptive | 4 |" in md and "Speedup vs γ" not in md

    make_run(root, "heur", gamma=3, policy="heuristic")
    make_run(root, "g1", gamma=1)
    make_run(root, "g2", gamma=2)
    data = collect([root])
    row = data.runs[data.runs["run_id"] == "adaptive-only"].iloc[0]
    assert row["gamma_policy"] == "adaptive" and row["gamma"] == 4 and len(row["accepted_length_histogram"]) == 5
    (best,) = best_gamma_rows(data.runs)
    assert best["gammas"] == [1, 2]  # policy runs are not γ cells
    out = write_report([root], tmp_path / "rep")
    md, _ = read(out.out)
    runs_section = md.split("## Runs")[1].split("\n## ")[0]
    assert "| small, γ=adaptive (≤4), T=0 |" in runs_section and "| small, γ=heuristic (≤3), T=0 |" in runs_section
    section = md.split("## Recommended γ")[1].split("\n## ")[0]
    assert "| heur | ende | small, T=0 | heuristic | 3 |" in section


def test_theory_gamma_beyond_the_measured_range_is_not_recommended(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "g8", gamma=8, speedup=1.2)
    make_run(root, "g10", gamma=10, speedup=1.1)
    data = collect([root])
    (row,) = best_gamma_rows(data.runs)
    alpha, c = data.runs["alpha"].mean(), data.runs["c"].mean()
    optimum = theory.optimal_gamma(alpha, c)
    assert optimum.gamma < 8  # the fake runs' α ≈ 0.78 and c ≈ 0.05 favour a shorter draft than any run
    assert row["thm_gamma"] == optimum.gamma and not row["thm_in_range"]
    assert row["thm_gamma_in_range"] == 8  # the best γ the theorem allows within 8..10
    assert row["thm_factor_in_range"] == pytest.approx(theory.walltime_factor_extended(alpha, 8, c, 1.0))
    md, _ = read(write_report([root], tmp_path / "rep").out)
    section = md.split("## Recommended γ")[1].split("\n## ")[0]
    assert (
        f"| 8 (best within the measured 8–10; the optimum over 1..64, γ = {optimum.gamma}, is extrapolated) |"
        in section
    )


# --------------------------------------------------------------------------- malformed input


def test_malformed_and_partial_results_are_listed_not_fatal(sweep_dir, tmp_path):
    bad = tmp_path / "results" / "broken"
    no_summary = make_run(bad, "no-summary")
    (no_summary / "summary.json").unlink()
    (no_summary / "examples.jsonl").write_text("")  # killed before its first example finished
    missing = make_run(bad, "missing-fields")
    s = json.loads((missing / "summary.json").read_text())
    del s["alpha"], s["speedup"]
    (missing / "summary.json").write_text(json.dumps(s))
    torn_summary = make_run(bad, "torn-summary")
    (torn_summary / "summary.json").write_text('{"run_id": "torn-summary", "alp')
    empty = make_run(bad, "empty")
    (empty / "summary.json").write_text(json.dumps({"schema_version": 1, "run_id": "empty", "n_examples": 0}))
    (empty / "examples.jsonl").write_text("")  # killed before its first example finished
    not_object = make_run(bad, "list-summary")
    (not_object / "summary.json").write_text("[1, 2]")
    torn_line = sweep_dir / "ende-small-g2-t0" / "examples.jsonl"
    with torn_line.open("a") as fh:
        fh.write('{"schema_version": 1, "example_id": "ex9", "bas\n')
    (bad / "checks.json").write_text("not json")
    (sweep_dir / "sweep.json").write_text(
        json.dumps(
            {"sweep_id": "sweep-fake", "cells": [{"cell_id": "ende-small-g2-t0"}, {"cell_id": "ende-small-g8-t0"}]}
        )
    )

    outcome = write_report([tmp_path / "results"], tmp_path / "rep")
    assert outcome.n_runs == 12  # the good runs, the one with a torn line included
    reasons = {Path(s.path).name.split(":")[0]: s.reason for s in outcome.skipped}
    assert "without summary.json" in reasons["no-summary"]
    skipped_text = "\n".join(f"{s.path}: {s.reason}" for s in outcome.skipped)
    for needle in (
        "missing-fields/summary.json: summary.json lacks field(s) alpha, speedup",
        "torn-summary/summary.json: summary.json is not valid JSON",
        "empty/summary.json: no examples measured",
        "list-summary/summary.json: summary.json is a JSON list, not an object",
        "ende-small-g2-t0/examples.jsonl:4: skipped a malformed line",
        "checks.json: checks.json is not valid JSON",
        "ende-small-g8-t0: cell of sweep sweep-fake has no results yet",
    ):
        assert needle in skipped_text, needle
    assert len(outcome.skipped) == 8, skipped_text  # the seven above and the run without summary.json
    md, page = read(outcome.out)
    assert "## Skipped (8)" in md and "lacks field(s) alpha, speedup" in md and "no-summary" in page


def test_undecodable_or_wrongly_shaped_records_are_listed_and_the_command_succeeds(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "good")
    with (make_run(root, "bad-bytes") / "examples.jsonl").open("ab") as fh:
        fh.write(b'{"schema_version": 1, "example_id": "ex\xff\xfe"}\n')  # not UTF-8
    with (make_run(root, "wrong-shape") / "examples.jsonl").open("a") as fh:
        fh.write(json.dumps({"example_id": 5, "baseline": 3}) + "\n")  # valid JSON, not an example record

    result = CliRunner().invoke(app, ["report", str(root), "--out", str(tmp_path / "rep"), "--json"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    payload = json.loads(result.stdout)
    skipped = {Path(s["path"]).parent.name: (Path(s["path"]).name, s["reason"]) for s in payload["skipped"]}
    assert set(skipped) == {"bad-bytes", "wrong-shape"}, payload["skipped"]
    assert skipped["bad-bytes"] == ("examples.jsonl:4", "skipped a line that is not UTF-8 text")
    assert skipped["wrong-shape"][0] == "examples.jsonl:4" and "wrong shape" in skipped["wrong-shape"][1]
    assert payload["runs"] == 3  # each damaged run keeps its good lines
    md, page = read(tmp_path / "rep")
    assert "## Skipped (2)" in md and ">Skipped (2)</h2>" in page and "not UTF-8 text" in md
    data = collect([root])
    assert [len(data.examples[str((root / r).resolve())]) for r in ("bad-bytes", "wrong-shape")] == [N_EXAMPLES] * 2


def test_a_run_whose_records_the_metrics_cannot_use_is_skipped(tmp_path, monkeypatch):
    import specbench.report.collect as collect_module

    root = tmp_path / "runs"
    make_run(root, "good")
    make_run(root, "odd", text="odd")
    real = collect_module.summarize

    def summarize(records, *args, **kwargs):  # values of the right shape that the metrics still choke on
        if records[0]["baseline"]["text"] == "odd":
            raise TypeError("'>' not supported between instances of 'str' and 'int'")
        return real(records, *args, **kwargs)

    monkeypatch.setattr(collect_module, "summarize", summarize)
    outcome = write_report([root], tmp_path / "rep")
    assert outcome.n_runs == 1 and [Path(s.path).parent.name for s in outcome.skipped] == ["odd"]
    assert "cannot be summarised (TypeError" in outcome.skipped[0].reason
    assert not any(n.startswith("odd:") for n in outcome.notes)


def test_results_written_before_the_reorganisation_still_report(tmp_path):
    """Result folders from specbench 0.1 (tests/fixtures/results_v0_1: one run and one sweep) render as before."""
    import shutil

    fixture = Path(__file__).parent / "fixtures" / "results_v0_1"
    shutil.copytree(fixture, tmp_path / "results")
    run, sweep = tmp_path / "results" / "task-draft-g3-t0-0caf17bc", tmp_path / "results" / "old-sweep"
    outcome = write_report([run, sweep], tmp_path / "rep")
    assert outcome.n_runs == 3 and outcome.skipped == [], outcome.skipped
    md, page = read(outcome.out)
    runs_section = md.split("## Runs")[1].split("\n## ")[0]
    for run_id, gamma in (("task-draft-g1-t0", 1), ("task-draft-g2-t0", 2), ("task-draft-g3-t0-0caf17bc", 3)):
        assert f"| draft, γ={gamma}, T=0 | task |" in runs_section and f"| {run_id} |" in runs_section  # label, then id
    assert "sweep old-sweep: 2 cells, 2 complete" in md and "## Recommended γ" in md
    assert "| task-draft-g1-t0 | float32 | 2/2 identical |" in md  # the greedy identity of the old records
    assert page.count("data:image/png;base64,") == 5 and "## Pass-cost curve" in md  # the runs were calibrated
    assert ">Skipped (0)</h2>" in page
    assert not any((tmp_path / "results").rglob(".*.tmp*"))  # the report writes nothing into the results


def test_partial_and_stale_runs_are_used_with_a_note(tmp_path):
    root = tmp_path / "runs"
    for run_id in ("partial", "stale"):
        run = make_run(root, run_id)
        s = json.loads((run / "summary.json").read_text())
        s["complete"], s["n_examples"] = False, 2
        (run / "summary.json").write_text(json.dumps(s))
    lines = (root / "partial" / "examples.jsonl").read_text().splitlines(keepends=True)
    (root / "partial" / "examples.jsonl").write_text("".join(lines[:2]))  # 2 of the 3 planned examples measured
    outcome = write_report([root], tmp_path / "rep")
    assert outcome.n_runs == 2
    assert any(n.startswith("partial: partial run, 2 of 3") for n in outcome.notes), outcome.notes
    # killed between a record's append and the summary's write: the summary is recomputed from the records
    assert any(
        n.startswith("stale: summary.json counts 2 examples but examples.jsonl holds 3") and "recomputed" in n
        for n in outcome.notes
    ), outcome.notes
    assert not any(n.startswith("stale: partial run") for n in outcome.notes)


def test_implausible_verify_cost_is_flagged(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "fine", gamma=2)
    for run_id, cost in (("too-cheap", 0.2), ("too-dear", 3.5)):  # γ = 2: plausible range [0.5, 3]
        run = make_run(root, run_id, gamma=2)
        # the report derives verify cost from the raw times, so scale the recorded verification seconds
        current = json.loads((run / "summary.json").read_text())["verify_cost"]
        path = run / "examples.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for r in rows:
            r["speculative"]["verify_s"] *= cost / current
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = collect([root])
    assert [n.split(":")[0] for n in data.notes] == ["too-cheap", "too-dear"]
    assert "implausible" in data.notes[0]
    assert list(data.runs.sort_values("run_id")["timing_suspect"]) == [False, True, True]


def test_recommendation_skips_suspect_timings(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "g1", gamma=1, speedup=1.2)
    make_run(root, "g2", gamma=2, speedup=1.4)
    run = make_run(root, "g4", gamma=4, speedup=9.0)  # a fluke: its verify cost says the baseline was slowed down
    s = json.loads((run / "summary.json").read_text())
    s["verify_cost"] = 0.1
    (run / "summary.json").write_text(json.dumps(s))
    (row,) = best_gamma_rows(collect([root]).runs)
    assert row["measured_gamma"] == 2 and row["suspect_gammas"] == [4]


def test_nothing_usable_is_a_one_line_error(tmp_path):
    root = tmp_path / "runs"
    run = make_run(root, "only")
    (run / "summary.json").write_text("{")
    with pytest.raises(SpecbenchError, match="no usable runs .*1 skipped"):
        write_report([root], tmp_path / "rep")
    with pytest.raises(SpecbenchError, match="does not exist"):
        write_report([tmp_path / "nope"], tmp_path / "rep")


# --------------------------------------------------------------------------- CLI


def test_cli_report_warns_about_skipped_items(sweep_dir, tmp_path):
    (sweep_dir / "ende-small-g1-t0" / "summary.json").unlink()
    (sweep_dir / "ende-small-g1-t0" / "examples.jsonl").unlink()  # killed before its first example finished
    result = CliRunner().invoke(app, ["report", str(sweep_dir), "--out", str(tmp_path / "rep"), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["runs"] == 11 and len(payload["skipped"]) == 1
    assert "warning: skipped" in result.output and "ende-small-g1-t0" in result.output
    assert (tmp_path / "rep" / "report.html").exists()


def test_cli_report_error_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path / "missing")])
    assert result.exit_code == 1
    assert result.output.strip().startswith("error:") and "Traceback" not in result.output


# --------------------------------------------------------------------------- a report a reader can read


def test_speedup_figure_has_error_bars_and_draws_flagged_cells_hollow(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "g1", gamma=1)
    make_run(root, "g2", gamma=2)
    noisy = make_run(root, "g4", gamma=4)
    (noisy / "noise_probes.jsonl").write_text(
        "".join(
            json.dumps(p) + "\n"
            for p in (
                {"after": None, "ms": 10.0},
                {"after": "ex0", "ms": 11.0},
                {"after": "ex1", "ms": 30.0},
                {"after": "ex2", "ms": 32.0},
            )
        )
    )
    runs = collect([root]).runs
    ax = fig_speedup(runs).axes[0]
    assert ax.containers and all(type(c).__name__ == "ErrorbarContainer" for c in ax.containers)  # the CIs
    hollow = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_markerfacecolor() in ("white", "w")]
    assert [list(ln.get_xdata()) for ln in hollow] == [[4]]  # only the flagged γ
    md, _ = read(write_report([root], tmp_path / "rep").out)
    caption = md.split("![Speedup vs γ](figures/speedup_vs_gamma.png)")[1].split("\n\n")[1]
    assert "Hollow grey markers" in caption and "(g4)" in caption and "95% Student t interval" in caption


def test_quality_axis_reads_bleu_and_versions_read_as_words(tmp_path):
    from specbench.report.figures.detail import fig_quality

    rows = [
        {
            "run_id": "r1",
            "metric": "bleu",
            "baseline": 30.0,
            "speculative": 29.0,
            "baseline_ci": [28.0, 32.0],
            "speculative_ci": [27.0, 31.0],
        }
    ]
    ax = fig_quality(rows).axes[0]
    assert ax.get_ylabel() == "BLEU" and "×100" not in ax.get_title()
    root = tmp_path / "runs"
    make_run(root, "r1")
    md, _ = read(write_report([root], tmp_path / "rep").out)
    assert "- versions: torch x" in md and '{"torch"' not in md


def test_sample_outputs_differ_per_row(tmp_path):
    """A sweep's cells share their baseline, so 'the first example of each run' repeated one row; now each row is
    another example (or another output)."""
    root = tmp_path / "runs"
    for g in (1, 2, 3):
        run = make_run(root, f"g{g}", gamma=g)
        path = run / "examples.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for i, r in enumerate(rows):  # the same three examples, the same outputs, in every run
            r["baseline"]["text"] = r["speculative"]["text"] = f"output of example {i}"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    md, _ = read(write_report([root], tmp_path / "rep").out)
    section = md.split("## Sample outputs")[1].split("\n## ")[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| g")]
    assert len(lines) == 3 and len({ln.split(" | ", 1)[1] for ln in lines}) == 3, lines


def test_a_pair_sweep_is_described_by_its_pairs_and_its_baselines():
    from specbench.report.environment import sweep_line

    doc = {
        "sweep_id": "s",
        "cells": [{}] * 4,
        "complete_cells": ["a"] * 4,
        "grid": {
            "drafts": [],
            "pairs": [["smollm2-135m", "prompt-lookup"], ["qwen", "prompt-lookup"]],
            "gammas": [3],
            "temperatures": [0.0],
            "tasks": ["aclsum"],
        },
        "baselines": ["baselines/a.jsonl", "baselines/b.jsonl", "baselines/c.jsonl", "baselines/d.jsonl"],
    }
    line = sweep_line(doc)
    assert "pairs smollm2-135m:prompt-lookup, qwen:prompt-lookup" in line and "drafts []" not in line
    assert "4 baseline(s), one per target" in line
    old = {**doc, "grid": {**doc["grid"], "pairs": [], "drafts": ["distilled"]}, "baselines": None}
    assert "drafts ['distilled']" in sweep_line(old) and "one baseline per task and temperature" in sweep_line(old)


def test_runs_table_shows_the_primary_measure_and_a_summary_without_records_is_left_out(tmp_path):
    """The runs table's speedup is the geometric mean of per-example speedups. A summary whose records are gone
    cannot be checked against them (issue 41: an emptied examples.jsonl read as a complete run), so it is left out
    with its reason, not shown with its ratio of sums."""
    root = tmp_path / "runs"
    make_run(root, "new", speedup=1.5)
    old = make_run(root, "old", speedup=1.2, gamma=4)
    summary = json.loads((old / "summary.json").read_text())
    for key in [k for k in summary if k.startswith("speedup_geomean")]:
        del summary[key]
    (old / "summary.json").write_text(json.dumps(summary))
    (old / "examples.jsonl").write_text("")  # a run folder without per-example records
    outcome = write_report([root], tmp_path / "rep")
    md = (outcome.out / "report.md").read_text()
    runs = md.split("## Runs")[1].split("\n## ")[0].split("*Every other column")[0]  # the main table only
    assert "| speedup (geomean) [95% CI] |" in runs
    rows = {line.split(" | ")[0]: line for line in runs.splitlines() if line.startswith("| small, γ=")}
    assert list(rows) == ["| small, γ=2, T=0"] and "(ratio of sums)" not in rows["| small, γ=2, T=0"]
    assert [(Path(s.path).name, "holds no usable record" in s.reason) for s in outcome.skipped] == [("old", True)]


def test_a_run_killed_before_its_summary_is_reported_from_its_records(tmp_path):
    """Issue 30 item 12: a real run folder whose summary.json is gone (killed between a record's append and the
    summary's write) is reported with the summary the resume code would rebuild (run_folder.rebuild_summary), equal
    to the one the run wrote, and nothing is written into the folder; a folder without records is still skipped."""
    from helpers import run_args, save_tiny

    models = {"target": save_tiny(tmp_path / "m" / "target", 0), "draft": save_tiny(tmp_path / "m" / "draft", 1)}
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps({"prompt": p, "reference": p}) + "\n" for p in ("the cat sat", "a dog ran")))
    result = CliRunner().invoke(app, list(run_args(models, str(task), tmp_path)), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "res").iterdir()
    written = json.loads((run / "summary.json").read_text())
    (run / "summary.json").unlink()
    before = sorted(p.name for p in run.iterdir())
    outcome = write_report([tmp_path / "res"], tmp_path / "rep")
    assert outcome.n_runs == 1 and outcome.skipped == [], outcome.skipped
    assert any("rebuilt from its 2 record(s)" in n for n in outcome.notes), outcome.notes
    assert sorted(p.name for p in run.iterdir()) == before  # the report wrote nothing into the run folder
    row = collect([tmp_path / "res"]).runs.iloc[0]
    for key in ("run_id", "draft", "task", "gamma", "n_examples", "complete"):
        assert row[key] == written[key], key
    for key in ("speedup", "speedup_geomean", "alpha", "c", "predicted_speedup"):
        assert row[key] == pytest.approx(written[key]), key
    (run / "examples.jsonl").write_text("")  # negative control: no record to rebuild from
    data = collect([tmp_path / "res"])
    assert data.runs.empty and "killed before its first example finished" in data.skipped[0].reason


def test_the_recommended_gamma_is_chosen_on_one_half_and_quoted_on_the_other(tmp_path):
    """No winner's curse in the best-γ and paper tables: γ 2 is 2× on the examples of selection half 0 and 1× on
    half 1, γ 1 is 1.5× on both (40 examples). Choosing on half 0 picks γ 2 and quotes its other half (about 1×),
    not its pooled √2 ≈ 1.41× nor γ 1's 1.5×; without the records (best_gamma_rows(runs)) the old all-examples
    pick, γ 1 at 1.5×, is the negative control."""
    from helpers import varied_run

    from specbench.measure.stats.statistics import half_of

    n = 40
    lucky = tuple(1.0 if half_of(f"ex{i}") == 0 else 2.0 for i in range(n))  # speculative time ×2 on half 1
    root = tmp_path / "runs"
    varied_run(root, "g2", speedup=2.0, gamma=2, spread=lucky)
    varied_run(root, "g1", speedup=1.5, gamma=1, spread=(1.0,) * n)
    data = collect([root])
    [row] = best_gamma_rows(data.runs, data)
    assert row["measured_gamma"] == 2 and abs(row["measured_speedup"] - 1.0) < 0.05 and row["held_out"].n < n
    [pooled] = best_gamma_rows(data.runs)
    assert pooled["measured_gamma"] == 1 and pooled["measured_speedup"] > 1.45
    md = (write_report([root], tmp_path / "rep").out / "report.md").read_text()
    best = md.split("## Recommended γ")[1].split("\n## ")[0]
    assert f"(other half, n = {row['held_out'].n})" in best and "on one half of the examples" in best

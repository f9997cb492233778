"""The methods × categories table (report/leaderboard/method_table.py, issue 43 item 4) on synthetic records whose
figures are known, and `make bench-methods`'s script (bench/methods.py): its arguments, and one run end to end on
tiny random models with one question per category, read back by `specbench report --by category`."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest
from helpers import CORPUS, save_tiny
from helpers import method_record as record
from helpers import method_run as run
from rich.console import Console
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.report.leaderboard.method_table import (
    OVERALL,
    figure_text,
    method_table,
    rich_table,
    write_table,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import methods as bench_methods  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "spec_bench_questions.jsonl"
SPREAD = 0.2  # the log spread of the synthetic ratios


def spread(center: float, n: int) -> list[float]:
    """n ratios center·exp(±SPREAD), symmetric on the log scale: their geometric mean is `center`."""
    return [center * math.exp(SPREAD * (1 if i % 2 else -1)) for i in range(n)]


def rows_of(table, method: str) -> dict[str, dict]:
    return {r["category"]: r for r in table.rows if r["method"] == method}


# --------------------------------------------------------------------------- the pure table


def test_ratios_of_one_give_speedup_one_inside_its_interval_and_a_real_speedup_excludes_one():
    flat = run("flat", [record(f"qa:{i}", 1.0) for i in range(12)])
    noisy = run("noisy", [record(f"qa:{i}", r) for i, r in enumerate(spread(1.0, 12))])
    faster = run("faster", [record(f"qa:{i}", r) for i, r in enumerate(spread(2.0, 12))])  # the negative control
    table = method_table([flat, noisy, faster])
    for name in ("flat", "noisy"):
        qa = rows_of(table, name)["qa"]
        assert qa["n"] == 12 and qa["speedup"] == pytest.approx(1.0)
        assert qa["speedup_low"] <= 1.0 <= qa["speedup_high"]
    assert rows_of(table, "noisy")["qa"]["speedup_high"] > 1.05  # a real interval, not a point
    fast = rows_of(table, "faster")["qa"]
    assert fast["speedup"] == pytest.approx(2.0) and fast["speedup_low"] > 1.0  # the interval can exclude 1


def test_mat_is_tokens_per_target_pass_with_the_prefill_pass_and_its_interval_covers_it():
    same = run("same", [record(f"qa:{i}", 1.0, tokens=30, calls=9) for i in range(10)])
    mixed = run("mixed", [record(f"qa:{i}", 1.0, tokens=30, calls=4 if i % 2 else 9) for i in range(10)])
    table = method_table([same, mixed])
    s, m = rows_of(table, "same")["qa"], rows_of(table, "mixed")["qa"]
    assert s["mat"] == pytest.approx(3.0) and s["mat_low"] == pytest.approx(3.0) == s["mat_high"]  # 30 ÷ (9 + 1)
    assert m["mat"] == pytest.approx(300 / 75) and m["mat_low"] < 4.0 < m["mat_high"]  # Σ tokens ÷ Σ passes


def test_a_missing_category_is_reported_missing_not_zero(tmp_path):
    both = run("both", [record(f"{c}:{i}", 1.5) for c in ("writing", "qa") for i in range(3)])
    one = run("one", [record(f"qa:{i}", 1.5) for i in range(3)])
    table = method_table([both, one])
    gap = rows_of(table, "one")["writing"]
    assert gap["missing"] is True and gap["n"] == 0
    assert all(gap[k] is None for k in ("speedup", "speedup_low", "mat", "mat_high"))  # null, never 0
    assert not rows_of(table, "one")["qa"]["missing"] and figure_text(gap, "speedup") == "missing"
    console = Console(width=200, record=True)
    console.print(rich_table(table))
    writing_line = next(line for line in console.export_text().splitlines() if "writing" in line)
    assert "missing" in writing_line and "1.50×" in writing_line
    csv_path, json_path = write_table(table, tmp_path, "m")
    by_key = {(r["method"], r["category"]): r for r in csv.DictReader(csv_path.open())}
    assert by_key[("one", "writing")]["speedup"] == "" and by_key[("one", "writing")]["missing"] == "True"
    rows = json.loads(json_path.read_text())["rows"]
    assert next(r for r in rows if r["method"] == "one" and r["category"] == "writing")["speedup"] is None


def test_categories_come_from_spec_bench_ids_and_other_tasks_are_one_category_each():
    sb = run("lookup", [record("translation:4", 2.0), record("writing:1", 1.0), record("qa:9", 1.0)])
    acl = run("lookup", [record("D07-1086", 1.2), record("qa-7", 1.2)], task="aclsum")
    table = method_table([acl, sb])
    assert table.categories() == ["writing", "translation", "qa", OVERALL, "aclsum"]  # Spec-Bench's order first
    rows = rows_of(table, "lookup")
    assert rows[OVERALL]["n"] == 3 and rows[OVERALL]["speedup"] == pytest.approx(2 ** (1 / 3))
    assert rows["aclsum"]["n"] == 2 and rows["aclsum"]["speedup"] == pytest.approx(1.2)


def test_few_examples_give_no_interval_and_say_so_and_a_repeated_example_counts_once():
    first = run("lookup", [record(f"qa:{i}", r) for i, r in enumerate(spread(1.3, 4))])
    again = run("lookup", [record("qa:0", 9.0)])
    table = method_table([first, again])
    qa = rows_of(table, "lookup")["qa"]
    assert qa["n"] == 4 and qa["speedup_low"] is None and qa["mat_low"] is None and "4 < 10" in qa["note"]
    assert qa["speedup"] == pytest.approx(1.3)  # the second record of qa:0 (9×) was not read
    assert any("'qa:0' already read" in n for n in table.notes)
    assert method_table([first], min_n=2).rows[0]["speedup_low"] is not None  # --min-n lowers the bar


def test_methods_differing_in_dtype_are_separate_columns():
    table = method_table([run("lookup", [record("qa:1", 1.0)]), run("lookup", [record("qa:1", 2.0)], dtype="float32")])
    assert len(table.methods()) == 2
    console = Console(width=200, record=True)
    console.print(rich_table(table))
    text = console.export_text()
    assert "lookup (dtype=bfloat16)" in text and "lookup (dtype=float32)" in text


def test_report_by_category_with_nothing_usable_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--by", "category"])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: no runs with example records under") and "results/ folder" in line


@pytest.mark.parametrize("given", [["--margin", "0.05"], ["--margin", "0.1"], ["--look", "2"]])
def test_report_by_category_refuses_the_verdict_options_it_would_ignore(tmp_path, given):
    """--margin and --look set --by run's claims; --by category has none, so either (even at its default value) is a
    usage error in one line, before any folder is read (without them the same call reads and finds nothing: exit 1)."""
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--by", "category", *given])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"{given[0]} does not apply to --by category" in line and f"drop {given[0]}" in line


def test_the_table_to_a_folder_that_is_a_file_is_one_line(tmp_path):
    table = method_table([run("lookup", [record("qa:1", 1.0)])])
    (tmp_path / "taken").write_text("")
    with pytest.raises(SpecbenchError, match=r"^cannot write the table to .*taken: .*; pass a writable --out$"):
        write_table(table, tmp_path / "taken")
    assert [p.name for p in write_table(table, tmp_path / "free")] == ["methods.csv", "methods.json"]


# --------------------------------------------------------------------------- the script's arguments


def test_the_script_defaults_and_its_methods():
    args = bench_methods.parse_args([])
    assert (args.limit, args.dtype, args.gamma, args.max_new_tokens) == (2, "bfloat16", "4", "64")
    drafts, skipped = bench_methods.methods(args, suffix_missing=True)
    assert drafts == [
        "prompt-lookup",
        "tree-lookup",
        "tree-lookup:recycle=4,nodes=15",
        "lookahead",
        "bigram",
        "distilled",
    ] + ["lookup+distilled"]
    assert len(skipped) == 1 and "suffix" in skipped[0] and "make setup-suffix" in skipped[0]
    assert bench_methods.methods(args, suffix_missing=False)[0][-1] == "suffix"
    sweep = bench_methods.sweep_args(args, "tree-lookup")
    flags = dict(zip(sweep[1::2], sweep[2::2]))
    assert sweep[0] == "sweep" and sweep[-1] == "--json"
    assert flags["--draft"] == "tree-lookup" and flags["--task"] == "spec-bench,ding-de-en,aclsum"
    assert (flags["--dtype"], flags["--limit"], flags["--temperature"], flags["--max-new-tokens"]) == (
        "bfloat16",
        "2",
        "0",
        "64",
    )
    mine = bench_methods.parse_args(["--draft", "/m/d", "--method", "MODEL", "--method", "lookup+MODEL"])
    assert bench_methods.methods(mine, suffix_missing=True) == (["/m/d", "lookup+/m/d"], [])
    own = bench_methods.parse_args(["--max-new-tokens", "task", "--dtype", "float32", "--limit", "10"])
    assert "--max-new-tokens" not in bench_methods.sweep_args(own, "bigram")


@pytest.mark.parametrize(
    "bad",
    [
        ["--limit", "0"],
        ["--dtype", "fp8"],
        ["--max-new-tokens", "many"],
        ["--gamma", "1-8"],
        ["--questions", "/nonexistent/question.jsonl"],
    ],
)
def test_bad_script_arguments_are_a_usage_error(bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_methods.parse_args(bad)
    assert exit_.value.code == 2
    assert bad[0] in capsys.readouterr().err


def test_a_dry_run_prints_one_sweep_per_method_and_runs_nothing(tmp_path, capsys):
    out = bench_methods.main(["--dry-run", "--results-dir", str(tmp_path / "r"), "--method", "bigram"])
    printed = capsys.readouterr().out
    assert out["methods"] == ["bigram"] and printed.count("specbench sweep") == 1 and "--dtype bfloat16" in printed
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- end to end on tiny models


def test_the_script_runs_every_category_on_tiny_models_and_report_draws_the_same_table(tmp_path, capsys):
    target, draft = save_tiny(tmp_path / "t", 0), save_tiny(tmp_path / "d", 1)
    spec = tmp_path / "sb.yaml"  # the fixture's questions as a spec-bench source (ids "<category>:<qid>")
    spec.write_text(
        f"name: sb\nsource: {{type: spec-bench, path: {FIXTURE}}}\nfields: {{prompt: prompt}}\n"
        "template: '{prompt}'\nturns: turns\nreference: reference\nmetric: none\nmax_new_tokens: 4\n"
    )
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in CORPUS[:2]))
    results = tmp_path / "res"
    args = ["--target", target, "--draft", draft, "--results-dir", str(results)]
    args += ["--tasks", f"{spec},{other}", "--limit", "1", "--max-new-tokens", "4", "--gamma", "2"]
    args += ["--dtype", "float32"]
    out = bench_methods.main([*args, "--method", "prompt-lookup", "--method", "MODEL"])
    assert "methods × categories" in capsys.readouterr().out
    table = out["table"]
    assert {r["method"] for r in table.rows} == {"prompt-lookup", draft}
    cats = table.categories()
    assert cats[:-2] == ["writing", "math", "translation", "summarization", "qa", "math_reasoning", "rag"]
    assert cats[-2:] == [OVERALL, "other"]  # one question per category, the overall row, the JSONL task
    assert all(r["n"] == 1 and not r["missing"] and r["mat"] >= 1.0 for r in table.rows if r["category"] != OVERALL)
    assert [p.name for p in out["files"]] == ["methods-float32.csv", "methods-float32.json"]
    board = out["leaderboard"]  # prompt lookup is Spec-Bench's PLD, a draft model its SpS
    assert {m: b["published_name"] for m, b in board["matched"].items()} == {"prompt-lookup": "PLD", draft: "SpS"}
    assert json.loads(out["files"][1].read_text())["leaderboard"]["matched"].keys() == board["matched"].keys()
    again = bench_methods.main([*args, "--method", "prompt-lookup"])  # a rerun resumes: the same records and figures
    assert again["table"].rows == [r for r in table.rows if r["method"] == "prompt-lookup"]
    folder = str(tmp_path / "m")
    shown = CliRunner().invoke(app, ["report", str(results), "--by", "category", "--json", "--out", folder])
    assert shown.exit_code == 0, shown.output

    def key(r):
        return (r["method"], r["category"])

    assert sorted(json.loads(shown.stdout)["rows"], key=key) == sorted(table.rows, key=key)  # folders in any order
    written = json.loads((tmp_path / "m" / "methods.json").read_text())["rows"]  # --out: the same table, in files
    assert sorted(map(key, written)) == sorted(map(key, table.rows)) and (tmp_path / "m" / "methods.csv").is_file()
    bad = CliRunner().invoke(app, ["report", str(results), "--by", "method"])
    assert bad.exit_code == 2 and "--by" in bad.output

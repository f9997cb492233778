"""The hostile battery of issue 41, rerun in one command, with its counts.

    python bench/hostile.py [--only WORD] [--json]

A hostile probe found results that looked right and were not (a deleted record file exported as a complete run, a
hand-edited speedup believed, a summary linked to /etc/passwd parsed), tracebacks and usage errors that exited 1.
This script plants each defect again in a fresh results folder of tiny, hand-made runs (no model is loaded), runs
every output over it (`report --json`, `export`, `export --examples`) and the listed bad command lines, and prints

    cases N: wrong-but-plausible W, tracebacks T, wrong exit codes E     (the goal: W = T = E = 0)

then one line per failing case. A case is wrong-but-plausible when it exits 0 and its output still holds what the
defect planted (the run it should leave out, the figure it should recompute); a traceback is any "Traceback" in its
output or an exception other than the command's own exit; a wrong exit code is any code but the expected one (2 for
a bad command line). The tests in tests/test_hostile_readers.py and tests/test_cli_errors.py check the same cases
one by one; the weight-digest and huge-prompt cases need a model and live in tests/test_model_cache.py and
tests/test_hostile.py. Nothing is timed here.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from specbench.cli import app
from specbench.measure.stats.metric_units import json_safe
from specbench.measure.stats.metrics import summarize

N = 3  # examples per run
SPEEDUP = 1.5  # every example's, so every run's


def engine(gamma: int, decode_s: float) -> dict:
    """An EngineRecord: 20 tokens; a speculative one (gamma > 0) made of 8 steps accepting 0..γ."""
    lengths = [min(gamma, k % (gamma + 2)) for k in range(8)] if gamma else []
    trials = sum(min(a + 1, gamma) for a in lengths)
    return {
        "text": "out",
        "token_ids": list(range(20)),
        "n_tokens": 20,
        "stop_reason": "length",
        "prefill_s": 0.01,
        "decode_s": decode_s,
        "target_calls": len(lengths) if gamma else 19,
        "draft_calls": gamma * len(lengths),
        "drafted": gamma * len(lengths),
        "accepted": sum(lengths),
        "trials": trials,
        "accept_lengths": lengths,
        "draft_lengths": [gamma] * len(lengths),
        "expected_accept": [0.6] * trials,
        "draft_s": 0.3 * decode_s if gamma else 0.0,
        "verify_s": 0.6 * decode_s if gamma else 0.0,
    }


def a_run(root: Path, run_id: str) -> Path:
    """A run folder as the runner writes it (manifest.json, examples.jsonl, summary.json from the records)."""
    run = root / run_id
    run.mkdir(parents=True)
    records = [
        {
            "schema_version": 1,
            "example_id": f"ex{i}",
            "prompt_tokens": 7,
            "reference": None,
            "baseline": engine(0, 1.0),
            "speculative": engine(2, 1.01 / SPEEDUP - 0.01),
            "identical": True,
            "first_divergence": None,
        }
        for i in range(N)
    ]
    config = {"target": "tiny", "draft": "small", "task": "t", "gamma": 2, "limit": N, "seed": 0}
    config["sampling"] = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    task = {"name": "t", "n_examples": N, "example_ids": [r["example_id"] for r in records]}
    manifest = {"schema_version": 1, "run_id": run_id, "config": config, "max_new_tokens": 20, "task": task}
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {"schema_version": 1, "run_id": run_id, "target": "tiny", "draft": "small", "engine": "specbench"}
    summary |= {"task": "t", "gamma": 2, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0}
    summary |= {"max_new_tokens": 20, "complete": True, **summarize(records, 2, True), "quality": None}
    (run / "summary.json").write_text(json.dumps(json_safe(summary)))
    return run


def edit(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


# --------------------------------------------------------------------------- the planted defects


def link_summary_to_a_file(root: Path, run: Path) -> None:
    (root.parent / "passwd").write_text('{"run_id": "secret", "n_examples": 5, "speedup": 9.9}')
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to(root.parent / "passwd")


def link_summary_to_a_run(root: Path, run: Path) -> None:
    outside = a_run(root.parent / "outside", "foreign")
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to(outside / "summary.json")


def link_manifest(root: Path, run: Path) -> None:
    outside = a_run(root.parent / "outside", "foreign")
    (run / "manifest.json").unlink()
    (run / "manifest.json").symlink_to(outside / "manifest.json")


def deep(name: str) -> Callable[[Path, Path], None]:
    return lambda root, run: (run / name).write_text("[" * 100_000 + "]" * 100_000)


def records(damage: str) -> Callable[[Path, Path], None]:
    def plant(root: Path, run: Path) -> None:
        path = run / "examples.jsonl"
        kept = lines_of(path)
        path.unlink()
        if damage == "empty":
            path.write_text("")
        elif damage == "folder":
            path.mkdir()
        elif damage == "duplicate":
            path.write_text("".join([*kept, kept[0]]))
        elif damage == "foreign id":
            path.write_text("".join(kept[:2]) + kept[2].replace('"ex2"', '"zz"'))
        elif damage == "zero time":
            rows = [json.loads(line) for line in kept]
            rows[0]["speculative"].update(prefill_s=0.0, decode_s=0.0, draft_s=0.0, verify_s=0.0)
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    return plant


@dataclass
class Defect:
    name: str
    plant: Callable[[Path, Path], None]  # (results folder, the damaged run)
    runs: int  # usable runs every output must show (the damaged one and a good one)
    words: str  # what every output must list as skipped or recomputed
    geomean: float | None = None  # the speedup_geomean the export must show for the damaged run
    n_examples: int | None = None  # the example rows `export --examples` must show


DEFECTS = [
    Defect("summary linked to /etc/passwd", link_summary_to_a_file, 1, "a symbolic link"),
    Defect("summary linked to an outside run", link_summary_to_a_run, 1, "a symbolic link"),
    Defect("manifest linked to an outside run", link_manifest, 1, "a symbolic link"),
    Defect("100,000-deep summary.json", deep("summary.json"), 1, "nested more than"),
    Defect("100,000-deep manifest.json", deep("manifest.json"), 1, "nested more than"),
    Defect("100,000-deep sweep.json", deep("sweep.json"), 2, "nested more than"),
    Defect("examples.jsonl emptied", records("empty"), 1, "no usable record"),
    Defect("examples.jsonl deleted", records("deleted"), 1, "no usable record"),
    Defect("examples.jsonl a folder", records("folder"), 1, "not a regular file"),
    Defect("a duplicated record", records("duplicate"), 2, "a second record", SPEEDUP, 2 * N),
    Defect("an example the manifest does not list", records("foreign id"), 2, "does not list", SPEEDUP, 2 * N - 1),
    Defect("a record timed at 0 s", records("zero time"), 2, "in 0 seconds", SPEEDUP, 2 * N - 1),
    Defect("speedup_geomean 42 by hand", lambda r, run: edit(run / "summary.json", speedup_geomean=42), 2,
           "speedup_geomean 42", SPEEDUP),
    Defect('gamma "xyz" by hand', lambda r, run: edit(run / "summary.json", gamma="xyz"), 1, "gamma is 'xyz'"),
]  # fmt: skip

RUN = ["run", "--target", "t", "--draft", "prompt-lookup", "--task", "t.jsonl"]
SWEEP = ["sweep", "--target", "t", "--draft", "prompt-lookup", "--task", "t.jsonl", "--gamma", "1"]
DISTILL = ["distill", "--target", "t", "--out", "d"]
USAGE = [
    [*RUN, "--run-id", "../escape"],
    [*RUN, "--run-id", "/abs"],
    [*RUN, "--run-id", ".."],
    [*RUN, "--run-id", ""],
    [*RUN, "--run-id", "a" * 300],
    [*SWEEP, "--sweep-id", "../x"],
    ["verify", "--n-samples", "0"],
    ["verify", "--alt-tv", "nan"],
    ["verify", "--length", "0"],
    ["verify", "--gamma", "1,,3"],
    [*DISTILL, "--preset", "bogus"],
    [*DISTILL, "--steps", "-1"],
    [*DISTILL, "--max-session-steps", "0"],
    [*RUN, "--limit", "1", "--batch-size", "5"],
    [*SWEEP, "--gpus-per-cell", "-1"],
    ["run", "--target", "", "--draft", "prompt-lookup"],
]


# --------------------------------------------------------------------------- running and judging


@dataclass
class Outcome:
    case: str
    verdict: str  # ok, wrong-but-plausible, traceback, wrong exit code
    detail: str = ""


def invoke(args: list[str]):
    result = CliRunner().invoke(app, args)
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    return result, crashed or "Traceback" in result.output


def last_line(result) -> str:
    """What a crashed command said last (CliRunner keeps an uncaught exception apart from the output)."""
    return (result.output.strip().splitlines() or [repr(result.exception)])[-1][:200]


def export_rows(stdout: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(stdout))) if stdout.strip() else []


def judge_output(defect: Defect, output: str, root: Path, work: Path) -> Outcome:
    """One output (report, export, export --examples) over a results folder holding the defect and a good run."""
    case = f"{output}: {defect.name}"
    if output == "report":
        result, crashed = invoke(["report", str(root), "--out", str(work / "rep"), "--json"])
    else:
        result, crashed = invoke(["export", str(root), *(["--examples"] if output.endswith("examples") else [])])
    if crashed:
        return Outcome(case, "traceback", last_line(result))
    if result.exit_code != 0:
        return Outcome(case, "wrong exit code", f"{result.exit_code}: {result.output.strip()[:200]}")
    wrong = []
    if output == "report":
        payload = json.loads(result.stdout)
        listed = json.dumps(payload["skipped"] + payload["notes"], ensure_ascii=False)
        if payload["runs"] != defect.runs:
            wrong.append(f"{payload['runs']} runs, not {defect.runs}")
    else:
        rows, listed = export_rows(result.stdout), result.stderr
        want = defect.n_examples if output.endswith("examples") and defect.n_examples else None
        count = len({r["run_id"] for r in rows}) if output.endswith("examples") else len(rows)
        if count != defect.runs:
            wrong.append(f"{count} runs, not {defect.runs}")
        if want is not None and len(rows) != want:
            wrong.append(f"{len(rows)} example rows, not {want}")
        if defect.geomean and not output.endswith("examples"):
            got = {float(r["speedup_geomean"]) for r in rows if r["run_id"] == "damaged"}
            if got and abs(got.pop() / defect.geomean - 1) > 1e-6:
                wrong.append(f"speedup_geomean is not the records' {defect.geomean}")
    if defect.words not in listed:
        wrong.append(f"does not list {defect.words!r}")
    return Outcome(case, "wrong-but-plausible" if wrong else "ok", "; ".join(wrong))


def judge_usage(args: list[str], work: Path) -> Outcome:
    import os

    case = " ".join(a if len(a) < 40 else a[:12] + "…" for a in args) or "(empty)"
    before = os.getcwd()
    os.chdir(work)
    try:
        result, crashed = invoke(args)
    finally:
        os.chdir(before)
    if crashed:
        return Outcome(case, "traceback", last_line(result))
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    if result.exit_code != 2 or len(errors) != 1:
        return Outcome(case, "wrong exit code", f"{result.exit_code}: {result.output.strip()[:200]}")
    return Outcome(case, "ok")


def battery(only: str = "") -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, defect in enumerate(DEFECTS):
            for output in ("report", "export", "export --examples"):
                if only and only not in f"{output}: {defect.name}":
                    continue
                work = Path(tmp) / f"{i}-{output.replace(' ', '')}"
                root = work / "results" / "sweep"  # a sweep folder, so a sweep.json belongs there
                damaged, _ = a_run(root, "damaged"), a_run(root, "good")
                (root / "sweep.json").write_text(json.dumps({"sweep_id": "sweep", "cells": []}))
                defect.plant(root, damaged)
                outcomes.append(judge_output(defect, output, root, work))
                shutil.rmtree(work, ignore_errors=True)
        for j, args in enumerate(USAGE):
            if only and only not in " ".join(args):
                continue
            work = Path(tmp) / f"usage-{j}"
            work.mkdir()
            outcomes.append(judge_usage(args, work))
    return outcomes


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="Run the cases whose name holds this text.")
    parser.add_argument("--json", action="store_true", help="Print the counts and failing cases as JSON.")
    args = parser.parse_args(argv)
    outcomes = battery(args.only)
    counts = {"cases": len(outcomes)}
    for verdict in ("wrong-but-plausible", "traceback", "wrong exit code"):
        counts[verdict] = sum(o.verdict == verdict for o in outcomes)
    failing = [o.__dict__ for o in outcomes if o.verdict != "ok"]
    if args.json:
        print(json.dumps({**counts, "failing": failing}, ensure_ascii=False))
    else:
        print(
            f"cases {counts['cases']}: wrong-but-plausible {counts['wrong-but-plausible']}, tracebacks "
            f"{counts['traceback']}, wrong exit codes {counts['wrong exit code']}"
        )
        for o in failing:
            print(f"  {o['verdict']}: {o['case']}: {o['detail']}")
    return {**counts, "failing": failing}


if __name__ == "__main__":
    main()

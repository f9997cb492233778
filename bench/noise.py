"""`make bench-noise`: the noise alarm's false-alarm and detection rates, and a real hog run.

`python bench/noise.py record --runs 20` (on a quiet machine: nothing else running) runs `specbench run` idle that
many times and ships what it saw as specbench/measure/machine/noise_idle.json: each run's probe series (ms, in order),
its paired repeat speedups and steal share, the machine's name, and the thresholds per probe count that give ≤ 1 %
false alarms per run (measure/noise.thresholds_from_idle). Without that file the fixed default rule applies.

`python bench/noise.py` (make bench-noise): from the shipped series, the false-alarm rate per probe count with each
run's series left out of the table that judges it, and the share of runs with a sustained 1.3× slowdown flagged;
then two real runs: of the same small configuration, back to back, each in its own `specbench run`
process: a control on the idle machine, and one during which this script starts a CPU hog
(one busy-loop process per core) a few seconds into the measurement and stops it when the
run ends. The goal: the hog run's summary says `suspect_timing: true` (and its output prints
the warning line); the control says false. The detector itself is tested deterministically
with a fake clock in tests/test_measure.py; this is the same check on real hardware.
`python bench/noise.py contention --runs 10 --duty 0.05,0.1,0.2,0.3`: idle runs alternated with runs under a steady
competitor (one process spinning that share of the time, from the start of the run to its end: a slowdown the probes
cannot see against the run's own quietest stretch), for the contention rule's detection rate at each strength and its
false-alarm rate (measure/noise.contention); every run appended to --out as it ends, and a rerun with that --out
resumes. `--idle-only` appends --runs idle runs and no competitor runs (the false-alarm bound needs many more idle
runs than detection needs hogged ones); rerun it to add more.
Usage: python bench/noise.py [check|record|contention] [--limit 6] [--task ding-de-en] [--hog-after SECONDS]
       [--runs N] [--duty 0.3[,0.1,...]] [--idle-only] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def busy_loop(duty: float = 1.0, period: float = 0.01) -> None:
    """Spin `duty` of every `period` seconds and sleep the rest, forever: a competitor of known strength."""
    while True:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < duty * period:
            pass
        if duty < 1.0:
            time.sleep((1.0 - duty) * period)


def specbench_run(
    results: Path, args, hog_after: float | None, processes: int | None = None, duty: float = 1.0
) -> tuple[dict, str, float]:
    """One `specbench run` in a subprocess; from `hog_after` s to its end a hog of `processes` busy processes (one
    per core by default), each spinning `duty` of the time."""
    cmd = [
        sys.executable,
        "-m",
        "specbench.cli",
        "run",
        "--task",
        args.task,
        "--limit",
        str(args.limit),
        "--draft",
        "prompt-lookup",
        "--gamma",
        "3",
        "--repeats",
        "2",
        "--results-dir",
        str(results),
        "--json",
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hogs: list[mp.Process] = []
    if hog_after is not None:
        deadline = time.time() + hog_after
        while proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if proc.poll() is None:
            count = processes or os.cpu_count() or 1
            hogs = [mp.Process(target=busy_loop, args=(duty,), daemon=True) for _ in range(count)]
            for h in hogs:
                h.start()
    out, err = proc.communicate()
    for h in hogs:
        h.terminate()
        h.join()
    if proc.returncode != 0:
        raise SystemExit(
            f"specbench run failed ({proc.returncode}): {err.strip().splitlines()[-1] if err.strip() else ''}"
        )
    return json.loads(out), err, time.perf_counter() - t0


COUNTS = [6, 11, 16, 21, 31, 41]  # probe counts (examples + 1) the table covers


def idle_record(results: Path, args) -> dict:
    """One idle `specbench run` → its probe series, paired repeat speedups and steal share."""
    from specbench.measure.machine import noise
    from specbench.measure.results.records import read_examples, read_records

    summary, _, secs = specbench_run(results, args, None)
    run = results / summary["run_id"]
    rows = read_records(run / "noise_probes.jsonl")
    records = read_examples(run / "examples.jsonl")
    return {
        "probes_ms": [r["ms"] for r in rows],
        "paired_speedups": noise.paired_speedups(records),
        "steal_share": noise.steal_share(rows),
        "seconds": secs,
        "hardware": summary.get("hardware"),
    }


def record(args) -> None:
    """`record`: idle runs → specbench/measure/machine/noise_idle.json (atomic), with thresholds and rates."""
    from specbench.files import atomic_write_json
    from specbench.measure.machine import noise

    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    if load > 0.5 * cores:
        print(
            f"warning: load average {load:.1f} on {cores} cores: this machine is not idle; the series will be too slow"
        )
    root = Path(tempfile.mkdtemp(prefix="specbench-idle-"))
    runs = []
    try:
        for i in range(args.runs):
            runs.append(idle_record(root / f"r{i}", args))
            print(f"idle run {i + 1}/{args.runs}: {len(runs[-1]['probes_ms'])} probes, {runs[-1]['seconds']:.0f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    series = [r["probes_ms"] for r in runs]
    table = noise.thresholds_from_idle(series, COUNTS)
    doc = {
        "machine": runs[0]["hardware"],
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": f"specbench run --task {args.task} --limit {args.limit} --draft prompt-lookup --gamma 3 --repeats 2",
        "load_average_at_start": load,
        "false_alarm_target": noise.FALSE_ALARM,
        "thresholds": {str(m): t for m, t in table.items()},
        "rates": rates(series, table),
        "held_out_idle_runs_flagged": held_out_flags(series),
        "runs": runs,
    }
    atomic_write_json(noise.IDLE_FILE, doc)
    print(f"wrote {noise.IDLE_FILE}")
    print_rates(doc)


def held_out_flags(series: list[list[float]]) -> tuple[int, int]:
    """(idle runs flagged, runs judged): each recorded run judged as it was, at its own probe count, by a table built
    from the other runs only (leave-one-out): the plain count behind 'false alarms ≤ 1 in 20 idle runs'."""
    from specbench.measure.machine import noise

    flagged = judged = 0
    for i, s in enumerate(series):
        rest = series[:i] + series[i + 1 :]
        table = noise.thresholds_from_idle(rest, [len(s)], windows=1000) if len(rest) >= 2 else {}
        if len(s) in table:
            judged += 1
            flagged += bool(noise.sustained_by_table(s, table))
    return flagged, judged


def rates(series: list[list[float]], table: dict[int, float]) -> dict:
    """Per probe count (block-bootstrap estimates): false alarms with each series left out of the table that judges
    it, and the share of runs with a sustained 1.3× slowdown from between a quarter and half-way on that are
    flagged. With short recorded series the left-out one is resampled from itself, which overstates its spikes'
    clustering: held_out_flags is the plain count."""
    from specbench.measure.machine import noise

    out = {}
    for m in table:
        fa = []
        for i in range(len(series)):
            rest = series[:i] + series[i + 1 :]
            held = noise.thresholds_from_idle(rest, [m], windows=1000) if len(rest) >= 2 else table
            if m in held and len(series[i]) >= noise.BLOCK:
                fa.append(noise.false_alarm_rate([series[i]], held, m))
        out[str(m)] = {
            "false_alarm_rate": sum(fa) / len(fa) if fa else None,
            "detection_rate_1.3x": noise.detection_rate(series, table, m, 1.3),
        }
    return out


def print_rates(doc: dict) -> None:
    print(f"idle series: {len(doc['runs'])} runs recorded {doc['recorded']} on {doc['machine']}")
    for m, r in doc["rates"].items():
        fa, det = r["false_alarm_rate"], r["detection_rate_1.3x"]
        print(
            f"{m:>3} probes: threshold {float(doc['thresholds'][m]):.3f}×  false alarms "
            f"{'—' if fa is None else f'{100 * fa:.2f} %'} (goal ≤ 1 %)  sustained 1.3× flagged {100 * det:.1f} % "
            f"(goal ≥ 90 %)"
        )
    if doc.get("held_out_idle_runs_flagged"):
        k, n = doc["held_out_idle_runs_flagged"]
        print(f"recorded idle runs flagged, each judged by a table built without it: {k} of {n} (goal ≤ 1 in 20)")
    steal = [r["steal_share"] for r in doc["runs"] if r.get("steal_share") is not None]
    print(f"steal time: {'not given by this kernel' if not steal else f'max {100 * max(steal):.2f} % of CPU'}")


def contention_row(label: str, duty: float | None, round_: int, summary: dict, rows: list[dict], secs: float) -> dict:
    """One contention run's figures: its probes' median, the contention rule's worst stretch, the verdict."""
    import statistics

    from specbench.measure.machine import noise

    return {
        "round": round_,
        "label": label,
        "duty": duty,
        "probe_ms": statistics.median(r["ms"] for r in rows),
        "contention": noise.sustained_contention(noise.contention(rows)),
        "flagged": bool(summary["suspect_timing"]),
        "notes": summary.get("timing_notes") or [],
        "speedup": summary["speedup"],
        "seconds": secs,
        "hardware": summary.get("hardware"),
    }


def dose_response(runs: list[dict]) -> dict:
    """Per competitor strength: the probe slowdown (each hogged run ÷ the idle run just before it), and how many
    hogged runs the alarm flagged; for the idle runs, how many it flagged (false alarms); each share with its
    Clopper–Pearson 95 % interval (scipy.stats.binomtest)."""
    import statistics

    from scipy import stats

    def share(k: int, n: int) -> dict:
        ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact") if n else None
        return {"k": k, "n": n, "rate": k / n if n else None, "ci95": [ci.low, ci.high] if ci else None}

    idle = [r for r in runs if r["label"] == "idle"]
    out = {"idle": share(sum(r["flagged"] for r in idle), len(idle)), "duties": {}}
    out["idle"]["contention_max"] = max((r["contention"] or 0.0 for r in idle), default=None)
    for duty in sorted({r["duty"] for r in runs if r["label"] == "hog"}):
        slowdowns, flags, shares = [], [], []
        for before, run in zip(runs, runs[1:]):
            if run["label"] == "hog" and run["duty"] == duty:
                flags.append(run["flagged"])
                shares.append(run["contention"] or 0.0)
                if before["label"] == "idle":
                    slowdowns.append(run["probe_ms"] / before["probe_ms"])
        out["duties"][str(duty)] = share(sum(flags), len(flags)) | {
            "slowdown_median": statistics.median(slowdowns) if slowdowns else None,
            "slowdown_range": [min(slowdowns), max(slowdowns)] if slowdowns else None,
            "contention_min": min(shares) if shares else None,
        }
    return out


def print_dose_response(doc: dict) -> None:
    from specbench.measure.machine import noise

    def cp(s: dict) -> str:
        return "—" if s["ci95"] is None else f"{100 * s['ci95'][0]:.0f}–{100 * s['ci95'][1]:.0f} %"

    i = doc["idle"]
    print(f"alarm: sustained contention above {100 * noise.CONTENTION_LIMIT:.0f} % of the run's threads, or the probes")
    print("competitor duty  runs  probe slowdown (median, range)  flagged  rate   95 % CP     contention min")
    print(
        f"idle             {i['n']:4d}  {'—':30s}  {i['k']:7d}  {100 * (i['rate'] or 0):4.0f} %  {cp(i):10s}  "
        f"(idle max {100 * (i['contention_max'] or 0):.1f} %)"
    )
    for duty, d in doc["duties"].items():
        lo, hi = d["slowdown_range"] or (float("nan"), float("nan"))
        slow = f"{d['slowdown_median']:.3f}× [{lo:.3f}, {hi:.3f}]" if d["slowdown_median"] else "—"
        print(
            f"{100 * float(duty):5.0f} %          {d['n']:4d}  {slow:30s}  {d['k']:7d}  {100 * d['rate']:4.0f} %  "
            f"{cp(d):10s}  {100 * d['contention_min']:.1f} %"
        )


def contention_plan(runs: list[dict], duties: list[float], rounds: int, idle_only: bool) -> list[tuple]:
    """(round, label, duty) of every run to do: per round, each strength (order rotated by round) as an idle run then
    a hogged one; `idle_only`: `rounds` idle runs numbered after the rounds `runs` already holds (the false-alarm
    bound needs many more idle runs than detection needs hogged ones)."""
    if idle_only:
        first = 1 + max((r["round"] for r in runs), default=-1)
        return [(first + i, "idle", None) for i in range(rounds)]
    return [
        (i, label, duty)
        for i in range(rounds)
        for duty in duties[i % len(duties) :] + duties[: i % len(duties)]
        for label in ("idle", "hog")
    ]


def contended(args) -> None:
    """`python bench/noise.py contention --duty 0.05,0.1,0.2,0.3`: a dose-response. Each round runs, for every
    competitor strength in turn (the order rotated by round), an idle run and then a run beside a steady competitor
    (one process spinning that share of every 10 ms from the run's start to its end), so every hogged run has an idle
    neighbour that saw the VM's same spell. Each finished run is appended to --out (JSON lines; a rerun with the
    same --out resumes after the runs it holds). The goals are the issue's: idle runs flagged ≤ 5 % (upper CP bound
    ≤ 10 %), detection ≥ 90 % at a 1.15× sustained slowdown."""
    from specbench.files import append_jsonl
    from specbench.measure.results.records import read_records

    duties = args.duty
    out = Path(args.out or time.strftime("results/bench-contention-%Y%m%d-%H%M%S.jsonl"))
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = read_records(out) if out.exists() else []
    other = {(r.get("task", args.task), r.get("limit", args.limit)) for r in runs} - {(args.task, args.limit)}
    if other:  # a usage error: exit 2 with one line, as argparse's own
        task, limit = other.pop()
        print(
            f"error: {out} holds runs of --task {task} --limit {limit}; resume with those or another --out",
            file=sys.stderr,
        )
        raise SystemExit(2)
    plan = contention_plan(runs, duties, args.runs, args.idle_only)
    done = {(r["round"], r["label"], r["duty"] if r["label"] == "hog" else r.get("for_duty")) for r in runs}
    if done:
        print(f"resuming: {len(runs)} runs already in {out}")
    root = Path(tempfile.mkdtemp(prefix="specbench-contention-"))
    try:
        for i, label, duty in plan:
            if (i, label, duty) in done:
                continue
            results = root / f"{label}{i}-{duty}"
            hog = label == "hog"
            summary, _, secs = specbench_run(results, args, 0.0 if hog else None, 1, duty if hog else 1.0)
            rows = read_records(results / summary["run_id"] / "noise_probes.jsonl")
            row = contention_row(label, duty if hog else None, i, summary, rows, secs)
            row |= {"for_duty": duty, "task": args.task, "limit": args.limit}
            append_jsonl(out, row)
            runs.append(row)
            share = "—" if row["contention"] is None else f"{100 * row['contention']:.1f} %"
            print(
                f"round {i} {label}{'' if not hog else f' {100 * duty:.0f} %'}: probe median {row['probe_ms']:.1f} ms"
                f"  contention {share}  flagged {row['flagged']}  speedup {row['speedup']:.3f}  ({secs:.0f} s)",
                flush=True,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_dose_response(dose_response(runs))
    print(f"hardware: {runs[0]['hardware']}; rows: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=["check", "record", "contention"], default="check")
    parser.add_argument(
        "--duty",
        default="0.3",
        help="contention: share of the time the competitor spins (a comma list: a dose-response)",
    )
    parser.add_argument(
        "--out", default=None, help="contention: append every run's figures to this JSON-lines file (reruns resume)"
    )
    parser.add_argument("--runs", type=int, default=None, help="record: idle runs (20); contention: pairs (10)")
    parser.add_argument(
        "--idle-only",
        action="store_true",
        help="contention: --runs idle runs only, appended to --out after its rounds (false alarms; no competitor)",
    )
    parser.add_argument("--task", default="ding-de-en")
    parser.add_argument("--limit", type=int, default=None, help="examples per run (record: 20, check: 6)")
    parser.add_argument(
        "--hog-after",
        type=float,
        default=None,
        help="seconds into the hog run to start the hog (default: 60 %% of the control run's duration, "
        "i.e. after loading and calibration, half-way through the examples)",
    )
    args = parser.parse_args()
    if args.mode == "record":
        args.limit = args.limit or 20
        args.runs = args.runs or 20
        record(args)
        return
    if args.mode == "contention":
        try:
            args.duty = [float(d) for d in str(args.duty).split(",")]
        except ValueError:
            parser.error(f"--duty takes shares of the time, comma-separated, e.g. 0.1,0.3 (got {args.duty!r})")
        if not all(0.0 < d <= 1.0 for d in args.duty):
            parser.error(f"--duty shares must be in (0, 1] (got {args.duty})")
        args.runs = 10 if args.runs is None else args.runs
        if args.runs < 1:
            parser.error(f"--runs must be at least 1 (got {args.runs})")
        args.limit = args.limit or 6
        contended(args)
        return
    args.limit = args.limit or 6
    from specbench.measure.machine import noise

    try:
        print_rates(json.loads(noise.IDLE_FILE.read_text()))
    except (OSError, ValueError, KeyError):
        print(f"no idle series shipped ({noise.IDLE_FILE}); record them with: python bench/noise.py record --runs 20")
    root = Path(tempfile.mkdtemp(prefix="specbench-noise-"))
    try:
        rows = []
        for label in ("idle (control)", "hog started mid-run"):
            hog = None if not rows else (args.hog_after if args.hog_after is not None else 0.6 * rows[0][3])
            summary, err, secs = specbench_run(root / label.split()[0], args, hog)
            warned = "timings look disturbed" in err
            rows.append((label, summary, warned, secs))
            print(
                f"{label:22s} speedup {summary['speedup']:.3f}  suspect_timing={summary['suspect_timing']}  "
                f"warning printed={warned}  ({secs:.0f} s)"
            )
            for note in summary.get("timing_notes") or []:
                print(f"{'':22s} - {note}")
        control, hogged = rows[0][1]["suspect_timing"], rows[1][1]["suspect_timing"]
        print(
            f"goal: control not flagged ({'met' if not control else 'NOT met'}), hog flagged "
            f"({'met' if hogged and rows[1][2] else 'NOT met'})"
        )
        print(f"hardware: {rows[0][1].get('hardware')}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Where does the auto run's cost-model check miss? Reads finished `--gamma auto` run folders (issue 40; not a timing).

The check ("cost-model check (known acceptance)") prices the timed examples' own replayed steps with the loop costs
measured before timing (manifest `auto.loop_costs` of the chosen dtype): a plain step, a verify pass over k tokens
(the step times the bare curve's shape), a draft call. Each timed run records what those parts really cost
(examples.jsonl: the baseline's decode seconds per token, the speculative arm's verify seconds per pass and draft
seconds per call). Per run this prints timed ÷ priced for each part, and the one that matters for a ratio of two
arms, verify ÷ step, beside measured ÷ check, then per part the log spread over runs and its correlation with
log(measured ÷ check). It also prints the spread of the run's A B B A halves (summary `repeat_halves_ratio`): how
precisely one run measures its own speedup, the floor under any per-run check.

    .venv/bin/python bench/check_misses.py results/bench-coverage-epyc-2/*/ results/bench-coverage-epyc-3/*/
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy import stats
from verify_price import raw_curve  # a sibling in bench/, on the path when run as a script

from specbench.measure.results.reader import read_run

PARTS = ("step", "verify", "verify_per_step", "verify_raw_per_step", "draft_call")


def run_misses(manifest: dict, summary: dict, examples: list[dict]) -> dict | None:
    """One run's timed ÷ priced per part, measured ÷ check and its halves' ratio (pure); None without an auto
    check or loop costs (not an auto replay run)."""
    auto = manifest.get("auto") or {}
    costs = (auto.get("loop_costs") or {}).get(auto.get("dtype"))
    check, measured = summary.get("auto_check_speedup"), summary.get("speedup_geomean")
    if not costs or not check or not measured:
        return None
    base = [e["baseline"] for e in examples]
    spec = [e["speculative"] for e in examples]
    plain_ms = 1e3 * sum(b["decode_s"] for b in base) / max(sum(b["n_tokens"] - 1 for b in base), 1)
    verify = {int(k): v for k, v in costs["verify_ms"].items()}
    widest = max(verify)
    passes = [k for s in spec for k in s["pass_lengths"]]
    priced_verify = sum(verify.get(k, verify[widest]) for k in passes)
    timed_verify = 1e3 * sum(s["verify_s"] for s in spec)
    calls = sum(s["draft_calls"] for s in spec)
    call_ms = (costs.get("draft_call_ms") or {}).get(auto.get("draft"))
    step = plain_ms / costs["step_ms"]
    verify_miss = timed_verify / priced_verify if priced_verify else float("nan")
    raw = raw_prices(costs)  # the rounds' own medians, where the run kept them (verify_bare_ms)
    raw_miss = timed_verify / sum(raw.get(k, raw[max(raw)]) for k in passes) if raw and passes else float("nan")
    call = 1e3 * sum(s["draft_s"] for s in spec) / calls / call_ms if calls and call_ms else float("nan")
    return {
        "examples": example_parts(examples, verify, costs["step_ms"]),
        "priced_slope": priced_slope(verify, costs["step_ms"]),
        "run": manifest.get("run_id") or summary.get("run_id"),
        "task": summary.get("task"),
        "measured_over_check": measured / check,
        "halves": summary.get("repeat_halves_ratio"),
        "verify_rounds": costs.get("verify_rounds", 0),
        "step": step,
        "verify": verify_miss,
        "verify_per_step": verify_miss / step,
        "verify_raw_per_step": raw_miss / step,
        "draft_call": call,
    }


def raw_prices(costs: dict) -> dict[int, float]:
    """k → the verify pass priced by the rounds' raw curve (verify_price.raw_curve: the loop's plain step times
    t(k) ÷ t(1), no line; pure); {} for a run that kept no rounds (before verify_bare_ms)."""
    bare = {int(k): v for k, v in (costs.get("verify_bare_ms") or {}).items()}
    return raw_curve(costs["step_ms"], bare) if bare else {}


def priced_slope(verify: dict[int, float], step_ms: float) -> float:
    """The priced verify line's slope per token in plain steps, between its k ≥ 2 ends (pure; nan with fewer than 2)."""
    ks = [k for k in sorted(verify) if k >= 2]
    return (verify[ks[-1]] - verify[ks[0]]) / (ks[-1] - ks[0]) / step_ms if len(ks) > 1 else float("nan")


def example_parts(examples: list[dict], verify: dict[int, float], step_ms: float) -> list[dict]:
    """Per timed example with verify passes (pure): its context (prompt + half its output), its passes, their tokens
    past the first, its timed verify time in units of its own plain step, and log(timed ÷ priced) of it."""
    widest, out = max(verify), []
    for e in examples:
        base, spec = e["baseline"], e["speculative"]
        ks = spec["pass_lengths"]
        if not ks or base["n_tokens"] < 2 or base["decode_s"] <= 0:
            continue
        steps = spec["verify_s"] / (base["decode_s"] / (base["n_tokens"] - 1))  # in plain steps
        priced = sum(verify.get(k, verify[widest]) for k in ks) / step_ms
        context = e.get("prompt_tokens", 0) + base["n_tokens"] / 2
        out.append(
            {
                "context": context,
                "passes": len(ks),
                "extra": sum(ks) - len(ks),
                "steps": steps,
                "log_miss": math.log(steps / priced),
            }
        )
    return out


def verify_shape(rows: list[dict]) -> dict:
    """The timed verify pass's own line, fitted over every example of `rows` (pure): least squares of its time in plain
    steps on (passes, tokens past each pass's first) → level (a one-token pass ÷ a plain step) and slope (per extra
    token), beside the priced slope (median over runs), and the slope of log(timed ÷ priced) on the context per 100
    tokens (its correlation, n)."""
    ex = [x for r in rows for x in r["examples"]]
    if len(ex) < 3:
        return {}
    (level, slope), *_ = np.linalg.lstsq(
        np.array([[x["passes"], x["extra"]] for x in ex], float), np.array([x["steps"] for x in ex]), rcond=None
    )
    contexts = [x["context"] for x in ex]
    ctx = stats.linregress(contexts, [x["log_miss"] for x in ex]) if len(set(contexts)) > 1 else None
    return {
        "level": float(level),
        "slope": float(slope),
        "priced_slope": float(np.nanmedian([r["priced_slope"] for r in rows])),
        "context_slope_per_100": 100 * float(ctx.slope) if ctx else float("nan"),
        "context_r": float(ctx.rvalue) if ctx else float("nan"),
        "n": len(ex),
    }


def spread_and_correlation(rows: list[dict], part: str) -> tuple[float, float, int]:
    """(sd of log timed ÷ priced, its correlation with log measured ÷ check, n) over the runs where both are finite."""
    pairs = [(math.log(r[part]), math.log(r["measured_over_check"])) for r in rows if r[part] == r[part] and r[part]]
    if len(pairs) < 3:
        return float("nan"), float("nan"), len(pairs)
    x, y = np.array(pairs).T
    return float(x.std(ddof=1)), float(np.corrcoef(x, y)[0, 1]), len(pairs)


def read_misses(folder: Path) -> dict | None:
    """One run folder's row, read through specbench's checked reader (records checked against the manifest and the
    summary); None, with the reason on stderr, when the folder holds no auto run it can price."""
    run, why = read_run(folder)
    if run is None or run.summary is None:
        reasons = "; ".join(reason for _, reason in why) or "no summary.json"
        print(f"skipped {folder}: {reasons}", file=sys.stderr)
        return None
    row = run_misses(run.manifest, run.summary, run.records)
    if row is None:
        print(f"skipped {folder}: not an auto run with its loop costs and cost-model check", file=sys.stderr)
    elif why:
        print(f"{folder}: read without {len(why)} unusable records ({why[0][1]})", file=sys.stderr)
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path, help="run folders, or folders holding run folders")
    args = p.parse_args(argv)
    runs = [d for f in args.folders for d in ([f] if (f / "manifest.json").exists() else sorted(f.iterdir()))]
    rows = [r for d in runs if d.is_dir() and (r := read_misses(d)) is not None]
    if not rows:
        print("no run to read: give `--gamma auto` run folders (or folders holding them)", file=sys.stderr)
        return rows
    print(
        "| run | measured ÷ check | halves | verify rounds | " + " | ".join(f"{x} timed ÷ priced" for x in PARTS) + " |"
    )
    print("|---|---|---|---|" + "---|" * len(PARTS))
    for r in rows:
        cells = " | ".join(f"{r[x]:.3f}" for x in PARTS)
        halves = f"{r['halves']:.3f}" if r["halves"] else "—"
        print(f"| {r['run']} | {r['measured_over_check']:.3f} | {halves} | {r['verify_rounds']} | {cells} |")
    for part in PARTS:
        sd, corr, n = spread_and_correlation(rows, part)
        print(f"{part}: log sd {sd:.3f} over {n} runs, correlation with log(measured ÷ check) {corr:+.2f}")
    for task in sorted({r["task"] for r in rows}) + ["all"]:
        fit = verify_shape([r for r in rows if task in ("all", r["task"])])
        if fit:
            print(
                f"{task}: timed verify pass ≈ {fit['level']:.3f} + {fit['slope']:.4f} (k − 1) plain steps "
                f"(priced slope {fit['priced_slope']:.4f}); log(timed ÷ priced) {fit['context_slope_per_100']:+.3f} "
                f"per 100 context tokens (r {fit['context_r']:+.2f}, {fit['n']} examples)"
            )
    halves = [math.log(r["halves"]) for r in rows if r["halves"]]
    if len(halves) > 2:
        sd = statistics.stdev(halves)
        print(f"A B B A halves: log sd {sd:.3f} over {len(halves)} runs → one run's own noise ≈ {sd / 2:.3f}")
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 2)  # nothing read: a usage error, as verify_price.py --check

"""Do specbench's intervals and verdicts keep their promises? A coverage study on real records and a simulation.

Coverage (real records): each run folder's per-example log throughput ratios are taken as the population; samples
of n examples are drawn from it with replacement, and each sample's nominal 95 % interval of the geometric mean
(Student t on the log ratios, as measure/stats/statistics.py gives it, with the BCa and percentile bootstraps beside
it) is checked against the population's geometric mean. The share that cover it is the interval's true coverage
at that n; its Monte-Carlo standard error is √(c(1−c)/draws) (0.7 points at 1,000 draws).

Simulation (known truth): two cells on the same n examples, the second's true throughput ratio to the first
equal, 10 % or 30 % apart (and a sweep of ratios), per-example log ratios with a shared example effect and
heavy-tailed noise (Student t, 4 degrees of freedom); statistics.consistency's verdict counted over many draws.
The promises: "holds" at most 5 % of the time when the true ratio lies outside 1 ± 2δ, "does not hold" at most
5 % of the time when the cells are equal (tests/test_statistics.py asserts both).

  .venv/bin/python bench/coverage.py /tmp/F_cov/*/            # coverage of every run folder given
  .venv/bin/python bench/coverage.py --populations bench/data/coverage_populations_2026-12-02.json  # recorded
  .venv/bin/python bench/coverage.py --simulate               # the verdict table
  .venv/bin/python bench/coverage.py --ratio-of-sums --draws 400 --reps 100   # secondary ratios, measures_disagree
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from specbench.measure.stats import statistics as st
from specbench.measure.stats.agreement import measures_disagree

SIZES = (10, 20, 50)
SIM_SIZES = (4, 10, 20, 50)
SIM_RATIOS = (1.0, 1.1, 1.3)


# --------------------------------------------------------------------------- coverage on real records


def population(run_dir: Path) -> np.ndarray:
    """A run folder's per-example log throughput ratios (finite ones), from its examples.jsonl."""
    from specbench.measure.results.record_checks import example_problem
    from specbench.measure.results.records import scan_jsonl
    from specbench.measure.stats.metric_units import unit_log_ratios

    records, _ = scan_jsonl(Path(run_dir) / "examples.jsonl", example_problem)
    logs = np.array(list(unit_log_ratios(records).values()), dtype=float)
    return logs[np.isfinite(logs)]


def coverage(logs: np.ndarray, n: int, draws: int = 1000, seed: int = 0, resamples: int = 1999) -> dict:
    """Share of nominal 95 % intervals (BCa and percentile bootstrap, and Student's t on the log ratios) from n-example
    samples that cover the population's mean log ratio, and their median width on the ratio scale."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    truth = float(np.mean(logs))
    hits = {"BCa": 0, "percentile": 0, "t": 0}
    widths = {"BCa": [], "percentile": [], "t": []}
    for d in range(draws):
        sample = rng.choice(logs, size=n, replace=True)
        for method in ("BCa", "percentile"):
            lo, hi, _ = st.bootstrap_interval(
                (sample,), lambda x, axis=-1: np.mean(x, axis=axis), 0.95, resamples=resamples, seed=d, method=method
            )
            if math.isfinite(lo) and math.isfinite(hi):
                hits[method] += lo <= truth <= hi
                widths[method].append(math.exp(hi) - math.exp(lo))
        ci = stats.ttest_1samp(sample, 0.0).confidence_interval(0.95)  # Student's t on the log ratios, beside them
        hits["t"] += ci.low <= truth <= ci.high
        widths["t"].append(math.exp(ci.high) - math.exp(ci.low))
    return {
        "n": n,
        "draws": draws,
        **{f"{m}_coverage": hits[m] / draws for m in hits},
        **{f"{m}_median_width": float(np.median(widths[m])) if widths[m] else float("nan") for m in widths},
    }


def describe_population(logs: np.ndarray) -> dict:
    ratios = np.exp(logs)
    return {
        "examples": int(len(logs)),
        "geomean": float(np.exp(np.mean(logs))),
        "slower_share": float(np.mean(ratios < 1)),
        "sd_log": float(np.std(logs, ddof=1)),
        "skewness_log": float(((logs - logs.mean()) ** 3).mean() / logs.std() ** 3),
    }


# --------------------------------------------------------------------------- simulation with known truth


def simulated_cells(n: int, ratio: float, rng, example_sd: float = 0.3, noise_sd: float = 0.15):
    """Two cells' per-example log ratios on the same n examples: a shared example effect (cancels when paired) and
    independent Student-t(4) noise scaled to noise_sd; the second cell's true ratio to the first is `ratio`."""
    scale = noise_sd / math.sqrt(4 / (4 - 2))  # t(4) has variance 2
    shared = rng.normal(0.3, example_sd, n)
    a = shared + scale * rng.standard_t(4, n)
    b = shared + math.log(ratio) + scale * rng.standard_t(4, n)
    keys = [f"ex{i}" for i in range(n)]
    return dict(zip(keys, a)), dict(zip(keys, b))


def verdict_rates(
    ratio: float,
    n: int,
    reps: int = 400,
    margin: float = st.DEFAULT_MARGIN,
    seed: int = 0,
    min_n: int = st.MIN_VERDICT_N,
    noise_sd: float = 0.15,
) -> dict:
    """Shares of holds / does not hold / inconclusive over `reps` simulated pairs of cells (statistics.consistency,
    the code path the claims table uses)."""
    rng = np.random.default_rng(seed)
    counts = {st.HOLDS: 0, st.FAILS: 0, st.UNSURE: 0}
    for _ in range(reps):
        a, b = simulated_cells(n, ratio, rng, noise_sd=noise_sd)
        comp = st.compare(b, a, "b vs a")
        counts[st.consistency([comp], margin, min_n, plan_alpha=None).outcome] += 1  # the verdict only: no re-run plan
    return {"ratio": ratio, "n": n, "reps": reps, **{k: v / reps for k, v in counts.items()}}


# --------------------------------------------------------------------------- the secondary ratios (issue 40)


def timed_units(n: int, rng, length_effect: float = 0.0, sd: float = 0.35, heavy: float = 0.3):
    """n simulated units as (spec tokens, spec s, base tokens, base s): lengths 16–256 tokens, baseline throughput
    log-normal (σ 0.2), a per-example log speedup 0.45 + sd·normal + heavy·0.3·t(3) (clipped at ±4) and, with
    length_effect, that many log units per standard deviation of log length (< 0: long examples gain less, so the
    ratio of sums, weighted toward long examples, falls below the geometric mean)."""
    tok = rng.integers(16, 257, n).astype(float)
    z = (np.log(tok) - np.log(tok).mean()) / np.log(tok).std()
    log_r = 0.45 + length_effect * z + sd * rng.standard_normal(n) + heavy * 0.3 * np.clip(rng.standard_t(3, n), -4, 4)
    base_tps = np.exp(rng.normal(math.log(20), 0.2, n))
    spec_tok = tok * np.exp(rng.normal(0, 0.1, n))
    return spec_tok, spec_tok / (base_tps * np.exp(log_r)), tok, tok / base_tps


def ratio_of_sums_coverage(n: int, draws: int = 400, seed: int = 0, population: int = 4000, halve: bool = False):
    """Coverage of the ratio of sums' nominal 95 % intervals (statistics.ratio_of_sums: t on the log with the delta
    method's standard error; BCa and percentile bootstraps beside it) over n-unit samples drawn from a simulated
    population (timed_units), against the population's own ratio of sums. halve: the t interval at half its width, a
    negative control that must under-cover."""
    rng = np.random.default_rng(seed)
    pop = timed_units(population, rng)
    truth = float(st.log_ratio_of_sums(*pop))
    hits = {"t": 0, "BCa": 0, "percentile": 0}
    for d in range(draws):
        idx = rng.integers(0, population, n)
        cols = tuple(c[idx] for c in pop)
        if halve:
            value = float(st.log_ratio_of_sums(*cols))
            lo, hi = st.linearized_t(value, st.ratio_of_sums_influence(*cols) / 2)
            hits["t"] += lo <= truth <= hi
            continue
        est = st.ratio_of_sums(*cols)
        hits["t"] += math.log(est.low) <= truth <= math.log(est.high)
        for method in ("BCa", "percentile"):
            lo, hi, _ = st.bootstrap_interval(cols, st.log_ratio_of_sums, 0.95, resamples=999, seed=d, method=method)
            hits[method] += lo <= truth <= hi
    return {"n": n, "draws": draws, **{m: v / draws for m, v in hits.items()}}


def disagreement_rates(length_effect: float, n: int = 40, reps: int = 100, seed: int = 0, sd: float = 0.3) -> dict:
    """How often the geometric mean and the per-token speedup are flagged apart: by agreement.measures_disagree (a
    paired test on the same examples, Holm over the pairs) and by the older rule (their 95 % intervals do not
    overlap); plus how often any pair is flagged."""
    rng = np.random.default_rng(seed)
    paired = overlap = any_pair = 0
    for _ in range(reps):
        cols = timed_units(n, rng, length_effect, sd, heavy=0.0)
        flagged = measures_disagree(cols)
        any_pair += bool(flagged)
        paired += any({f["a"], f["b"]} == {"geometric mean", "per-token speedup"} for f in flagged)
        logs = np.log((cols[0] / cols[1]) / (cols[2] / cols[3]))
        overlap += st.disjoint(st.geometric_mean(logs), st.ratio_of_sums(*cols))
    return {
        "length_effect": length_effect,
        "n": n,
        "reps": reps,
        "paired": paired / reps,
        "overlap": overlap / reps,
        "any": any_pair / reps,
    }


# --------------------------------------------------------------------------- the command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run folders (examples.jsonl) for the coverage study")
    parser.add_argument(
        "--populations", type=Path, help="a JSON of recorded per-example log ratios (bench/data/coverage_populations_*)"
    )
    parser.add_argument("--draws", type=int, default=1000, help="samples drawn per n (coverage)")
    parser.add_argument("--simulate", action="store_true", help="the verdict simulation instead")
    parser.add_argument("--reps", type=int, default=400, help="simulated pairs of cells per row (simulation)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument(
        "--ratio-of-sums", action="store_true", help="the secondary ratios' intervals and measures_disagree instead"
    )
    args = parser.parse_args(argv)
    if args.ratio_of_sums:
        rows = [ratio_of_sums_coverage(n, args.draws, seed=n) for n in SIZES]
        rows += [disagreement_rates(e, reps=args.reps, seed=k) for k, e in enumerate((0.0, -0.2))]
        print(json.dumps(rows, indent=1))
        return 0
    if args.simulate:
        rows = [verdict_rates(r, n, args.reps, seed=k) for k, (r, n) in enumerate(_grid())]
        print(json.dumps(rows) if args.json else simulation_table(rows))
        return 0
    if not args.runs and not args.populations:
        parser.error("give run folders, --populations FILE, or --simulate")
    named = [(str(run), population(run)) for run in args.runs]
    if args.populations:
        recorded = json.loads(args.populations.read_text())["populations"]
        named += [(name, np.array(p["log_ratios"], dtype=float)) for name, p in recorded.items()]
    out = []
    for run, logs in named:
        if len(logs) < 2 * max(SIZES):
            print(f"note: {run} holds {len(logs)} examples, fewer than twice the largest n", file=sys.stderr)
        out.append(
            {"run": str(run), **describe_population(logs), "sizes": [coverage(logs, n, args.draws) for n in SIZES]}
        )
    print(json.dumps(out, indent=1) if args.json else coverage_table(out))
    return 0


def _grid():
    return [(r, n) for r in SIM_RATIOS for n in SIM_SIZES]


def coverage_table(out: list[dict]) -> str:
    lines = [
        "| run | examples | geomean | n | BCa 95 % covers | percentile covers | t covers | BCa width | t width |",
        "|" + "---|" * 9,
    ]
    for o in out:
        for s in o["sizes"]:
            lines.append(
                f"| {Path(o['run']).name} | {o['examples']} | {o['geomean']:.2f}× | {s['n']} | "
                f"{s['BCa_coverage']:.1%} | {s['percentile_coverage']:.1%} | {s['t_coverage']:.1%} | "
                f"{s['BCa_median_width']:.2f} | {s['t_median_width']:.2f} |"
            )
    return "\n".join(lines)


def simulation_table(rows: list[dict]) -> str:
    lines = ["| true ratio | n | holds | does not hold | inconclusive | reps |", "|" + "---|" * 6]
    for r in rows:
        shares = " | ".join(f"{r[k]:.1%}" for k in (st.HOLDS, st.FAILS, st.UNSURE))
        lines.append(f"| {r['ratio']:.2f} | {r['n']} | {shares} | {r['reps']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

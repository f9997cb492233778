"""The seed paper's claims, each checked against these runs: what the report says first.

The paper (and the seed's summary of it) claims 2–3× speedups, outputs identical to standard
decoding, gains consistent across sequence lengths and batch sizes, larger models benefiting more,
and quality unchanged by perplexity. Each becomes one row with a verdict on *this* data and
hardware, the numbers behind it with their 95 % intervals, and the figure that shows it:

  holds            the intervals support the claim
  does not hold    the intervals contradict it (the row says how)
  inconclusive     the intervals overlap the claim's boundary, or the test had too little power
  not tested here  the runs lack the axis or the records; the row names the command that measures it

Speedups are judged by their bootstrap intervals (metrics.summarize), never by point estimates
alone; runs whose timings failed a check are left out wherever a trustworthy run remains. Only the
axis values the summaries carry are read (max_new_tokens, a prompt-length bucket, the target,
batch_size), so a sweep over a new axis needs no change here beyond its AXES entry in analysis.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specbench.measure.hardware import describe
from specbench.report.analysis import AXES, axis_column, axis_sort_key, axis_text, perplexity_rows, target_params
from specbench.report.collect import ReportData, isnull, num

HOLDS, FAILS, UNSURE, UNTESTED = "holds", "does not hold", "inconclusive", "not tested here"
PAPER_LOW = 2.0  # the low end of the claimed 2–3× speedup
ENOUGH_POWER = 0.8  # a perplexity test with less power than this against its stated shift is inconclusive

# what to run where a claim has no data: every command here runs as written (a test checks each option exists)
COMMANDS = {
    "speedup": "specbench sweep --draft prompt-lookup --gamma 1-8 --limit 8",
    "identity": "specbench sweep --temperature 0 --gamma 1-4 --limit 8",
    "max_new_tokens": (
        "specbench sweep --draft prompt-lookup --gamma 4 --limit 8 --max-new-tokens 16,64,256, then "
        "specbench report results"
    ),
    "prompt_length": (
        "specbench sweep --draft prompt-lookup --gamma 4 --limit 8 --prompt-length short,medium,long, "
        "then specbench report results"
    ),
    "batch_size": "specbench sweep --batch-size 1,2,4,8 --gamma 4 --limit 8",
    "target": (
        "specbench setup --target qwen2.5-coder-1.5b, then specbench sweep --pair smollm2-135m:prompt-lookup "
        "--pair qwen2.5-coder-1.5b:prompt-lookup --dtype bfloat16 --gamma 4 --limit 8"
    ),
    "perplexity": "specbench sweep --temperature 1 --gamma 4 --limit 32",
}
AXIS_TEXT = {
    "max_new_tokens": ("Gains are consistent across sequence lengths (new tokens)", "new tokens"),
    "prompt_length": ("Gains are consistent across prompt lengths", "prompt"),
    "batch_size": ("Gains are consistent across batch sizes", "batch"),
}


@dataclass
class Claim:
    """One row of the claims table."""

    claim: str  # the seed's claim, in words
    verdict: str  # HOLDS, FAILS, UNSURE or UNTESTED, plus a reason after a colon where one helps
    numbers: str  # the measurements behind the verdict, with their 95 % intervals
    figure: str | None = None  # file stem of the figure that shows it (None: no figure)


# --------------------------------------------------------------------------- small helpers


def untested(key: str, why: str) -> str:
    return f"{UNTESTED}: {why}; run {COMMANDS[key]}"


def interval(row) -> tuple[float, float, float]:
    """(speedup, low, high): the 95 % bootstrap interval, or the point itself where none was computed."""
    x, ci = num(row.get("speedup")), row.get("speedup_ci95")
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and not any(math.isnan(num(v)) for v in ci):
        return x, num(ci[0]), num(ci[1])
    return x, x, x


def speed_text(row) -> str:
    """'1.50× [1.31, 1.72]', or '1.50× (no interval)' where the run has none (a single example)."""
    x, lo, hi = interval(row)
    ci = row.get("speedup_ci95")
    has_ci = isinstance(ci, (list, tuple)) and len(ci) == 2 and not any(math.isnan(num(v)) for v in ci)
    return f"{x:.2f}× [{lo:.2f}, {hi:.2f}]" if has_ci else f"{x:.2f}× (no interval)"


def trusted(runs):
    """The runs whose timings passed every check, or all of them when none did."""
    ok = runs[~runs["timing_suspect"].astype(bool)] if "timing_suspect" in runs else runs
    return ok if len(ok) else runs


def config_text(row) -> str:
    """A run's configuration in words: target, draft, γ, T and task."""
    gamma = row.get("gamma_label") if isinstance(row.get("gamma_label"), str) else row.get("gamma")
    return (
        f"target {row['target']}, draft {row['draft']}, γ {gamma}, T {float(row['temperature']):g}, task {row['task']}"
    )


def best_run(runs):
    """The trustworthy run with the largest speedup, or None."""
    pool = trusted(runs)
    speed = pool["speedup"].map(num)
    return None if speed.isna().all() else pool.loc[speed.idxmax()]


def ordered_verdict(cells: list[tuple[str, float, float, float]], what: str) -> str:
    """Speedups along an axis (label, x, lo, hi), in axis order: HOLDS when every interval overlaps every other,
    else FAILS naming the trend."""
    if max(c[2] for c in cells) <= min(c[3] for c in cells):
        return f"{HOLDS}: the 95 % intervals overlap"
    xs = [c[1] for c in cells]
    trend = (
        "grows with "
        if all(a < b for a, b in zip(xs, xs[1:]))
        else "shrinks with "
        if all(a > b for a, b in zip(xs, xs[1:]))
        else "varies with "
    )
    return f"{FAILS}: the speedup {trend}{what} beyond its intervals"


# --------------------------------------------------------------------------- the claims


def speedup_claim(runs) -> Claim:
    claim = "Speculative decoding gives 2–3× speedups"
    best = best_run(runs)
    if best is None:
        return Claim(claim, untested("speedup", "no run has a measurable speedup"), "—")
    x, lo, hi = interval(best)
    verdict = (
        f"{HOLDS}: the best interval lies at or above {PAPER_LOW:g}×"
        if lo >= PAPER_LOW
        else f"{FAILS}: the best interval lies below {PAPER_LOW:g}×"
        if hi < PAPER_LOW
        else f"{UNSURE}: the best interval spans {PAPER_LOW:g}×"
    )
    others = trusted(runs)["speedup"].map(num).dropna()
    numbers = (
        f"best {speed_text(best)} ({config_text(best)}); median over {len(others)} trustworthy run(s) "
        f"{others.median():.2f}×"
    )
    return Claim(claim, verdict, numbers, "speedup_vs_gamma")


def identity_claim(runs) -> Claim:
    """Greedy runs: identical outputs, or divergences the numerics classifier explains (near-ties in low precision)."""
    from scipy import stats

    claim = "Output identical to standard decoding (T = 0)"
    greedy = runs[runs["temperature"] == 0.0]
    if not len(greedy):
        return Claim(claim, untested("identity", "no greedy (T = 0) run"), "—")
    n = int(greedy["n_examples"].sum())
    same = int(
        round(
            sum(
                num(r["identical_rate"]) * r["n_examples"]
                for _, r in greedy.iterrows()
                if not math.isnan(num(r["identical_rate"]))
            )
        )
    )
    ci = stats.binomtest(same, n).proportion_ci(0.95) if n else None
    unexplained = int(sum(num(v) for v in greedy.get("divergences_unexplained", []) if not math.isnan(num(v))))
    numbers = (
        f"{same}/{n} examples identical over {len(greedy)} run(s) (share 95 % CI "
        f"[{ci.low:.3f}, {ci.high:.3f}]); {n - same - unexplained} divergence(s) explained by numerics, "
        f"{unexplained} unexplained"
    )
    if same == n:
        return Claim(claim, f"{HOLDS}: every greedy output equals the baseline's", numbers)
    if unexplained:
        return Claim(
            claim, f"{FAILS}: {unexplained} divergence(s) that numerics do not explain (candidate bugs)", numbers
        )
    return Claim(
        claim, f"{HOLDS} up to numerics: every divergence is a near-tie the verify pass's shape flips", numbers
    )


def axis_groups(runs, column: str) -> list[list]:
    """Runs that differ only in `column`, as lists of rows in axis order (only groups with ≥ 2 axis values)."""
    axes = [axis_column(runs, a) for a in AXES]
    keys = [
        k
        for k in ("target", "draft", "task", "temperature", "top_k", "top_p", "gamma_label", "dtype", *axes)
        if k and k in runs and k != column
    ]
    frame = trusted(runs).copy()
    for k in keys:  # a missing value is a value of its own (pandas' groupby would drop NaN keys)
        frame[k] = frame[k].map(lambda v: "—" if isnull(v) else str(v))
    groups = []
    for _, g in frame.groupby(keys, sort=True):
        g = g[g[column].notna() & (g[column] != "all")]  # prompt length "all" is every example, not a point on the axis
        g = g.drop_duplicates(subset=[column])  # a rerun of one cell: its first run
        if len(g) >= 2:
            groups.append(sorted((r for _, r in g.iterrows()), key=lambda r: axis_sort_key(r[column])))
    return groups


def axis_claim(runs, axis: str) -> Claim:
    claim, unit = AXIS_TEXT[axis]
    column = axis_column(runs, axis)
    groups = axis_groups(runs, column) if column else []
    if not groups:
        return Claim(claim, untested(axis, f"no two runs differ only in {axis}"), "—", f"speedup_vs_{axis}")
    verdicts = []
    for rows in groups:
        verdicts.append(
            ordered_verdict(
                [(axis_text(r[column]), *interval(r)) for r in rows], "length" if axis == "max_new_tokens" else unit
            )
        )
    first = groups[0]
    numbers = (
        f"{'/'.join(axis_text(r[column]) for r in first)} {unit}: {' / '.join(speed_text(r) for r in first)} "
        f"({config_text(first[0])})"
    )
    held = sum(v.startswith(HOLDS) for v in verdicts)
    if len(groups) > 1:
        numbers += f"; consistent in {held} of {len(groups)} configurations"
    verdict = (
        verdicts[0]
        if held == len(groups) or len(groups) == 1
        else (f"{FAILS}: consistent in only {held} of {len(groups)} configurations")
    )
    return Claim(claim, verdict, numbers, f"speedup_vs_{axis}")


def size_cells(runs, params: dict[str, float]) -> list[tuple[str, list]]:
    """Per task that ≥ 2 targets ran: each target's best trustworthy run, smallest model first."""
    out = []
    for task, g in trusted(runs).groupby("task", sort=True):
        best = [best_run(t) for _, t in g.groupby("target", sort=True)]
        best = [b for b in best if b is not None and str(b["target"]) in params]
        if len(best) >= 2:
            out.append((task, sorted(best, key=lambda b: params[str(b["target"])])))
    return out


def size_claim(runs, params: dict[str, float]) -> Claim:
    claim = "Larger target models benefit more"
    cells = size_cells(runs, params)
    if not cells:
        return Claim(
            claim, untested("target", "no task was run with two targets of known size"), "—", "speedup_by_target"
        )
    task, rows = cells[0]
    parts = [f"{speed_text(r)} on {r['target']} ({params[str(r['target'])] / 1e6:,.0f}M)" for r in rows]
    numbers = f"{task}, best per target: " + " vs ".join(parts)
    pairs = [(interval(a), interval(b)) for a, b in zip(rows, rows[1:])]
    if all(big[1] > small[2] for small, big in pairs):
        verdict = f"{HOLDS}: each larger model's interval lies above the smaller's"
    elif any(big[2] < small[1] for small, big in pairs):
        verdict = f"{FAILS}: a larger model's interval lies below a smaller one's"
    else:
        verdict = f"{UNSURE}: the intervals overlap"
    if len(cells) > 1:
        numbers += f" (and {len(cells) - 1} more task(s) in the figure)"
    return Claim(claim, verdict, numbers, "speedup_by_target")


def perplexity_claim(rows: list[dict]) -> Claim:
    """Mann-Whitney U per T > 0 run on per-example mean NLL, level split over the runs (Bonferroni)."""
    claim = "Quality unchanged: same perplexity under the target (T > 0)"
    if not rows:
        return Claim(claim, untested("perplexity", "no T > 0 run recorded per-example NLL"), "—", "perplexity")
    checks = [r["check"] for r in rows]
    worst = min(checks, key=lambda c: c.p_value if c.p_value is not None else -1.0)
    weakest = min(c.power for c in checks)
    d = worst.detail
    numbers = (
        f"{len(rows)} run(s), U test at level {worst.threshold:.3g} each (0.01 split over the runs); "
        f"lowest p = {num(worst.p_value):.3g} ({rows[checks.index(worst)]['run_id']}: mean NLL "
        f"{num(d.get('mean_nll_baseline')):.3f} vs {num(d.get('mean_nll_speculative')):.3f} nats/token, "
        f"difference 95 % CI {_ci_text(d.get('diff_ci95'))}, N = {d.get('n_baseline')}+{d.get('n_speculative')});"
        f" lowest power {weakest:.2f} against {worst.alternative}"
    )
    failed = [r["run_id"] for r, c in zip(rows, checks) if not c.passed]
    if failed:
        return Claim(
            claim, f"{FAILS}: the perplexity distributions differ in {', '.join(failed)}", numbers, "perplexity"
        )
    if weakest < ENOUGH_POWER:
        weak = rows[[c.power for c in checks].index(weakest)]["check"]
        return Claim(
            claim,
            f"{UNSURE}: no difference found, but power {weakest:.2f} < {ENOUGH_POWER}; {examples_needed(weak)}",
            numbers,
            "perplexity",
        )
    return Claim(claim, f"{HOLDS}: no difference at power ≥ {ENOUGH_POWER}", numbers, "perplexity")


def examples_needed(check) -> str:
    """What to run for power 0.8 against the stated shift: the shift a U test detects with power 0.8 falls as 1/√N,
    so N × (detectable shift ÷ stated shift)² examples per engine would do (the run's own spread of NLL)."""
    from specbench.evidence.perplexity import SHIFT as shift

    d = check.detail or {}
    found, n = num(d.get("detectable_shift")), num(d.get("n_baseline"))
    if math.isnan(found) or math.isnan(n) or found <= 0:
        return f"run more examples ({COMMANDS['perplexity']})"
    need = int(math.ceil(n * (found / shift) ** 2))
    return (
        f"with this run's spread it detects {found:.2f} nats/token at power 0.8; about {need:,} examples per "
        f"engine would detect {shift:g} (the shift falls as 1/√N; longer outputs lower the spread): "
        f"{COMMANDS['perplexity'].replace('--limit 32', f'--limit {need}')}"
    )


def _ci_text(ci) -> str:
    return f"[{num(ci[0]):.3f}, {num(ci[1]):.3f}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else "—"


def claims(data: ReportData, rows: list[dict] | None = None) -> list[Claim]:
    """Every claim row, in the seed's order (`rows`: perplexity_rows, computed here when not given)."""
    runs = data.runs
    return [
        speedup_claim(runs),
        identity_claim(runs),
        axis_claim(runs, "max_new_tokens"),
        axis_claim(runs, "prompt_length"),
        axis_claim(runs, "batch_size"),
        size_claim(runs, target_params(data)),
        perplexity_claim(perplexity_rows(data) if rows is None else rows),
    ]


# --------------------------------------------------------------------------- the headline


def hardware_sentence(data: ReportData) -> str:
    """The machine(s) the runs were measured on, as a sentence."""
    machines = sorted({describe(m.hardware) for m in data.manifests.values() if m.hardware})
    if not machines:
        return "The runs did not record their hardware."
    if len(machines) == 1:
        return f"Measured on one machine: {machines[0]}."
    return f"Measured on {len(machines)} machines: " + "; ".join(machines) + "."


def headline(data: ReportData) -> str:
    """The best configuration found, its speedup with its interval, the hardware, and how many runs were flagged."""
    runs = data.runs
    best = best_run(runs)
    if best is None:
        text = "No run has a measurable speedup."
    else:
        text = (
            f"Best configuration found: {config_text(best)}, {best.get('max_new_tokens')} new tokens: "
            f"speedup {speed_text(best)} over the target alone (95 % bootstrap interval over "
            f"{int(best['n_examples'])} examples)."
        )
    suspect = int(runs["timing_suspect"].astype(bool).sum()) if "timing_suspect" in runs else 0
    if suspect:
        text += (
            f" {suspect} of {len(runs)} runs failed a timing check (see Timing warnings below) and are left "
            f"out of the verdicts where a trustworthy run remains."
        )
    return f"{text} {hardware_sentence(data)}"

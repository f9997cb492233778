"""The seed paper's claims, each checked against these runs: what the report says first.

The paper (and the seed's summary of it) claims 2–3× speedups, outputs identical to standard
decoding, gains consistent across sequence lengths and batch sizes, larger models benefiting more,
and quality unchanged by perplexity. Each becomes one row with a verdict on *this* data and
hardware, the numbers behind it with their intervals, and the figure that shows it:

  holds            shown: every paired 90 % interval of the ratios between axis values lies within
                   [1/(1+δ), 1+δ] (TOST), or a directional claim's one-sided 95 % bound clears it
  does not hold    shown otherwise: a Holm-adjusted interval lies wholly beyond the margin (or below
                   a directional claim's threshold)
  inconclusive     neither, or fewer than 20 examples per cell; the row says how many examples per
                   cell would likely decide it, and the command that measures them
  not tested here  the runs lack the axis or the records; the row names the command that measures it

The table is one family of tests (`family`): a claim's "holds" or "does not hold" stands only when its p-value
survives Holm's step-down over every claim with a statistical verdict, at the level the stopping rule gives this look
(planning.LOOK_ALPHA: 4 % at look 1, 1 % at the one re-run it allows; 5 % over both); otherwise it reads
inconclusive and says why. A sample size is planned by the exact TOST power at a true ratio of 1 for the joint power
of the claim's comparisons at the re-run's level, printed with its range, with the re-run command on a fresh draw of
examples (another --seed) whose verdict is decided on those examples alone.

Every comparison is paired: two cells on the examples both ran, through the primary measure (the
per-example log ratio of throughput, measure/stats/statistics.py); batch sizes batch by batch, the smaller batches'
examples summed over each larger batch (metric_units.comparable_log_ratios). A "best" configuration is chosen on one
half of the examples and quoted with the other half's figure (no winner's curse). Flagged runs stay
in: each verdict is computed with and without them, and says so where the two differ. Only the axis
values the summaries carry are read (max_new_tokens, a prompt-length bucket, the target, batch_size),
so a sweep over a new axis needs no change here beyond its AXES entry in analysis.py.
The identity rows (report/identity_claims.py) say which mode their greedy runs used, normal verify passes or
--bit-exact; a --bit-exact run is read there only, never by a speed claim (its speedup is not a speed measurement).
"""

from __future__ import annotations

import math
from dataclasses import replace

from specbench.measure.stats import planning as pl
from specbench.measure.stats import statistics as st
from specbench.measure.stats.metric_units import comparable_log_ratios
from specbench.report.analysis import (
    AXES,
    axis_column,
    axis_sort_key,
    axis_text,
    perplexity_rows,
    target_families,
    target_params,
)
from specbench.report.claim_rules import COMMANDS, Claim, family, needed_text, seed_of
from specbench.report.collect import ReportData
from specbench.report.identity_claims import bit_exact_runs, identity_claims
from specbench.report.selection import (
    config_text,
    estimate_text,
    run_records,
    select_then_confirm,
    unit_logs,
)
from specbench.report.values import isnull

HOLDS, FAILS, UNSURE, UNTESTED = st.HOLDS, st.FAILS, st.UNSURE, "not tested here"
PAPER_LOW = 2.0  # the low end of the claimed 2–3× speedup
AXIS_TEXT = {
    "max_new_tokens": ("Gains are consistent across sequence lengths (new tokens)", "new tokens"),
    "prompt_length": ("Gains are consistent across prompt lengths", "prompt"),
    "batch_size": ("Gains are consistent across batch sizes", "batch"),
}
AXIS_OPTION = {"max_new_tokens": "--max-new-tokens", "prompt_length": "--prompt-length", "batch_size": "--batch-size"}


# --------------------------------------------------------------------------- small helpers


def untested(key: str, why: str) -> str:
    return f"{UNTESTED}: {why}; run {COMMANDS[key]}"


def with_and_without(judge, runs, *args) -> Claim:
    """judge(runs, ...) → Claim, computed with every run and again without the flagged ones (timing_suspect);
    the verdict says so where the two differ. Flagged runs stay in the first (the one shown)."""
    full = judge(runs, *args)
    suspect = runs["timing_suspect"].astype(bool) if "timing_suspect" in runs else None
    if suspect is None or not suspect.any():
        return full
    k = int(suspect.sum())
    if suspect.all():
        return replace(full, verdict=f"{full.verdict} (every run is flagged: no verdict without them)")
    clean = judge(runs[~suspect], *args)
    if clean.verdict.split(":")[0] != full.verdict.split(":")[0]:
        return replace(full, verdict=f"{full.verdict} — without the {k} flagged run(s): {clean.verdict}")
    return full


# --------------------------------------------------------------------------- the claims


def speedup_claim(runs, data: ReportData, margin: float, look: int = 1) -> Claim:
    """The best configuration, chosen on one half of the examples, judged on the other half: holds when its
    one-sided 95 % lower bound is ≥ 2/(1+δ), does not hold when its one-sided upper bound is below that."""
    claim = "Speculative decoding gives 2–3× speedups"
    found = select_then_confirm(data, runs)
    if found is None:
        return Claim(claim, untested("speedup", "no run has a measurable speedup"), "—")
    row, confirm, k = found
    threshold = PAPER_LOW / (1 + margin)
    comp = st.single(confirm, "the best configuration's other half")
    v = st.directional([("best", comp)], threshold, threshold)
    est = st.geometric_mean(list(confirm.values()), min_n=st.MIN_VERDICT_N)
    numbers = (
        f"best of {k} run(s), chosen on half of each run's examples: {config_text(row)}; on the other half "
        f"{estimate_text(est)} (geometric mean of per-example speedups, 95 % t interval)"
    )
    verdict = {
        HOLDS: f"{HOLDS}: the confirming half's one-sided 95 % lower bound is ≥ {threshold:.2f}× (2× within δ)",
        FAILS: f"{FAILS}: the confirming half's one-sided 95 % upper bound is below {threshold:.2f}× (2× less δ)",
        UNSURE: f"{UNSURE}: {v.reason}",
    }[v.outcome]

    def rerun() -> str:
        planned = v.needed if v.outcome == UNSURE else pl.plan_directional([comp], threshold, threshold)
        need = 2 * planned if planned else None  # the confirming half is half of each run's examples
        return needed_text("speedup", need, False, run_command(row, need), look=look, seed=seed_of(row))

    if v.outcome == UNSURE:
        verdict += "; " + rerun()
    return Claim(claim, verdict, numbers, "speedup_vs_gamma", v.p_value, rerun)


def run_command(row, n: int | None, axis: str | None = None, values: list | None = None) -> str:
    """The sweep that measures this run's configuration (and an axis's values) with n examples."""
    gamma = row.get("gamma_label") if isinstance(row.get("gamma_label"), str) else row.get("gamma")
    parts = [
        "specbench sweep",
        f"--task {row['task']}",
        f"--target {row['target']}",
        f"--draft {row['draft']}",
        f"--gamma {str(gamma).split(' ')[0]}",
        f"--temperature {float(row['temperature']):g}",
    ]
    if isinstance(row.get("dtype"), str):
        parts.append(f"--dtype {row['dtype']}")
    if axis:
        parts.append(f"{AXIS_OPTION[axis]} {','.join(axis_text(v) for v in values or [])}")
    parts.append(f"--limit {n or 20}")
    return " ".join(parts)


def axis_groups(runs, column: str) -> list[list]:
    """Runs that differ only in `column`, as lists of rows in axis order (only groups with ≥ 2 axis values).
    Flagged runs stay in (with_and_without judges the claims again without them)."""
    axes = [axis_column(runs, a) for a in AXES]
    keys = [
        k
        for k in ("target", "draft", "task", "temperature", "top_k", "top_p", "gamma_label", "dtype", *axes)
        if k and k in runs and k != column
    ]
    frame = runs.copy()
    for k in keys:  # a missing value is a value of its own (pandas' groupby would drop NaN keys)
        frame[k] = frame[k].map(lambda v: "—" if isnull(v) else str(v))
    groups = []
    for _, g in frame.groupby(keys, sort=True):
        g = g[g[column].notna() & (g[column] != "all")]  # prompt length "all" is every example, not a point on the axis
        g = g.drop_duplicates(subset=[column])  # a rerun of one cell: its first run
        if len(g) >= 2:
            groups.append(sorted((r for _, r in g.iterrows()), key=lambda r: axis_sort_key(r[column])))
    return groups


def group_comparisons(data: ReportData, rows: list, column: str, unit: str) -> list[st.Comparison]:
    """Every pair of axis values in one group, compared on the examples both ran (paired t on the per-unit log
    ratios); cells batched differently are paired batch by batch (the smaller batches' units summed over each larger
    batch's examples), and only cells whose examples do not nest are compared as two independent samples."""
    records = [run_records(data, r) for r in rows]
    out = []
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            label = f"{axis_text(rows[j][column])} vs {axis_text(rows[i][column])} {unit}"
            out.append(st.compare(*comparable_log_ratios(records[j], records[i]), label))
    return out


def comparison_text(c: st.Comparison) -> str:
    lo, hi = c.interval(1 - 2 * st.ALPHA)
    how = "paired" if c.paired else "unpaired"
    if math.isnan(lo):
        return f"{c.label} {c.ratio:.2f}× (n = {c.n}, no interval)"
    return f"{c.label} {c.ratio:.2f}× [{lo:.2f}, {hi:.2f}] (90 %, {how}, n = {c.n})"


def axis_claim(runs, axis: str, data: ReportData, margin: float, look: int = 1) -> Claim:
    """Consistency along an axis: every group's pairs of axis values compared, one verdict over all of them (TOST for
    holds; Holm over every comparison of every group for does not hold), each group's own verdict shown."""
    claim, unit = AXIS_TEXT[axis]
    column = axis_column(runs, axis)
    groups = axis_groups(runs, column) if column else []
    if not groups or column is None:
        return Claim(claim, untested(axis, f"no two runs differ only in {axis}"), "—", f"speedup_vs_{axis}")
    every, parts, commands = [], [], []
    for rows in groups:
        comps = group_comparisons(data, rows, column, unit)
        every += comps
        own = st.consistency(comps, margin, plan_alpha=None)  # shown per configuration, at 5 %, not adjusted
        geo = " / ".join(estimate_text(st.geometric_mean(list(unit_logs(data, r).values()))) for r in rows)
        parts.append(
            f"{'/'.join(axis_text(r[column]) for r in rows)} {unit}: {geo} ({config_text(rows[0])}); "
            f"{'; '.join(comparison_text(c) for c in comps)} → {own.outcome} (alone)"
        )
        commands.append(run_command(rows[0], None, axis, [r[column] for r in rows]))
    v = st.consistency(every, margin)
    verdict = f"{v.outcome}: {v.reason}"
    batch = max(int(float(r[column])) for rows in groups for r in rows) if axis == "batch_size" else 1

    def rerun() -> str:
        needed, plan = (v.needed, v.plan) if v.outcome == UNSURE else pl.plan_consistency(every, margin)
        return needed_text(axis, needed, True, commands[0], batch, plan, look, seed_of(groups[0][0]))

    if v.outcome == UNSURE:
        verdict += "; " + rerun()
    numbers = f"{len(groups)} configuration(s): " + " | ".join(parts) if len(groups) > 1 else parts[0]
    return Claim(claim, verdict, numbers, f"speedup_vs_{axis}", v.p_value, rerun)


def size_picks(data: ReportData, runs, params: dict[str, float]) -> list[tuple[str, list]]:
    """Per task that ≥ 2 targets of known size ran: each target's best configuration, chosen on one half of the
    examples (selection.select_then_confirm: row, the other half's log ratios, runs considered), smallest first."""
    out = []
    for task, g in runs.groupby("task", sort=True):
        picks = []
        for target, t in g.groupby("target", sort=True):
            if str(target) not in params:
                continue
            # one configuration: nothing is selected, so every example confirms (no winner's curse to avoid)
            found = (t.iloc[0], unit_logs(data, t.iloc[0]), 1) if len(t) == 1 else select_then_confirm(data, t)
            if found is not None:
                picks.append(found)
        if len(picks) >= 2:
            out.append((task, sorted(picks, key=lambda f: params[str(f[0]["target"])])))
    return out


def size_cells(data: ReportData, params: dict[str, float]) -> list[tuple[str, list]]:
    """For the figure, per task: each target's pick (size_picks) with the geometric mean of its other half
    (statistics.geometric_mean: value and 95 % t interval), so the bar is not the pick's own lucky figure."""
    return [
        (task, [(row, st.geometric_mean(list(logs.values()))) for row, logs, _ in picks])
        for task, picks in size_picks(data, data.runs, params)
    ]


def size_claim(runs, params: dict[str, float], data: ReportData, margin: float, look: int = 1) -> Claim:
    """Per task and per model family (analysis.target_families: one vocabulary), each target's best configuration
    chosen on one half of the examples (all of them when it ran one); the larger target's speedup over the smaller's
    on the confirming examples, paired by example. Targets of different families are never compared (a family's
    draft and tokenizer differ, so the ratio would not be the size's); a target alone in its family is shown beside.
    Holds when every ratio's one-sided 95 % lower bound is > 1; does not hold when a Holm-adjusted one-sided upper
    bound is below 1+δ (no larger gain beyond δ)."""
    claim = "Larger target models benefit more (within one model family)"
    families = target_families(data)
    pairs, parts = [], []
    for task, picks in size_picks(data, runs, params):
        by_family: dict[object, list] = {}
        for pick in picks:
            by_family.setdefault(families.get(str(pick[0]["target"])), []).append(pick)

        def shown(group):
            return " vs ".join(
                f"{r['target']} ({params[str(r['target'])] / 1e6:,.0f}M) "
                f"{estimate_text(st.geometric_mean(list(c.values())))}"
                for r, c, _ in group
            )

        compared = [g for fam, g in by_family.items() if fam is not None and len(g) >= 2]
        beside = [p for fam, g in by_family.items() if fam is None or len(g) < 2 for p in g]
        for group in compared:
            for (small, s_logs, _), (big, b_logs, _) in zip(group, group[1:]):
                label = f"{big['target']} vs {small['target']} ({task})"
                pairs.append((label, st.compare(b_logs, s_logs, label)))
        text = "; ".join(shown(g) for g in compared)
        if beside:
            text += ("; " if text else "") + "beside, not compared (no other target of its family): " + shown(beside)
        parts.append(f"{task}: {text}")
    if not pairs:
        return Claim(
            claim,
            untested("target", "no task was run with two targets of one family (same vocabulary) and known size"),
            "; ".join(parts) or "—",
            "speedup_by_target",
        )
    v = st.directional(pairs, 1.0, 1 + margin)
    numbers = (
        "each target's best configuration chosen on half of the examples (all of them for a target run in one "
        "configuration), compared on the others within its family: "
        + "; ".join(parts)
        + "; ratios "
        + "; ".join(comparison_text(c) for _, c in pairs)
    )
    verdict = f"{v.outcome}: {v.reason}"

    def rerun() -> str:
        planned = v.needed if v.outcome == UNSURE else pl.plan_directional([c for _, c in pairs], 1.0, 1 + margin)
        return needed_text("target", 2 * planned if planned else None, look=look)

    if v.outcome == UNSURE:
        verdict += "; " + rerun()
    return Claim(claim, verdict, numbers, "speedup_by_target", v.p_value, rerun)


def quality_claim(rows: list[dict], look: int = 1) -> Claim:
    """Quality by paired equivalence (analysis.perplexity_rows: per T > 0 run, evidence/perplexity.nll_equivalence
    on per-example mean NLLs, same prompt and seed): holds when every run's TOST holds, does not hold when any run's
    90 % interval lies beyond the margin, else inconclusive with the pairs that would decide it (planning.tost_plan:
    every run's TOST together, exact power, at the re-run's level). Several runs need no level split for "holds"
    (intersection-union); "does not hold" by one of m runs carries m × its p-value (Holm's first step) into the
    table's family rule. The report's Perplexity table shows the same tests."""
    from scipy import stats

    claim = "Quality unchanged: same perplexity under the target (T > 0)"
    if not rows:
        return Claim(claim, untested("perplexity", "no T > 0 run recorded per-example NLL"), "—", "perplexity")
    found = [(str(r["run_id"]), r["equivalence"]) for r in rows]
    outcomes = [eq.verdict for _, eq in found]

    def beyond_p(eq) -> float:  # one-sided p of "the mean NLL difference lies beyond ±margin"
        if eq.n < 2 or not math.isfinite(eq.estimate):
            return 1.0
        if not eq.sd > 0:
            return float(abs(eq.estimate) <= eq.margin)
        return float(stats.t.sf((abs(eq.estimate) - eq.margin) / (eq.sd / math.sqrt(eq.n)), eq.n - 1))

    measured = [eq for _, eq in found if eq.n > 1 and eq.sd > 0]
    margin = found[0][1].margin

    def rerun() -> str:
        plan = (
            pl.tost_plan([eq.sd for eq in measured], margin, 0.0, pl.RERUN_ALPHA, n_observed=[eq.n for eq in measured])
            if measured and len(measured) == len(found)
            else None
        )
        return needed_text("perplexity", plan.n if plan else None, plan=plan, look=look, cell="engine")

    if FAILS in outcomes:
        verdict = f"{FAILS}: a run's mean NLL differs beyond the margin (paired TOST)"
        p_value = min(1.0, len(found) * min(beyond_p(eq) for _, eq in found))
    elif all(o == HOLDS for o in outcomes):
        verdict = f"{HOLDS}: every run's mean NLL lies within the margin of the baseline's (paired TOST)"
        p_value = max(float(eq.p_value) for _, eq in found)
    else:
        verdict = f"{UNSURE}: the paired 90 % interval straddles the margin; " + rerun()
        p_value = 1.0
    numbers = "paired TOST on per-example mean NLL (speculative − baseline): " + "; ".join(
        f"{run}: {eq.sentence()}" for run, eq in found
    )
    return Claim(claim, verdict, numbers, "perplexity", p_value, rerun)


def claims(
    data: ReportData, rows: list[dict] | None = None, margin: float | None = None, look: int | None = None
) -> list[Claim]:
    """Every claim row, in the seed's order, after the table's family rule (`family`). `rows`: perplexity_rows,
    computed here when not given; `margin`: δ, the report's --margin, else data.margin, else
    statistics.DEFAULT_MARGIN; `look`: 1 for runs as first measured, 2 for the one re-run the stopping rule allows
    (specbench report --look; else data.look, else 1)."""
    runs = data.runs
    margin = margin if margin is not None else getattr(data, "margin", st.DEFAULT_MARGIN)
    look = look if look is not None else int(getattr(data, "look", 1))
    exact = bit_exact_runs(runs, data)
    timed = runs[~exact]  # a --bit-exact run's speedup is not a speed measurement: identity rows only
    every = [
        with_and_without(speedup_claim, timed, data, margin, look),
        *identity_claims(runs, exact, untested),
        with_and_without(axis_claim, timed, "max_new_tokens", data, margin, look),
        with_and_without(axis_claim, timed, "prompt_length", data, margin, look),
        with_and_without(axis_claim, timed, "batch_size", data, margin, look),
        with_and_without(size_claim, timed, target_params(data), data, margin, look),
        quality_claim(perplexity_rows(data) if rows is None else rows, look),
    ]
    return family(every, look)

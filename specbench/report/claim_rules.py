"""The claims table's rules: its row, what to run for a claim, and the two rules that keep its verdicts honest.

report/claims.py judges each claim; this module holds what every claim shares. `Claim` is a row. `COMMANDS` says
what to run where a claim has no data. `family` treats the table as one family of tests: Holm's step-down over every
claim with a statistical verdict, at the level the stopping rule gives this look (planning.LOOK_ALPHA: 4 % at look 1,
1 % at the one re-run it allows). `needed_text` writes an inconclusive claim's re-run: the examples the exact TOST
power asks for (planning.tost_plan, with its range), on a fresh draw of examples (the next --seed), decided on those
examples alone at the re-run's level; after the re-run, no further one (docs/statistics.md, "Re-running an
inconclusive claim").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from specbench.measure.stats import planning as pl
from specbench.measure.stats.statistics import FAILS, HOLDS, UNSURE
from specbench.report.values import num

PRACTICAL_N = 10_000  # beyond this many examples per cell a suggested command is no advice

# what to run where a claim has no data: every command here runs as written (a test checks each option exists)
COMMANDS = {
    "speedup": "specbench sweep --draft prompt-lookup --gamma 1-8 --limit 40",
    "identity": "specbench sweep --temperature 0 --gamma 1-4 --limit 8",
    "max_new_tokens": (
        "specbench sweep --draft prompt-lookup --gamma 4 --limit 20 --max-new-tokens 16,64,256, then "
        "specbench report results"
    ),
    "prompt_length": (
        "specbench sweep --draft prompt-lookup --gamma 4 --limit 20 --prompt-length short,medium,long, "
        "then specbench report results"
    ),
    "batch_size": "specbench sweep --batch-size 1,2,4,8 --gamma 4 --limit 160",
    "target": (
        "specbench setup --target qwen2.5-coder-1.5b and --target qwen2.5-coder-0.5b, then specbench sweep "
        "--pair qwen2.5-coder-0.5b:prompt-lookup --pair qwen2.5-coder-1.5b:prompt-lookup --dtype bfloat16 --gamma 4 "
        "--limit 40"
    ),
    "perplexity": "specbench sweep --temperature 1 --gamma 4 --limit 32",
}


@dataclass
class Claim:
    """One row of the claims table."""

    claim: str  # the seed's claim, in words
    verdict: str  # HOLDS, FAILS, UNSURE or UNTESTED, plus a reason after a colon where one helps
    numbers: str  # the measurements behind the verdict, with their intervals
    figure: str | None = None  # file stem of the figure that shows it (None: no figure)
    p_value: float | None = None  # p-value of the verdict reached (statistics.Verdict.p_value; 1 when inconclusive);
    # None: no statistical test (identity, not tested), so not one of the family's tests
    rerun: Callable[[], str] | None = field(default=None, compare=False, repr=False)  # the re-run's needed_text,
    # computed on demand (where the family rule leaves a decided claim inconclusive)


def needed_text(
    key: str,
    n: int | None,
    per_cell: bool = True,
    command: str | None = None,
    batch: int = 1,
    plan: pl.Plan | None = None,
    look: int = 1,
    seed: int = 0,
    cell: str = "cell",
) -> str:
    """'about N (low–high) examples per cell would likely decide it: <command with --limit N --seed S>, decided on those
    examples alone' (or that no N is known). `plan`: the equivalence plan behind N (its range, how many comparisons
    must pass together); `batch` > 1: the units are batches of that many examples (the batch axis), so the command
    asks for N × batch examples. The stopping rule (planning.LOOK_ALPHA, docs/statistics.md): one re-run, on a fresh
    draw of examples (seed + 1), decided alone at its own level; at look 2 no further re-run is offered."""
    if look >= len(pl.LOOK_ALPHA):
        return (
            f"final after the re-run: the stopping rule allows one re-run (docs/statistics.md){'; about ' if n else ''}"
            + (f"{n:,} examples {f'per {cell} ' if per_cell else ''}would have been needed" if n else "")
        )
    if not n:
        return "no sample size would decide it from this spread (the ratio sits at the claim's boundary)"
    if n > PRACTICAL_N:
        return (
            f"no practical sample would decide it: about {n:,} {'batches' if batch > 1 else 'examples'} per {cell} "
            f"(more than {PRACTICAL_N:,}): a ratio sits too near the margin's edge for its spread"
        )
    limit = n * batch
    fresh = seed + 1
    cmd = re.sub(r"--limit \d+", f"--limit {limit}", command or COMMANDS[key])
    cmd = re.sub(r"(--limit \d+)", rf"\1 --seed {fresh}", cmd, count=1)
    span = plan.text().removeprefix(f"{plan.n:,}").strip() + " " if plan and plan.n == n else ""
    size = f"about {n:,} {span}examples {f'per {cell} ' if per_cell else ''}"
    if batch > 1:
        size = f"about {n:,} {span}batches {'per cell ' if per_cell else ''}({limit:,} examples at B = {batch}) "
    how = (
        f" (exact TOST power {plan.power:g} for "
        + (f"all {plan.comparisons} comparisons together" if plan.comparisons > 1 else "its comparison")
        + f" at a true ratio of {plan.ratio:g}, {100 * plan.alpha:g} % per side; range: the spread's 80 % interval)"
        if plan and plan.n == n
        else ""
    )
    rule = (
        f"; decide it on these {limit:,} fresh examples alone at the re-run's {100 * pl.LOOK_ALPHA[1]:g} % "
        "(stopping rule: one re-run, docs/statistics.md): specbench report <the re-run's folder> --look 2"
    )
    return f"{size}would likely decide it{how}: {cmd}{rule}"


def seed_of(row) -> int:
    """The seed a run drew its examples with (0 where its summary does not say)."""
    value = num(row.get("seed")) if hasattr(row, "get") else math.nan
    return int(value) if math.isfinite(value) else 0


def family(rows: list[Claim], look: int = 1) -> list[Claim]:
    """The claims table as one family of tests: Holm's step-down over every claim with a statistical verdict
    (p_value not None; an inconclusive one counts with p = 1) at the level the stopping rule gives this look
    (planning.LOOK_ALPHA). A claim's "holds" or "does not hold" stands when its Holm-adjusted p-value is below that
    level and then says so; otherwise it reads inconclusive, with why and the re-run that would decide it. Each
    claim's own verdict is at 5 % (its comparisons' intervals); this step only ever withdraws one."""
    alpha = pl.LOOK_ALPHA[min(look, len(pl.LOOK_ALPHA)) - 1]
    tested = [i for i, c in enumerate(rows) if c.p_value is not None]
    if not tested:
        return rows
    adjusted = pl.holm_adjusted([float(rows[i].p_value) for i in tested])  # type: ignore[arg-type]  # None filtered
    rule = f"Holm over the table's {len(tested)} tested claim(s) at look {look}'s {100 * alpha:g} %"
    out = list(rows)
    for i, adj in zip(tested, adjusted):
        c = rows[i]
        outcome = c.verdict.split(":")[0]
        if outcome not in (HOLDS, FAILS):
            continue
        if adj < alpha:
            out[i] = replace(c, verdict=f"{c.verdict} ({rule}: adjusted p = {adj:.2g})")
            continue
        reason = c.verdict.partition(": ")[2]
        why = f"{UNSURE}: {outcome} alone (p = {c.p_value:.2g}{'; ' + reason if reason else ''}) but not after {rule}"
        why += f" (adjusted p = {adj:.2g})"
        out[i] = replace(c, verdict=why + ("; " + c.rerun() if c.rerun else ""), p_value=1.0)
    return out

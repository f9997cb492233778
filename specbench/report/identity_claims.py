"""The claims table's identity rows: "output identical to standard decoding (T = 0)", in the mode each run used.

Two kinds of greedy run answer the claim, and they answer it differently, so the row says which it read:
- normal verify passes: a (γ+1)-token pass rounds differently from the baseline's one-token step in low precision, so
  a divergence at a near-tie the pass shape flips by itself is numerics (measure/stats/numerics.py and the margin
  gate); the claim holds "up to numerics" when every divergence is explained, and fails on an unexplained one;
- bit-exact mode (`specbench run --bit-exact`, decoding/stepwise.py): every verify pass ran as the baseline's own
  one-token steps, so nothing is left to explain: the claim holds only when every output equals the baseline's, and
  any divergence is a candidate bug.
A run is bit-exact when its manifest's config says so (or, for a folder without a usable manifest, its identity line
does). Where both kinds are present each gets its own row; a bit-exact run's speedup is not a speed measurement, so
report/claims.py keeps those runs out of every speed claim (`bit_exact_runs`).
"""

from __future__ import annotations

import math

from specbench.measure.stats.margin_gate import BIT_EXACT
from specbench.report.claim_rules import Claim
from specbench.report.values import num

CLAIM = "Output identical to standard decoding (T = 0"  # the row's claim; the mode and ")" close it


def bit_exact_runs(runs, data):
    """A boolean Series over `runs`: the runs decoded under --bit-exact (manifest config, else the identity line)."""
    import pandas as pd

    def exact(row) -> bool:
        manifest = data.manifests.get(str(row.get("run_dir")))
        config = getattr(manifest, "config", None)
        if isinstance(config, dict) and "bit_exact" in config:
            return config["bit_exact"] is True
        line = row.get("identity_line")
        return isinstance(line, str) and line.startswith(f"{BIT_EXACT} mode")

    return pd.Series([exact(r) for _, r in runs.iterrows()], index=runs.index, dtype=bool)


def identity_claims(runs, exact, untested) -> list[Claim]:
    """The identity rows: one per mode among the greedy runs (normal first), or one "not tested here" row.
    `exact`: bit_exact_runs(runs, data); `untested`: claims.untested."""
    greedy = runs["temperature"] == 0.0 if "temperature" in runs else None
    if greedy is None or not greedy.any():
        return [Claim(f"{CLAIM})", untested("identity", "no greedy (T = 0) run"), "—")]
    rows = []
    if (greedy & ~exact).any():
        rows.append(normal_claim(runs[greedy & ~exact]))
    if (greedy & exact).any():
        rows.append(bit_exact_claim(runs[greedy & exact]))
    return rows


def counted(greedy) -> tuple[int, int, int, str]:
    """(examples, identical, unexplained divergences, the identical share's 95 % Clopper-Pearson interval) over runs."""
    from scipy import stats

    n = int(greedy["n_examples"].sum())
    rates = [(num(r["identical_rate"]), r["n_examples"]) for _, r in greedy.iterrows()]
    same = int(round(sum(rate * k for rate, k in rates if not math.isnan(rate))))
    unexplained = int(sum(num(v) for v in greedy.get("divergences_unexplained", []) if not math.isnan(num(v))))
    ci = stats.binomtest(same, n).proportion_ci(0.95) if n else None
    return n, same, unexplained, f"[{ci.low:.3f}, {ci.high:.3f}]" if ci is not None else "—"  # — : no examples


def normal_claim(greedy) -> Claim:
    """Greedy runs with normal verify passes: identical outputs, or divergences the numerics classifier explains."""
    from specbench.measure.stats.statistics import FAILS, HOLDS

    claim = f"{CLAIM}, normal verify passes)"
    n, same, unexplained, share = counted(greedy)
    numbers = (
        f"{same}/{n} examples identical over {len(greedy)} run(s) (share 95 % CI "
        f"{share}); {n - same - unexplained} divergence(s) explained by numerics, "
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


def bit_exact_claim(greedy) -> Claim:
    """Greedy runs under --bit-exact: every output must equal the baseline's; any divergence is unexplained."""
    from specbench.measure.stats.statistics import FAILS, HOLDS

    claim = f"{CLAIM}, bit-exact mode)"
    n, same, _, share = counted(greedy)
    numbers = (
        f"{same}/{n} examples identical over {len(greedy)} --bit-exact run(s) (share 95 % CI {share}); "
        f"{n - same} diverged, all unexplained: every verify pass ran as the baseline's one-token step"
    )
    if same == n:
        return Claim(claim, f"{HOLDS}: every greedy output equals the baseline's, with no numerics allowance", numbers)
    return Claim(
        claim, f"{FAILS}: {n - same} divergence(s) with no pass shape to explain them (candidate bugs)", numbers
    )

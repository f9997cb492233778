"""This machine's method table beside Spec-Bench's published leaderboard (issue 43 item 4): does the order of the
methods, and the order of the categories within one method, agree with what Spec-Bench measured on a GPU?

The leaderboard (spec_bench_leaderboard.json: Spec-Bench's A100 table for Vicuna-7B-v1.3, with its source and commit)
has six columns; specbench's spec-bench task splits Spec-Bench's "multi-turn conversation" into MT-bench's eight
categories, so a method's column figure here pools those (the geometric mean over their questions: each category's
figure is already exp(mean log ratio), so pooling by n is exact). Only drafts with a published counterpart are
compared (COUNTERPARTS); the rest are listed as having none.

Two rank correlations, Kendall's τ with its exact p-value (scipy.stats.kendalltau), each with its n:
  across methods     the matched methods' overall speedups here against the published overall column;
  across categories  per matched method, its six column figures here against the published six.
Both are on point figures: with 3–4 matched methods even a perfect agreement cannot reach p < 0.05 (n = 4: the
least two-sided p is 1/12), and the method intervals in the table say whether the order here is itself resolved,
which `resolved_pairs` counts (two methods whose overall intervals do not overlap).
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

from scipy import stats

from specbench.errors import SpecbenchError
from specbench.report.leaderboard.method_table import OVERALL, MethodTable
from specbench.run_specs import parse_draft
from specbench.tasks.spec_bench import MT_BENCH

LEADERBOARD_FILE = Path(__file__).with_name("spec_bench_leaderboard.json")
COLUMN_OF = {
    **dict.fromkeys(MT_BENCH, "Multi-turn Conversation"),
    "translation": "Translation",
    "summarization": "Summarization",
    "qa": "Question Answering",
    "math_reasoning": "Mathematical Reasoning",
    "rag": "Retrieval-aug. Generation",
}
# Spec-Bench's name for a draft's kind: prompt lookup is PLD, a separate draft model is SpS (speculative sampling with
# a small draft: Vicuna-68M there, the distilled 7.6M-parameter draft or any model here), lookahead is Lookahead, an
# EAGLE head is EAGLE (EAGLE-1's chain-and-tree head; specbench's head drafts a chain), tree-lookup:recycle=K is
# Recycling (Token Recycling; here its table fills what the prompt matches leave). Tree lookup, suffix decoding,
# the frequency drafts, the hybrid and an EAGLE-3 head (no row in the shipped snapshot) have no row of their own.
COUNTERPARTS = {"prompt-lookup": "PLD", "lookahead": "Lookahead", "model": "SpS", "eagle": "EAGLE"}


@cache
def leaderboard() -> dict:
    """The shipped leaderboard: {"source", "commit", "setting", "methods": {name: {"columns", "mat", "overall"}}}."""
    return json.loads(LEADERBOARD_FILE.read_text(encoding="utf-8"))


def counterpart(draft: str) -> str | None:
    """A --draft value → its Spec-Bench method name, or None where the leaderboard has no such method."""
    try:
        spec = parse_draft(draft)
    except SpecbenchError:  # a malformed or foreign draft string in old results: no counterpart
        return None
    if spec.recycles:  # tree-lookup:recycle=K is token recycling's table, after tree-lookup's prompt matches
        return "Recycling"
    return COUNTERPARTS.get(spec.head_method or spec.kind)  # eagle3: the shipped snapshot has no EAGLE-3 row


def pooled_columns(rows: list[dict]) -> dict[str, float]:
    """One method's rows → its speedup per leaderboard column: the n-weighted mean of the categories' log speedups
    (a category's speedup is the geometric mean over its questions), for columns with at least one question."""
    sums: dict[str, list[float]] = {}
    for r in rows:
        column = COLUMN_OF.get(r["category"])
        if column and not r["missing"] and r["speedup"] and r["n"]:
            acc = sums.setdefault(column, [0.0, 0.0])
            acc[0] += r["n"] * math.log(r["speedup"])
            acc[1] += r["n"]
    return {c: math.exp(s / n) for c, (s, n) in sums.items()}


def kendall(here: list[float], published: list[float]) -> dict:
    """Kendall's τ-b and its exact two-sided p-value (scipy's default for small n without ties), with n; τ and p
    are null below 3 pairs."""
    n = len(here)
    if n < 3:
        return {"n": n, "tau": None, "p": None}
    result = stats.kendalltau(here, published)
    tau = None if math.isnan(result.statistic) else float(result.statistic)
    return {"n": n, "tau": tau, "p": None if math.isnan(result.pvalue) else float(result.pvalue)}


def resolved_pairs(overall: dict[str, dict]) -> tuple[int, int]:
    """How many of the method pairs have overall intervals that do not overlap, of all pairs with intervals."""
    names = [m for m, r in overall.items() if r.get("speedup_low") is not None and r.get("speedup_high") is not None]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    apart = sum(
        overall[a]["speedup_low"] > overall[b]["speedup_high"] or overall[b]["speedup_low"] > overall[a]["speedup_high"]
        for a, b in pairs
    )
    return apart, len(pairs)


def compare(table: MethodTable, board: dict | None = None) -> dict:
    """The method table against the leaderboard: per matched method its overall figure here (with interval) and
    published, its columns both ways, the rank correlation across methods and, per method, across columns; the
    drafts without a counterpart by name."""
    board = board or leaderboard()
    published = board["methods"]
    by_method: dict[str, list[dict]] = {}
    for r in table.rows:
        by_method.setdefault(str(r["method"]), []).append(r)
    matched: dict[str, dict] = {}
    unmatched: list[str] = []
    for method, rows in by_method.items():
        name = counterpart(method)
        overall = next((r for r in rows if r["category"] == OVERALL and not r["missing"]), None)
        if name is None or name not in published or overall is None or not overall["speedup"]:
            unmatched.append(method)
            continue
        if name in {m["published_name"] for m in matched.values()}:
            unmatched.append(method)  # one row per leaderboard method: the first draft of that kind met
            continue
        columns = pooled_columns(rows)
        shared = [c for c in published[name]["columns"] if c in columns]
        matched[method] = {
            "published_name": name,
            "speedup": overall["speedup"],
            "speedup_low": overall["speedup_low"],
            "speedup_high": overall["speedup_high"],
            "n": overall["n"],
            "published_speedup": published[name]["overall"],
            "columns": {c: [columns[c], published[name]["columns"][c]] for c in shared},
            "across_columns": kendall([columns[c] for c in shared], [published[name]["columns"][c] for c in shared]),
        }
    names = list(matched)
    apart, pairs = resolved_pairs(matched)
    return {
        "source": f"{board['source']} ({board['commit']}, {board['updated']}): {board['setting']}",
        "matched": matched,
        "unmatched": unmatched,
        "across_methods": kendall(
            [matched[m]["speedup"] for m in names], [matched[m]["published_speedup"] for m in names]
        ),
        "resolved_pairs": {"apart": apart, "pairs": pairs},
    }


def comparison_lines(doc: dict) -> list[str]:
    """The comparison as lines to print under the method table."""

    def corr(c: dict) -> str:
        if c["tau"] is None:
            return f"n = {c['n']}: too few to rank"
        return f"Kendall τ {c['tau']:+.2f} (exact two-sided p {c['p']:.2f}, n = {c['n']})"

    lines = [f"against Spec-Bench's leaderboard: {doc['source']}"]
    for method, m in doc["matched"].items():
        low, high = m["speedup_low"], m["speedup_high"]
        interval = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
        lines.append(
            f"  {method} ≈ {m['published_name']}: here {m['speedup']:.2f}×{interval} (n = {m['n']}), published "
            f"{m['published_speedup']:.2f}×; its categories' order: {corr(m['across_columns'])}"
        )
    r = doc["resolved_pairs"]
    lines.append(
        f"  methods' order: {corr(doc['across_methods'])}; {r['apart']} of {r['pairs']} method pairs have "
        "non-overlapping intervals here (the rest are not ordered by this run)"
    )
    if doc["unmatched"]:
        lines.append(f"  no leaderboard counterpart: {', '.join(doc['unmatched'])}")
    return lines

"""The method table beside Spec-Bench's published leaderboard (report/leaderboard/published.py): drafts map to their
leaderboard names, MT-bench's categories pool into "multi-turn conversation" exactly, and the rank correlations
read agreement as +1 and a reversed order as −1 (the control), with their n and exact p."""

from __future__ import annotations

import math

import pytest
from helpers import method_record as record
from helpers import method_run as run

from specbench.report.leaderboard.method_table import method_table
from specbench.report.leaderboard.published import (
    COLUMN_OF,
    compare,
    comparison_lines,
    counterpart,
    leaderboard,
    pooled_columns,
)
from specbench.tasks.spec_bench import CATEGORIES, MT_BENCH


def test_the_shipped_leaderboard_names_its_source_and_has_six_columns_per_method():
    board = leaderboard()
    assert "hemingkx/Spec-Bench" in board["source"] and board["commit"]
    assert {"PLD", "SpS", "Lookahead", "EAGLE"} <= set(board["methods"])
    for m in board["methods"].values():
        assert set(m["columns"]) == set(COLUMN_OF.values()) and m["overall"] > 1.0 and m["mat"] >= 1.0
    assert set(COLUMN_OF) == set(CATEGORIES)


@pytest.mark.parametrize(
    "draft, name",
    [
        ("prompt-lookup", "PLD"),
        ("prompt-lookup:rule=hf", "PLD"),
        ("lookahead", "Lookahead"),
        ("distilled", "SpS"),
        ("qwen2.5-coder-0.5b", "SpS"),
        ("eagle:drafts/head", "EAGLE"),
        ("eagle3:drafts/head", None),  # the shipped snapshot has no EAGLE-3 row
        ("tree-lookup", None),
        ("tree-lookup:recycle=4,nodes=15", "Recycling"),
        ("lookup+distilled", None),
        ("suffix", None),
        ("bigram", None),
        ("prompt-lookup:bogus=1", None),
    ],
)
def test_drafts_map_to_their_leaderboard_names(draft, name):
    assert counterpart(draft) == name


def test_mt_bench_categories_pool_by_their_questions():
    rows = [
        {"category": MT_BENCH[0], "n": 1, "speedup": 2.0, "missing": False},
        {"category": MT_BENCH[1], "n": 3, "speedup": 1.0, "missing": False},
        {"category": "qa", "n": 2, "speedup": 1.5, "missing": False},
        {"category": "rag", "n": 0, "speedup": None, "missing": True},
    ]
    pooled = pooled_columns(rows)
    assert pooled["Multi-turn Conversation"] == pytest.approx(math.exp(math.log(2.0) / 4))
    assert pooled["Question Answering"] == pytest.approx(1.5) and "Retrieval-aug. Generation" not in pooled


def synthetic_runs(order: dict[str, float]) -> list:
    """One spec-bench run per draft: every category's questions at that draft's ratio, times a per-column factor
    that follows PLD's published column order (summarization best), 12 questions in all per category."""
    pld = leaderboard()["methods"]["PLD"]["columns"]
    runs = []
    for draft, center in order.items():
        records = [record(f"{cat}:{i}", center * pld[COLUMN_OF[cat]] / 1.5) for cat in CATEGORIES for i in range(12)]
        runs.append(run(draft, records))
    return runs


def test_the_published_order_reads_as_agreement_and_its_reverse_as_disagreement():
    published = {"prompt-lookup": 1.66, "distilled": 1.52, "lookahead": 1.34}  # the leaderboard's order: PLD > SpS > LA
    same = compare(method_table(synthetic_runs(published)))
    assert [m["published_name"] for m in same["matched"].values()] == ["PLD", "SpS", "Lookahead"]
    assert same["across_methods"]["tau"] == pytest.approx(1.0) and same["across_methods"]["n"] == 3
    assert same["across_methods"]["p"] > 0.05  # n = 3 cannot reach 0.05, and the doc says so
    assert same["matched"]["prompt-lookup"]["across_columns"]["tau"] == pytest.approx(1.0)
    assert same["resolved_pairs"]["pairs"] == 3
    reversed_ = compare(method_table(synthetic_runs(dict(zip(published, [1.2, 1.4, 1.6])))))
    assert reversed_["across_methods"]["tau"] == pytest.approx(-1.0)  # the control: the comparison can disagree
    text = "\n".join(comparison_lines(same))
    assert "prompt-lookup ≈ PLD" in text and "Kendall τ +1.00" in text and "n = 3" in text


def test_drafts_without_a_counterpart_are_listed_not_compared():
    doc = compare(method_table(synthetic_runs({"tree-lookup": 1.4, "prompt-lookup": 1.3})))
    assert list(doc["matched"]) == ["prompt-lookup"] and doc["unmatched"] == ["tree-lookup"]
    assert doc["across_methods"]["tau"] is None and "too few to rank" in "\n".join(comparison_lines(doc))

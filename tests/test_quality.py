"""BLEU/ROUGE scores and their bootstrap intervals on hand-checked examples."""

from __future__ import annotations

import pytest

from specbench.errors import SpecbenchError
from specbench.tasks import quality
from specbench.tasks.quality import bootstrap_ci, score

HYPS = [
    "the cat sat on the mat",
    "a dog ran in the park today",
    "it is raining again",
    "we like green tea",
    "the train was late this morning",
    "she reads a book every week",
    "he plays the guitar badly",
    "the shop closes at six",
]
REFS = [
    "the cat is on the mat",
    "a dog runs in the park",
    "it rains again today",
    "we love green tea",
    "the train was late in the morning",
    "she reads one book each week",
    "he plays guitar very badly",
    "the store closes at six",
]


def test_bleu_identical_is_100_with_signature():
    out = score("bleu", ["The cat sat on the mat.", "Es regnet."], ["The cat sat on the mat.", "Es regnet."])
    assert out["bleu"] == pytest.approx(100.0)
    assert "nrefs:1" in out["signature"] and "tok:13a" in out["signature"] and "version:" in out["signature"]


def test_bleu_disjoint_is_zero_and_partial_is_between():
    assert score("bleu", ["alpha beta gamma delta"], ["one two three four"])["bleu"] == pytest.approx(0.0)
    partial = score("bleu", HYPS, REFS)["bleu"]
    assert 5.0 < partial < 95.0


def test_bleu_hand_checked_single_sentence():
    # hyp 'a b c d e' vs ref 'a b c d f': no n-gram order has zero matches, so smoothing plays no part;
    # precisions 4/5, 3/4, 2/3, 1/2; BP = 1 → BLEU = (4/5 · 3/4 · 2/3 · 1/2)^(1/4) = 0.2^(1/4) = 66.87
    assert score("bleu", ["a b c d e"], ["a b c d f"])["bleu"] == pytest.approx(100 * 0.2**0.25, abs=0.01)


def test_rouge_hand_checked():
    # hyp: the cat sat on the mat / ref: the cat is on the mat
    # unigrams: the×2, cat, on, mat match → 5/6 both ways → F1 = 83.33
    # bigrams: 'the cat', 'on the', 'the mat' of 5 each → 3/5 → 60.00
    # LCS: the cat on the mat = 5 → 83.33
    out = score("rouge", ["the cat sat on the mat"], ["the cat is on the mat"])
    assert out == pytest.approx({"rouge1": 500 / 6, "rouge2": 60.0, "rougeL": 500 / 6})
    # asymmetric: P = 2/2, R = 2/6 → F1 = 2·1·(1/3)/(4/3) = 50 (precision alone would be 100)
    assert score("rouge", ["the cat"], ["the cat sat on the mat"])["rouge1"] == pytest.approx(50.0)


def test_rouge_uses_the_stemmer_and_averages_examples():
    # Porter stems: cats → cat, running/runs → run: a perfect match only with use_stemmer=True
    assert score("rouge", ["cats running"], ["cat runs"])["rouge1"] == pytest.approx(100.0)
    two = score("rouge", ["the cat sat on the mat", "x y"], ["the cat is on the mat", "x y"])
    assert two["rouge1"] == pytest.approx((500 / 6 + 100) / 2) and two["rouge2"] == pytest.approx(80.0)


@pytest.mark.parametrize(
    "metric, key", [("bleu", "bleu"), ("rouge", "rouge1"), ("rouge", "rouge2"), ("rouge", "rougeL")]
)
def test_bootstrap_ci_contains_point_estimate(metric, key):
    point = score(metric, HYPS, REFS)[key]
    lo, hi = bootstrap_ci(metric, HYPS, REFS, key, n_resamples=500, seed=0)
    assert lo <= point <= hi and lo < hi
    assert (lo, hi) == bootstrap_ci(metric, HYPS, REFS, key, n_resamples=500, seed=0)  # seeded
    assert (lo, hi) != bootstrap_ci(metric, HYPS, REFS, key, n_resamples=500, seed=1)


def test_bootstrap_ci_degenerate_and_level():
    same = ["a b c d e f"] * 4
    assert bootstrap_ci("bleu", same, same, "bleu", n_resamples=50) == pytest.approx((100.0, 100.0))
    wide = bootstrap_ci("rouge", HYPS, REFS, "rouge1", level=0.99)
    narrow = bootstrap_ci("rouge", HYPS, REFS, "rouge1", level=0.5)
    assert wide[0] <= narrow[0] <= narrow[1] <= wide[1]


def test_bleu_bootstrap_statistics_reproduce_corpus_bleu():
    # bootstrap_ci aggregates sacreBLEU's per-sentence statistics; summed over all examples
    # they must give exactly corpus BLEU, or the private API has drifted
    bleu = quality._bleu()
    stats = bleu._extract_corpus_statistics(HYPS, [REFS])
    total = [sum(col) for col in zip(*stats)]
    assert bleu._compute_score_from_stats(total).score == pytest.approx(score("bleu", HYPS, REFS)["bleu"])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: score("meteor", ["a"], ["a"]), r"unknown metric 'meteor'; use one of bleu, rouge"),
        (lambda: score("bleu", ["a", "b"], ["a"]), r"2 hypotheses but 1 references"),
        (lambda: score("rouge", [], []), r"no hypotheses to score"),
        (lambda: bootstrap_ci("rouge", ["a"], ["a"], "bleu"), r"metric rouge has no key 'bleu'"),
        (lambda: bootstrap_ci("bleu", ["a"], ["a"], "bleu", n_resamples=0), r"n_resamples must be an integer >= 1"),
        (lambda: bootstrap_ci("bleu", ["a"], ["a"], "bleu", level=1.0), r"level must be in \(0, 1\)"),
    ],
)
def test_bad_inputs(call, message):
    with pytest.raises(SpecbenchError, match=message):
        call()


def test_resample_bleu_equals_sacrebleu_corpus_bleu_of_that_multiset():
    """Summed public per-sentence statistics must reproduce corpus BLEU exactly, for any multiset."""
    import numpy as np

    from specbench.tasks.quality import bleu_of_resamples

    counts = np.array([[1] * len(HYPS), [2] + [0] * (len(HYPS) - 1), [0] + [3] * (len(HYPS) - 1)])
    got = bleu_of_resamples(counts, HYPS, REFS)
    for row, value in zip(counts, got):
        hyps = [h for h, k in zip(HYPS, row) for _ in range(k)]
        refs = [r for r, k in zip(REFS, row) for _ in range(k)]
        assert value == pytest.approx(score("bleu", hyps, refs)["bleu"], abs=1e-9)

"""Output quality: BLEU and ROUGE with their bootstrap confidence intervals.

Speculative decoding must not change outputs (greedy) or their distribution (sampling), so
a quality score here is a check, not the goal: equal scores for baseline and speculative
runs, within the bootstrap interval, are what we expect. BLEU is sacreBLEU's corpus BLEU
(its signature makes the number reproducible); ROUGE is Google's rouge_score with the
Porter stemmer, F-measures averaged over examples, both reported ×100.
"""

from __future__ import annotations

import numpy as np

from specbench.errors import SpecbenchError

METRIC_KEYS = {"bleu": ("bleu",), "rouge": ("rouge1", "rouge2", "rougeL")}


def _check(metric: str, hypotheses: list[str], references: list[str]) -> None:
    if metric not in METRIC_KEYS:
        raise SpecbenchError(f"unknown metric {metric!r}; use one of {', '.join(METRIC_KEYS)}")
    if len(hypotheses) != len(references):
        raise SpecbenchError(f"{len(hypotheses)} hypotheses but {len(references)} references; pass one reference each")
    if not hypotheses:
        raise SpecbenchError("no hypotheses to score; run at least one example")


def _bleu():
    from sacrebleu.metrics import BLEU

    return BLEU()


def score(metric: str, hypotheses: list[str], references: list[str]) -> dict:
    """bleu → {'bleu', 'signature'}; rouge → {'rouge1', 'rouge2', 'rougeL'} mean F-measures; all ×100."""
    _check(metric, hypotheses, references)
    if metric == "bleu":
        bleu = _bleu()
        result = bleu.corpus_score(list(hypotheses), [list(references)])
        return {"bleu": float(result.score), "signature": str(bleu.get_signature())}
    per_example = rouge_per_example(hypotheses, references)
    return {key: float(per_example[key].mean()) for key in METRIC_KEYS["rouge"]}


def bleu_sufficient_statistics(hypotheses: list[str], references: list[str]) -> np.ndarray:
    """Per-sentence BLEU statistics through sacreBLEU's public API: [N, 2 + 2·order] rows of
    (sys_len, ref_len, matches per n-gram order, totals per n-gram order). Summed over any multiset
    of sentences they give that multiset's corpus BLEU (BLEU is a ratio of sums, not a mean)."""
    from sacrebleu.metrics import BLEU

    # effective order changes only a sentence's own score, not its counts (and silences sacreBLEU's advice)
    bleu = BLEU(effective_order=True)
    rows = []
    for hyp, ref in zip(hypotheses, references):
        s = bleu.sentence_score(hyp, [ref])
        rows.append([s.sys_len, s.ref_len, *s.counts, *s.totals])
    return np.array(rows, dtype=np.int64)


def bleu_of_resamples(counts: np.ndarray, hypotheses: list[str], references: list[str]) -> np.ndarray:
    """Corpus BLEU of each resample, `counts` [R, N] being how often each sentence appears in it."""
    bleu = _bleu()
    order = bleu.max_ngram_order
    sums = counts @ bleu_sufficient_statistics(hypotheses, references)  # [R, 2 + 2·order]
    return np.array(
        [
            bleu.compute_bleu(
                correct=row[2 : 2 + order].tolist(),
                total=row[2 + order :].tolist(),
                sys_len=int(row[0]),
                ref_len=int(row[1]),
                smooth_method=bleu.smooth_method,
                smooth_value=bleu.smooth_value,
                max_ngram_order=order,
            ).score
            for row in sums
        ]
    )


def rouge_per_example(hypotheses: list[str], references: list[str]) -> dict[str, np.ndarray]:
    """F-measure ×100 of each example, per ROUGE variant: {'rouge1': [N], ...}."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(list(METRIC_KEYS["rouge"]), use_stemmer=True)
    scores = [scorer.score(ref, hyp) for hyp, ref in zip(hypotheses, references)]  # score(target, prediction)
    return {key: np.array([s[key].fmeasure * 100.0 for s in scores]) for key in METRIC_KEYS["rouge"]}


def bootstrap_ci(
    metric: str,
    hypotheses: list[str],
    references: list[str],
    key: str,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of score(...)[key], resampling examples with replacement.

    BLEU is a corpus statistic, not a mean, so each resample re-aggregates per-sentence
    n-gram counts (sacreBLEU's own sufficient statistics, as its paired bootstrap does);
    ROUGE is a mean of per-example F-measures, so a resample is a mean of a resample.
    """
    _check(metric, hypotheses, references)
    if key not in METRIC_KEYS[metric]:
        raise SpecbenchError(f"metric {metric} has no key {key!r}; use one of {', '.join(METRIC_KEYS[metric])}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise SpecbenchError(f"n_resamples must be an integer >= 1 (got {n_resamples!r})")
    if not 0.0 < level < 1.0:
        raise SpecbenchError(f"level must be in (0, 1) (got {level}); e.g. 0.95")
    n = len(hypotheses)
    # how often each example appears in each resample: n draws with replacement  # [R, N]
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
    if metric == "bleu":
        values = bleu_of_resamples(counts, hypotheses, references)  # [R]
    else:
        per_example = rouge_per_example(hypotheses, references)[key]  # [N]
        values = counts @ per_example / n  # [R]
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(values, [tail, 100.0 - tail])
    return float(lo), float(hi)

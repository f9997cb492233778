"""Quality at T > 0 as a sequence-level equality test: perplexity of baseline and speculative samples.

Speculative sampling must emit the target's law over whole outputs, not only token by token.
The enumerable-sequence checks in equality.py have almost no power on real vocabularies, so here
each output is scored under the target and the two samples of scores are compared:

  score        mean negative log-likelihood per generated token, −(1/n) Σ log p(x_j | prompt, x_<j),
               under the target's *raw* law (temperature 1, no top-k/top-p): perplexity is exp(score).
               A deterministic function of the output, so equal output laws give equal score laws
               (whatever the sampler's temperature; the raw law only makes the number comparable
               across runs).
  test         two-sided Mann-Whitney U on the per-example scores (scipy.stats.mannwhitneyu), at a
               stated level. H0: both engines' scores come from one law.
  power        by simulation, never assumed: both samples are redrawn (with replacement) from the
               pooled observed scores, a location shift of `shift` nats per token is added to one of
               them, and the share of `sims` redraws the test rejects at the level is the power
               against that shift. `detectable_shift` is the shift found with power 0.8 (bisection
               over the same redraws). The default shift, 0.1 nats per token, is a perplexity
               change of ×1.105.

Caveat, stated where it is used: a run decodes baseline and speculative from the same seed per
example, so the two scores of one example may be correlated. Under H0 that changes no marginal law,
and positive pairing only makes U conservative (fewer rejections, less power), never anti-conservative.

Everything here runs after an example's timed decodes (runner), or on recorded scores (report).
"""

from __future__ import annotations

import math

import numpy as np

from specbench.evidence.equality import CheckResult

LEVEL = 0.01  # default level α of one Mann-Whitney test
SHIFT = 0.1  # default alternative for the stated power: mean NLL per token shifted by 0.1 nats (perplexity ×1.105)
POWER_SIMS = 400  # redraws per power estimate (standard error ≤ 0.025)
TARGET_POWER = 0.8  # power at which `detectable_shift` is read off


# --------------------------------------------------------------------------- scoring under the target


def token_nlls(
    model, prompt_ids: list[int], tokens: list[int], decoder_start_id: int | None = None, backend=None
) -> list[float]:
    """−log p(x_j | prompt, x_<j) for each generated token x_j under the target's raw law (one teacher-forced pass)."""
    import torch

    from specbench.evidence.numerics import prefill

    if not tokens:
        return []
    lm, first, _ = prefill(model, prompt_ids, decoder_start_id, backend)  # first: [V], predicts tokens[0]
    rows = [first.view(1, -1)]
    if len(tokens) > 1:
        rows.append(lm.forward(torch.tensor(tokens[:-1], device=lm.device), all_logits=True))  # [n-1, V]
    logits = torch.cat(rows).float()  # [n, V]
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(1, torch.tensor(tokens, device=logp.device).view(-1, 1)).view(-1)  # [n]
    return [-float(x) for x in picked]


def mean_nll(
    model, prompt_ids: list[int], tokens: list[int], decoder_start_id: int | None = None, backend=None
) -> float | None:
    """Mean NLL per token of one output under the target; None for an empty output."""
    nlls = token_nlls(model, prompt_ids, tokens, decoder_start_id, backend)
    return float(np.mean(nlls)) if nlls else None


def example_nll(
    model, prompt_ids: list[int], baseline: dict, speculative: dict, decoder_start_id: int | None = None, backend=None
) -> dict:
    """The `nll` field of an ExampleRecord: both engines' outputs scored under the target."""
    return {
        engine: mean_nll(model, prompt_ids, rec["token_ids"], decoder_start_id, backend)
        for engine, rec in (("baseline", baseline), ("speculative", speculative))
    }


# --------------------------------------------------------------------------- the two-sample test


def finite(values) -> np.ndarray:
    """The finite numbers among `values` (a record's null or a string never reaches the test)."""
    out = []
    for v in values:
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x) and not isinstance(v, bool):
            out.append(x)
    return np.asarray(out, dtype=float)


def _redraws(pooled: np.ndarray, n1: int, n2: int, sims: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`sims` pairs of samples of sizes n1, n2 drawn with replacement from the centred pooled scores."""
    rng = np.random.default_rng(seed)
    centred = pooled - np.median(pooled)
    return rng.choice(centred, (sims, n1)), rng.choice(centred, (sims, n2))


def _rejections(a: np.ndarray, b: np.ndarray, shift: float, level: float) -> float:
    from scipy import stats

    p = stats.mannwhitneyu(a, b + shift, alternative="two-sided", method="asymptotic", axis=1).pvalue
    return float(np.mean(p < level))


def mw_power(
    pooled, n1: int, n2: int, shift: float = SHIFT, level: float = LEVEL, sims: int = POWER_SIMS, seed: int = 0
) -> float:
    """Power of the two-sided U test at `level` against a location shift of `shift`, by simulation
    (samples redrawn from the pooled scores; see the module docstring)."""
    pooled = finite(pooled)
    if n1 < 1 or n2 < 1 or len(pooled) < 2:
        return 0.0
    a, b = _redraws(pooled, n1, n2, sims, seed)
    return _rejections(a, b, shift, level)


def detectable_shift(
    pooled, n1: int, n2: int, level: float = LEVEL, power: float = TARGET_POWER, sims: int = POWER_SIMS, seed: int = 0
) -> float | None:
    """The smallest location shift (nats per token) the test finds with `power`, by bisection over fixed redraws;
    None when even 20 pooled standard deviations are not found that often (too few samples)."""
    pooled = finite(pooled)
    scale = float(np.std(pooled)) or 1e-3
    if n1 < 1 or n2 < 1 or len(pooled) < 2:
        return None
    a, b = _redraws(pooled, n1, n2, sims, seed)
    lo, hi = 0.0, 20 * scale
    if _rejections(a, b, hi, level) < power:
        return None
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _rejections(a, b, mid, level) < power else (lo, mid)
    return hi


def mean_diff_ci(a: np.ndarray, b: np.ndarray, sims: int = 2000, seed: int = 0) -> list[float]:
    """95 % bootstrap interval of mean(b) − mean(a) (each sample resampled on its own)."""
    rng = np.random.default_rng(seed)
    diffs = rng.choice(b, (sims, len(b))).mean(1) - rng.choice(a, (sims, len(a))).mean(1)
    return [float(np.quantile(diffs, 0.025)), float(np.quantile(diffs, 0.975))]


def nll_check(
    name: str,
    baseline,
    speculative,
    *,
    level: float = LEVEL,
    shift: float = SHIFT,
    sims: int = POWER_SIMS,
    seed: int = 0,
) -> CheckResult:
    """Mann-Whitney U on per-example mean NLL: passes when equality is not rejected at `level`.
    `power` is against a shift of `shift` nats per token; `detail` holds the sizes, means, perplexities,
    the bootstrap interval of the mean difference and the shift detectable with power 0.8."""
    from scipy import stats

    a, b = finite(baseline), finite(speculative)
    alternative = f"mean NLL shifted by {shift:g} nats/token (perplexity ×{math.exp(shift):.3f})"
    if len(a) < 2 or len(b) < 2:
        return CheckResult(
            name,
            "mann-whitney",
            float("nan"),
            None,
            len(a) + len(b),
            level,
            0.0,
            alternative,
            False,
            {"n_baseline": len(a), "n_speculative": len(b), "why": "fewer than 2 scores per engine"},
        )
    test = stats.mannwhitneyu(a, b, alternative="two-sided")
    pooled = np.concatenate([a, b])
    detail = {
        "n_baseline": len(a),
        "n_speculative": len(b),
        "mean_nll_baseline": float(a.mean()),
        "mean_nll_speculative": float(b.mean()),
        "perplexity_baseline": math.exp(a.mean()),
        "perplexity_speculative": math.exp(b.mean()),
        "diff_ci95": mean_diff_ci(a, b, seed=seed),
        "detectable_shift": detectable_shift(pooled, len(a), len(b), level, sims=sims, seed=seed),
    }
    return CheckResult(
        name,
        "mann-whitney",
        float(test.statistic),
        float(test.pvalue),
        len(a) + len(b),
        level,
        mw_power(pooled, len(a), len(b), shift, level, sims, seed),
        alternative,
        bool(test.pvalue >= level),
        detail,
    )

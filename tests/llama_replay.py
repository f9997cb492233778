"""Greedy divergences on llama.cpp explained by a replay: the top-2 logit margin of the one-token pass that chose the
plain token. Tests only: the package's numerics classifier (measure/stats/numerics.py) is the product's version."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbench.engines.llama_cpp.backend import LlamaCppModel
from specbench.measure.stats.metric_units import first_divergence


@dataclass
class Divergence:
    """Where a speculative output first leaves the plain one, and how close the plain target's choice was."""

    index: int  # position in the generated tokens
    plain_token: int
    spec_token: int
    margin: float  # top-1 − top-2 logit of the one-token pass that chose plain_token (small: a near tie)


def replay_margin(lm: LlamaCppModel, prompt_ids: list[int], plain: list[int], index: int) -> float:
    """Replay the plain decode up to `index` in one-token passes (its batch shape) → the top-2 logit margin
    of the pass that chose plain[index]: a divergence at a margin near the batch-size rounding is explained."""
    lm.start(capacity=len(prompt_ids) + index + 1)
    logits = lm.forward(prompt_ids)
    for tok in plain[:index]:
        logits = lm.forward([tok])
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def classify(lm: LlamaCppModel, prompt_ids: list[int], plain: list[int], spec: list[int]) -> Divergence | None:
    """None when the outputs are equal, else the first divergence with its margin (metric_units.first_divergence: a
    length difference counts; an output that stops early is a divergence at its end, with margin inf: unexplained)."""
    i = first_divergence(plain, spec)
    if i is None:
        return None
    if i >= min(len(plain), len(spec)):
        return Divergence(i, plain[i] if i < len(plain) else -1, spec[i] if i < len(spec) else -1, float("inf"))
    return Divergence(i, plain[i], spec[i], replay_margin(lm, prompt_ids, plain, i))

"""Each output's score under the target: mean negative log-likelihood per generated token, raw law.

The runner records it for both engines on every example of a T > 0 run (the ExampleRecord's `nll` field), after
the example's timed decodes; evidence/perplexity.py tests the two samples of scores for equality. The score is a
measurement of one output, so it lives with the runner that takes it; the tests on it live above, in evidence.

  score  −(1/n) Σ log p(x_j | prompt, x_<j) under the target's raw law (temperature 1, no top-k/top-p): one
         teacher-forced pass over the output after the prompt (measure/numerics.prefill); perplexity is exp(score).
"""

from __future__ import annotations

import numpy as np

from specbench.measure.stats.numerics import prefill


def token_nlls(
    model, prompt_ids: list[int], tokens: list[int], decoder_start_id: int | None = None, backend=None
) -> list[float]:
    """−log p(x_j | prompt, x_<j) for each generated token x_j under the target's raw law (one teacher-forced pass)."""
    import torch

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

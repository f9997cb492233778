"""The worker's `prompt_logprobs` op (`run`): vLLM's own top-k scores at chosen positions of token sequences, so that
specbench classifies a greedy divergence on vLLM's kernels instead of a torch copy's (measure/stats/own_logits.py).

It runs inside the worker (worker.py runs this file by its path at each such request, in .venv-vllm), so, like the
worker, it imports nothing from specbench and vLLM only inside functions; specbench's tests drive it with a stand-in.

Each sequence is one request (SamplingParams(prompt_logprobs=k, max_tokens=1)) on the engine named, one at a time, as
the plain engine decodes: vLLM computes every position in its prompt pass (a request asking for prompt logprobs skips
the prefix cache, so nothing comes from an earlier pass) and returns, per position, the top k and the sequence's own
token there. What the values are follows the engine's `logprobs_mode`, returned as `mode`: log-softmax in float32 by
default (`raw_logprobs`), the logits themselves under `raw_logits`, which specbench loads its plain engine with
(engines/vllm/session.py: a logprob keeps the logit differences but not the logit's magnitude, which the margin
gate's spacing needs).
"""

from __future__ import annotations

import importlib


def top_entries(scored, token: int) -> dict:
    """One position of vLLM's prompt logprobs (token id → Logprob) → {"token": the sequence's token there, "top":
    [[id, value], ...], best first: the top k and that token (vLLM adds it when it is not among them)}."""
    pairs = sorted(((int(t), float(p.logprob)) for t, p in scored.items()), key=lambda e: (-e[1], e[0]))
    return {"token": int(token), "top": [[t, v] for t, v in pairs]}


def run(worker, request: dict) -> dict:
    """request: key (the engine; specbench asks the plain one), sequences (token id lists), positions (per sequence,
    indices ≥ 1 into it: the row at i predicts token i from the tokens before it), k (≥ 1) → {"mode": the engine's
    logprobs_mode, "rows": per sequence, per position, top_entries}."""
    llm = worker.engine(request["key"])[0]  # first: an unknown key is the error, wherever vLLM is missing
    SamplingParams = importlib.import_module("vllm").SamplingParams  # noqa: N806  # vLLM's class
    TokensPrompt = importlib.import_module("vllm.inputs").TokensPrompt  # noqa: N806  # vLLM's class
    k = int(request["k"])
    if k < 1:
        raise ValueError(f"k must be ≥ 1 (got {k})")
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=k, detokenize=False)
    rows = []
    for sequence, positions in zip(request["sequences"], request["positions"], strict=True):
        ids = [int(t) for t in sequence]
        if not all(1 <= int(p) < len(ids) for p in positions):
            raise ValueError(f"positions must lie in [1, {len(ids)}) for a sequence of {len(ids)} tokens")
        (out,) = llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
        scored = out.prompt_logprobs  # one entry per prompt token; None for the first (nothing predicts it)
        rows.append([top_entries(scored[int(p)], ids[int(p)]) for p in positions])
    return {"mode": str(llm.llm_engine.vllm_config.model_config.logprobs_mode), "rows": rows}

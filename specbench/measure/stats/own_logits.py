"""Greedy divergences on an engine that scores prompts itself (`--engine vllm`), classified on its own logits.

The torch and llama.cpp engines explain a divergence by replaying the engine's own passes (numerics.py). vLLM runs
its loop out of process and exposes no pass to replay, and a torch copy of the target would argue from torch's
kernels about vLLM's numerics. What vLLM does expose is its plain engine's prompt scores: one prompt pass over a
token sequence gives the top-k logits at every position (the worker's prompt_logprobs op, engines/vllm/scores.py;
the plain engine is loaded with logprobs_mode raw_logits). For one greedy example (prompt, baseline output,
speculative output, first divergence d) this module reads, on those logits:

  floor       one pass over prompt + baseline output: each position where its argmax is not the baseline's token is
              a flip that the pass shape alone (a whole-sequence prompt pass against the baseline's one-token decode
              steps) causes on vLLM's kernels; its gap |z_token − z_argmax| in spacings goes to `floor_flip_ulps`,
              as the torch floor's does, and may widen the gate up to FLOOR_CAP_ULPS.
  divergence  a = the baseline's token at d, b = the speculative one, z their logits at d: from that pass's row d
              (which holds a, and b when b is among its top k); else from a second pass over prompt + baseline[:d]
              + [b], whose row d holds b (and a when a is among its top k); only when neither row holds both are
              z_a and z_b read from the two rows, which share their prefix and differ by rounding only (`gap_rows`).
              `gap` = z_a − z_b; `gap_ulps` = |gap| in spacings of the run's dtype at |z_a|: the prompt pass may
              already prefer b, and how far apart the two logits are, whichever leads, is what a pass shape must
              move them (b leading by a wide margin is as far from rounding as a leading by it).
  class       the margin gate with the torch engine's rule (margin_gate.gated_kind, applied over the run by
              identity_line): numerics when gap_ulps ≤ max(ROUNDING_ULPS, the widest floor flip, at most
              FLOOR_CAP_ULPS), unexplained otherwise. The torch classifier's other half, a replay of the speculative
              run's own passes that must reproduce b, has no counterpart (vLLM's plain engine cannot run the
              speculative engine's verify passes), so every divergence goes to the gate (`kind` "numerics" means
              that); the prompt pass's own argmax at d is kept as `verify_argmax` for the reader.

The spacing: vLLM computes logits in the model's dtype (its lm_head runs in it) and returns them as float32, so the
spacing is the run's dtype's at |z_a| (margin_gate.spacing), as on torch. vLLM's default prompt logprobs would give
the same differences (log-softmax subtracts one constant from a row) but not |z_a|, so not the spacing: scores that
are not logits (`mode`) are not classified here; the example is replayed on the torch copy instead and its record's
`replays` says why, as it does when the engine fails to answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict

import torch

from specbench.errors import SpecbenchError
from specbench.measure.stats.margin_gate import OWN_LOGITS_METHOD, coarser_dtype, in_spacings
from specbench.measure.stats.numerics import Divergence

LOGIT_MODES = ("raw_logits", "processed_logits")  # vLLM's logprobs modes whose prompt scores are logits
METHOD = OWN_LOGITS_METHOD  # the Divergence's method


class CannotScore(ValueError):
    """The engine's prompt scores cannot classify this example (the torch replay runs instead)."""


def score_request(prompt: list[int], base: list[int], spec: list[int], d: int | None) -> tuple[list, list]:
    """(sequences, positions) to ask the engine for: prompt + baseline at every generated position (the row at
    len(prompt) + j predicts the baseline's token j), and, where both outputs have a token at the divergence d,
    prompt + baseline[:d] + [spec[d]] at d."""
    n = len(prompt)
    sequences, positions = [list(prompt) + list(base)], [[n + j for j in range(len(base))]]
    if d is not None and d < len(base) and d < len(spec):
        sequences.append(list(prompt) + list(base[:d]) + [spec[d]])
        positions.append([n + d])
    return sequences, positions


def scores(row: dict) -> dict[int, float]:
    """A row of the answer ({"token", "top": [[id, score], ...] best first}) → {id: score}."""
    return {int(t): float(v) for t, v in row["top"]}


def top2(row: dict) -> tuple[int, float]:
    """(the row's argmax, top-1 − top-2 score; NaN with one entry): the first entry, best first, lowest id on a tie."""
    top = row["top"]
    return int(top[0][0]), (float(top[0][1]) - float(top[1][1]) if len(top) > 1 else math.nan)


def divergence_gap(
    first: dict, second: dict | None, a: int, b: int | None, dtype: torch.dtype
) -> tuple[float, float, str]:
    """(z_a − z_b, |that| in spacings of `dtype` at |z_a|, which rows gave them) at one divergence: `first` is row d of
    prompt + baseline (holds a), `second` row d of prompt + baseline[:d] + [b] (holds b) or None. b None (the
    speculative output ended): the best token other than a in `first`."""
    z1 = scores(first)
    if a not in z1:
        raise CannotScore(f"the engine's row does not hold the row's own token {a}")
    if b is None:
        others = [v for t, v in z1.items() if t != a]
        if not others:
            raise CannotScore("the engine returned one score only (k ≥ 1 more is needed)")
        za, zb, where = z1[a], max(others), "one pass (the runner-up)"
    elif b in z1:
        za, zb, where = z1[a], z1[b], "one pass"
    elif second is not None and b in (z2 := scores(second)):
        za, zb, where = (z2[a], z2[b], "one pass (+ b)") if a in z2 else (z1[a], z2[b], "two passes")
    else:
        raise CannotScore(f"the engine's scores at the divergence do not hold token {b}")
    gap = za - zb
    return gap, in_spacings(abs(gap), za, dtype), where


def explain_scored(answer: dict, base: list[int], spec: list[int], d: int | None, dtype: torch.dtype) -> dict:
    """The `numerics` field of one greedy example from the engine's answer to score_request (module docstring);
    `dtype`: the logits' (the run's dtype; float32 answers of a bf16 model still carry bf16's spacing)."""
    if answer.get("mode") not in LOGIT_MODES:
        raise CannotScore(f"the engine returned {answer.get('mode')} scores, not logits: no magnitude for the spacing")
    dtype = coarser_dtype(torch.float32, dtype)
    rows = answer["rows"][0]
    if len(rows) != len(base):
        raise CannotScore(f"the engine scored {len(rows)} of the baseline's {len(base)} positions")
    flips = {j: top2(rows[j])[0] for j in range(1, len(base)) if top2(rows[j])[0] != base[j]}
    ulps = []
    for j, flipped in flips.items():
        z = scores(rows[j])
        if base[j] not in z:
            raise CannotScore(f"the engine's row {j} does not hold the row's own token {base[j]}")
        ulps.append(in_spacings(abs(z[base[j]] - z[flipped]), z[base[j]], dtype))
    out: dict = {
        "replays": "vllm",
        "floor_positions": max(0, len(base) - 1),
        "floor_flips": len(flips),
        "floor_flip_margins": [top2(rows[j])[1] for j in flips],
        "floor_flip_ulps": ulps,
        "divergence": None,
    }
    if d is None:
        return out
    b = spec[d] if d < len(spec) else None
    if d >= len(base):  # the speculative output runs past the baseline's end: no pass shape explains that
        found = Divergence(d, "unexplained", -1, b, -1, None, math.nan, None, False, "none")
        out["divergence"] = asdict(found)
        return out
    a = base[d]
    second = answer["rows"][1][0] if len(answer["rows"]) > 1 else None
    gap, gap_ulps, where = divergence_gap(rows[d], second, a, b, dtype)
    argmax, margin = top2(rows[d])
    found = Divergence(
        position=d,
        kind="numerics",  # the gate decides (no replay half on this engine: module docstring)
        baseline_token=a,
        speculative_token=b,
        step_argmax=a,
        verify_argmax=argmax,
        step_margin=margin,
        verify_margin=margin,
        floor_flips_here=d in flips,
        method=METHOD,
        margin=margin,
        gap=gap,
        gap_ulps=gap_ulps,
    )
    out["divergence"] = asdict(found) | {"gap_rows": where}
    return out


def explain_greedy(
    scorer: Callable[[list, list], dict] | None,
    torch_replay: Callable[[], dict],
    prompt: list[int],
    baseline: dict,
    speculative: dict,
    d: int | None,
    dtype: torch.dtype,
) -> dict:
    """The `numerics` field of one greedy example: on the engine's own prompt scores where its session has a
    `scorer` (vLLM's prompt_scores), else torch_replay() (numerics.explain_example on the session's torch model); that
    replay also runs where the engine cannot answer, and its record's `replays` then says why."""
    if scorer is None:
        return torch_replay()
    t0 = time.perf_counter()
    base, spec = list(baseline["token_ids"]), list(speculative["token_ids"])
    try:
        out = explain_scored(scorer(*score_request(prompt, base, spec, d)), base, spec, d, dtype)
    except (SpecbenchError, CannotScore) as exc:
        out = torch_replay()
        out["replays"] = f"torch (vLLM could not answer: {exc})"
        return out
    out["seconds"] = time.perf_counter() - t0
    return out

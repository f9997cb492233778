"""The batch cost model: a batch's decode speedup from each row's own steps and the measured t(b, k).

Why a model of its own: the batch-1 formulas (theory.py) price one sequence with one α. A batch
adds what they cannot see, and on a CPU each of these moved the measured speedup far from them:
  1. the batch runs until its slowest row is done, so one row with few accepted drafts (a prompt
     with nothing to look up) sets the number of passes every row pays for;
  2. rows leave as they finish, in both engines, so later passes hold fewer rows, and a pass over b
     rows costs t(b, k), not t(B, k);
  3. a verify pass is as wide as the longest draft among the live rows (+1), not γ + 1.
The model prices all three from measured inputs only:
  - t(b, k): ms of one batched target pass over k new tokens per row for b rows, calibrated before
    the run at b = 1, 2, 4, … B (calibration.calibrate_batch_grid; linear in b between them), and the
    draft model's batched token at the same b;
  - each row's steps (tokens offered, tokens accepted), as its records list them;
  - each row's output length.
`predicted`: a Monte Carlo of the batch (seeded, `replicates` runs): at each step every live row
draws one of its own measured steps at random, the policy decides how far each row advances
(ragged: accepted + 1; min: the least of those over the live rows), the pass costs
t(b, widest + 1) plus the draft model's passes (widest × its batched token at b: exact for a model
draft, an upper bound for a hybrid, whose lookup tokens cost no pass); the baseline's steps cost t(b, 1) with b the rows
still short of their length. The prediction is Σ baseline ms ÷ Σ speculative ms over batches (per
token; both engines' own token counts).
`replayed`: the measured pass shapes of both engines (batch_pass_rows, batch_pass_widths) priced
by the same t(b, k): the share of the measured time that target passes explain. predicted ≈
replayed ≈ measured means the model holds; replayed ≈ measured ≠ predicted means the step law
was wrong (e.g. acceptance correlated across steps); replayed ≠ measured means time outside the
calibrated passes (host work per row, masks, cache compaction).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

NAN = float("nan")
REPLICATES = 200


def calibrated_rows(calibration: Mapping) -> dict[int, dict[int, float]]:
    """rows b → k → ms from a manifest's batch_calibration: its `rows` table, or (older manifests, one batch
    size only) the run's own t(B, k) for every b."""
    rows = calibration.get("rows")
    if rows:
        return {int(b): {int(k): float(v) for k, v in ks.items()} for b, ks in rows.items()}
    return {int(calibration["batch_size"]): {int(k): float(v) for k, v in calibration["target_ms"].items()}}


def pass_ms_table(rows_ms: Mapping[int, Mapping[int, float]], max_rows: int, max_width: int) -> np.ndarray:
    """T[b, k] for b = 0..max_rows, k = 0..max_width: t(b, k) linear in b between the calibrated b (flat outside
    them), NaN at b = 0 or k = 0 or where k was not calibrated."""
    table = np.full((max_rows + 1, max_width + 1), NAN)
    known = sorted(rows_ms)
    for k in range(1, max_width + 1):
        bs = [b for b in known if k in rows_ms[b]]
        if bs:
            table[1:, k] = np.interp(np.arange(1, max_rows + 1), bs, [rows_ms[b][k] for b in bs])
    return table


def draft_ms_row(draft_ms: Mapping[int, float] | None, max_rows: int) -> np.ndarray:
    """D[b], b = 0..max_rows: ms of one batched draft-model token for b rows (zeros: a model-free draft)."""
    out = np.zeros(max_rows + 1)
    if draft_ms:
        bs = sorted(draft_ms)
        out[1:] = np.interp(np.arange(1, max_rows + 1), bs, [draft_ms[b] for b in bs])
    return out


def row_steps(engine: Mapping) -> list[tuple[int, int]]:
    """(tokens offered, tokens accepted) of every verify step of one row, from its record: pass_lengths lists
    every pass (offered + 1), accept_lengths the accepted count of the passes that offered any."""
    accepted = iter(engine.get("accept_lengths") or [])
    return [(p - 1, next(accepted, 0) if p > 1 else 0) for p in engine.get("pass_lengths") or []]


def baseline_ms(lengths: Sequence[int], table: np.ndarray) -> float:
    """Batched plain decoding of rows of these output lengths: the first token comes with prefill, then one
    step per token while any row is short of its length, each over the rows still short, at t(b, 1)."""
    rows = np.asarray(lengths)
    steps = int(rows.max()) - 1 if len(rows) else 0
    live = [(rows > s).sum() for s in range(1, steps + 1)]
    return float(sum(table[b, 1] for b in live))


def replay_ms(pass_rows: Sequence[int], pass_widths: Sequence[int], table: np.ndarray) -> float:
    """The measured pass shapes priced by t(b, k)."""
    return float(sum(table[b, w] for b, w in zip(pass_rows, pass_widths)))


def simulate_speculative_ms(
    steps: Sequence[Sequence[tuple[int, int]]],
    lengths: Sequence[int],
    table: np.ndarray,
    draft_ms: np.ndarray,
    policy: str,
    replicates: int = REPLICATES,
    seed: int = 0,
) -> float:
    """Mean ms of one batch's speculative decode over `replicates` Monte Carlo runs (module docstring). A row
    offers min(its drawn offer, room − 1) tokens and keeps min(accepted + 1, room); a row with no steps on
    record (its output came whole from prefill) is done from the start."""
    rng = np.random.default_rng(seed)
    n = len(lengths)
    depth = max((len(s) for s in steps), default=0)
    offer = np.zeros((n, max(depth, 1)), dtype=np.int64)
    accept = np.zeros_like(offer)
    for r, row in enumerate(steps):
        for j, (g, a) in enumerate(row):
            offer[r, j], accept[r, j] = g, a
    counts = np.array([len(s) for s in steps])
    room = np.tile(np.asarray(lengths, dtype=np.int64) - 1, (replicates, 1))  # [R, n] tokens still to emit
    room[:, counts == 0] = 0
    total = np.zeros(replicates)
    while (room > 0).any():
        live = room > 0  # [R, n]
        pick = (rng.random((replicates, n)) * np.maximum(counts, 1)).astype(np.int64)
        g = np.minimum(offer[np.arange(n), pick], np.maximum(room - 1, 0)) * live  # [R, n]
        kept = np.minimum(np.minimum(accept[np.arange(n), pick], g) + 1, room) * live
        if policy == "min":
            cap = np.where(live, kept, np.iinfo(np.int64).max).min(axis=1, keepdims=True)
            kept = np.minimum(kept, cap) * live
        b = live.sum(axis=1)
        widest = g.max(axis=1)
        busy = b > 0
        total[busy] += table[b[busy], widest[busy] + 1] + widest[busy] * draft_ms[b[busy]]
        room -= kept
    return float(total.mean())


def batch_cost_figures(
    batches: Sequence[Sequence[Mapping]], calibration: Mapping | None, gamma: int, policy: str
) -> dict:
    """predicted_speedup_batch and replayed_speedup_batch (decode only, per token) over a run's batches
    (each a list of example records), or NaN where the calibration is missing or does not cover a shape."""
    out = {"predicted_speedup_batch": NAN, "replayed_speedup_batch": NAN}
    if not calibration or not batches:
        return out
    rows_ms = calibrated_rows(calibration)
    max_rows = max(max(rows_ms), max(len(b) for b in batches))
    table = pass_ms_table(rows_ms, max_rows, gamma + 1)
    draft = calibration.get("draft_rows_ms") or (
        {calibration["batch_size"]: calibration["draft_ms"]} if calibration.get("draft_ms") else None
    )
    dms = draft_ms_row({int(b): float(v) for b, v in (draft or {}).items()}, max_rows)
    tokens = {"baseline": 0, "speculative": 0}  # decode tokens: the first comes with prefill
    ms = {"baseline": 0.0, "speculative": 0.0, "baseline_replay": 0.0, "speculative_replay": 0.0}
    for i, rows in enumerate(batches):
        lengths = {e: [r[e]["n_tokens"] for r in rows] for e in tokens}
        for engine in tokens:
            tokens[engine] += sum(lengths[engine]) - len(rows)
            shapes = rows[0][engine]  # the batch's pass shapes, shared by its rows
            ms[f"{engine}_replay"] += replay_ms(
                shapes.get("batch_pass_rows") or [], shapes.get("batch_pass_widths") or [], table
            )
        ms["baseline"] += baseline_ms(lengths["baseline"], table)
        ms["speculative"] += simulate_speculative_ms(
            [row_steps(r["speculative"]) for r in rows], lengths["speculative"], table, dms, policy, seed=i
        )
    out["predicted_speedup_batch"] = per_token_ratio(
        tokens["speculative"], ms["speculative"], tokens["baseline"], ms["baseline"]
    )
    out["replayed_speedup_batch"] = per_token_ratio(
        tokens["speculative"], ms["speculative_replay"], tokens["baseline"], ms["baseline_replay"]
    )
    return out


def per_token_ratio(spec_tokens: float, spec_ms: float, base_tokens: float, base_ms: float) -> float:
    """(spec tokens / spec ms) ÷ (base tokens / base ms), NaN where any part is zero or not finite."""
    parts = (spec_tokens, spec_ms, base_tokens, base_ms)
    if not all(math.isfinite(p) and p > 0 for p in parts):
        return NAN
    return (spec_tokens / spec_ms) / (base_tokens / base_ms)

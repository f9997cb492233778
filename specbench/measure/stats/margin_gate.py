"""The margin gate: whether rounding can explain a greedy divergence, judged on the logit gap in the dtype's spacings.

The numerics classifier (measure/stats/numerics.py) replays a divergence with the same multi-token code as the
engine, so a bug in that code would reproduce itself and pass for numerics. What the replay cannot fake is
the gap: at the first divergence d, the baseline's logit for its own token a minus its logit for the token b
that speculative decoding emitted, both from a 1-token pass (the baseline's shape). A pass shape can swap a
and b only by moving their logits further apart than that gap.

Raw logit units cannot say how far that is: in bfloat16 (8 significant bits) the spacing between adjacent
values is 2^(⌊log2|z|⌋ − 7), 0.0625 for logits in [8, 16), 0.25 in [32, 64). A gap of 0.25 is one spacing
at |z| = 40 and four at |z| = 12. So the gate measures the gap in spacings of the logit dtype at |z_a|
(`spacing`, from torch.finfo):

  gap ≤ ROUNDING_ULPS (2) spacings   within reach of the final rounding alone: a and b, k spacings apart
                                     after rounding, were at least k − 1 apart before it; if the two
                                     shapes' unrounded values differ by any amount, ties and flips of
                                     k ≤ 2 follow from where the rounding lands, so no margin test can
                                     tell them from a bug;
  gap ≤ the floor's widest flip      the numerics floor (the baseline's own output teacher-forced in
                                     verify-shaped passes) saw the pass shape alone flip a gap this wide, in
                                     spacings, somewhere in the run (`floor_flip_ulps` per example), up to
                                     FLOOR_CAP_ULPS (8): the floor runs the same multi-token code, so a bug
                                     there would flip it at any gap and, uncapped, open the gate to itself;
  anything wider                     unexplained, whatever the replay says.

`identity_line` applies the gate over a run's records (past_divergence.py applies it to every divergence of a
run teacher-forced along the baseline's output, not only the first); a run under --bit-exact (every verify pass a
one-token pass, so no pass shape separates the engines) gets no gate at all: its line reads "bit-exact mode: n/N
identical" and every divergence is unexplained. Records written before gaps were stored fall back
to the earlier raw-margin gate ([0, the largest top-2 margin the floor saw flip]) or, older still, to the
replay alone, and the line says so.
"""

from __future__ import annotations

import math

import torch

ROUNDING_ULPS = 2.0  # gaps up to this many spacings are within reach of the final rounding alone (see above)
FLOOR_CAP_ULPS = 8.0  # the floor widens the gate up to this many spacings, never further (see above)
OWN_LOGITS_METHOD = "vllm-prompt-scores"  # a Divergence's method when gated on the engine's own logits (own_logits.py)
BIT_EXACT = "bit-exact"  # the numerics field's `mode` under --bit-exact (written by numerics.explain_bit_exact)


def coarser_dtype(*dtypes) -> torch.dtype:
    """The floating dtype with the widest spacing among `dtypes` (non-float entries and None ignored; float32
    when none is left): logits a bf16 model returns in float32 still carry bf16's spacing."""
    floats = [d for d in dtypes if isinstance(d, torch.dtype) and d.is_floating_point]
    return max(floats, key=lambda d: torch.finfo(d).eps, default=torch.float32)


def spacing(value: float, dtype: torch.dtype) -> float:
    """One ulp: the distance from |value| to the next larger number of `dtype` (the subnormal spacing below the
    smallest normal). bfloat16: 0.125 at 16 ≤ |value| < 32, 0.25 at 32 ≤ |value| < 64."""
    info = torch.finfo(dtype)
    magnitude = abs(value) if math.isfinite(value) else info.max
    return info.eps * 2.0 ** (math.frexp(max(magnitude, info.smallest_normal))[1] - 1)


def in_spacings(gap: float, logit: float, dtype: torch.dtype) -> float:
    """`gap` in spacings of `dtype` at |logit|."""
    return gap / spacing(logit, dtype)


def ulp_limit(flip_ulps) -> float:
    """The widest gap, in spacings, that the gate calls numerics: ROUNDING_ULPS, or the widest the floor saw flip
    if that is wider, up to FLOOR_CAP_ULPS. Non-finite and missing entries are ignored."""
    finite = [float(u) for u in flip_ulps if u is not None and math.isfinite(float(u))]
    return max(ROUNDING_ULPS, min(max(finite, default=0.0), FLOOR_CAP_ULPS))


def margin_range(margins) -> tuple[float, float] | None:
    """[0, the largest raw top-2 margin at which the floor saw a flip] (the earlier gate, for records without gaps);
    None when the floor saw no flip. Non-finite entries are ignored."""
    finite = [float(m) for m in margins if m is not None and math.isfinite(float(m))]
    return (0.0, max(finite)) if finite else None


def gated_kind(divergence: dict, margins: tuple[float, float] | None, limit_ulps: float | None = None) -> str:
    """A divergence's class after the margin gate: numerics only when the replay says so and the gap is within
    reach. With `limit_ulps` and a divergence that carries `gap_ulps`, the gap in spacings is read; otherwise
    the raw top-2 margin against `margins` (margin_range of the run's floor flips)."""
    if divergence.get("kind") != "numerics":
        return "unexplained"
    ulps = divergence.get("gap_ulps")
    if limit_ulps is not None and ulps is not None:
        return "numerics" if ulps == ulps and ulps <= limit_ulps else "unexplained"
    m = divergence.get("margin", divergence.get("step_margin"))
    if margins is None or m is None or not (m == m) or m > margins[1]:
        return "unexplained"
    return "numerics"


def bit_exact_line(records: list[dict]) -> dict:
    """identity_line for a --bit-exact run: n/N identical, every divergence unexplained (no floor, no gate)."""
    n = len(records)
    identical = sum(1 for r in records if r["identical"])
    fields = [r.get("numerics") or {} for r in records]
    diverged = n - identical
    line = f"{BIT_EXACT} mode: {identical}/{n} identical"
    if diverged:
        line += (
            f"; {diverged} diverged, {diverged} unexplained (candidate bugs: every verify pass ran as the baseline's "
            f"one-token steps, so no rounding explains a divergence)"
        )
    cost, timed = sum(f.get("seconds", 0.0) for f in fields), timed_seconds(records)
    return {
        "identity_line": line,
        "divergences_numerics": 0,
        "divergences_unexplained": diverged,
        "divergences_unclassified": 0,
        "numerics_explained_share": 0.0 if diverged else None,
        "numerics_floor": None,
        "numerics_floor_flips": 0,
        "numerics_floor_positions": 0,
        "numerics_cost_share": cost / timed if timed and cost else None,
        "numerics_margin_range": None,
        "divergences_above_margin_range": None,
    }


def timed_seconds(records: list[dict]) -> float:
    """Both engines' timed seconds over the records (every repeat), what the classifier's cost is set beside."""
    return sum(
        sum(r[e].get("repeat_s") or [r[e].get("prefill_s", 0.0) + r[e].get("decode_s", 0.0)])
        for r in records
        for e in ("baseline", "speculative")
        if isinstance(r.get(e), dict)
    )


def identity_line(records: list[dict]) -> dict:
    """Summary fields and the one line the run table prints, from the records' `numerics` fields."""
    if any((r.get("numerics") or {}).get("mode") == BIT_EXACT for r in records):
        return bit_exact_line(records)
    n = len(records)
    identical = sum(1 for r in records if r["identical"])
    fields = [r.get("numerics") or {} for r in records]
    divs = [f["divergence"] for f in fields if f.get("divergence")]
    unclassified = n - identical - len(divs)
    gated = any("floor_flip_margins" in f for f in fields)  # records from before the gate carry no margins
    in_ulps = gated and all("gap_ulps" in d for d in divs) and any("floor_flip_ulps" in f for f in fields)
    margins = margin_range(m for f in fields for m in f.get("floor_flip_margins") or [])
    limit = ulp_limit(u for f in fields for u in f.get("floor_flip_ulps") or []) if in_ulps else None
    kinds = [gated_kind(d, margins, limit) if gated else d["kind"] for d in divs]
    numerics = kinds.count("numerics")
    unexplained = len(divs) - numerics
    above = sum(1 for d, k in zip(divs, kinds) if d["kind"] == "numerics" and k != "numerics")
    positions = sum(f.get("floor_positions", 0) for f in fields)
    cost = sum(f.get("seconds", 0.0) for f in fields)
    timed = timed_seconds(records)
    flips = sum(f.get("floor_flips", 0) for f in fields)
    diverged = n - identical
    reach = f"{limit:g} spacings of the logit dtype" if limit is not None else None
    if diverged == 0:
        line = f"{identical}/{n} identical"
    elif unexplained == 0 and unclassified == 0:
        if reach:
            gate = f" (logit gap ≤ {reach}, within what rounding flips)"
        else:
            gate = f" (margin ≤ {margins[1]:.3g}, within the floor's flip range)" if gated and margins else ""
        why = (  # vLLM's divergences are gated on its own logits alone: nothing replays its passes
            "on the engine's own logits"
            if all(d.get("method") == OWN_LOGITS_METHOD for d in divs)
            else "that the verify-shaped pass flips by itself"
        )
        line = f"{identical}/{n} identical; {diverged} diverged, all at near-ties{gate} {why} (numerics), 0 unexplained"
    else:
        where = f"at a logit gap wider than {reach}" if reach else "at a margin above the floor's flip range"
        line = (
            f"{identical}/{n} identical; {diverged} diverged: {numerics} numerics, {unexplained} unexplained "
            f"(candidate bugs)"
            + (f", {above} of them {where}" if above else "")
            + (f", {unclassified} not classified" if unclassified else "")
        )
    if divs and not gated:
        line += " [no floor margins recorded: replay only, not margin-gated]"
    return {
        "identity_line": line,
        "divergences_numerics": numerics,
        "divergences_unexplained": unexplained,
        "divergences_unclassified": unclassified,
        "numerics_explained_share": numerics / diverged if diverged else None,
        "numerics_floor": flips / positions if positions else None,
        "numerics_floor_flips": flips,
        "numerics_floor_positions": positions,
        "numerics_cost_share": cost / timed if timed and cost else None,
        "numerics_margin_range": list(margins) if gated and margins else None,
        "divergences_above_margin_range": above if gated else None,
    }

"""The units every metric is computed over: per-engine totals, per-example and per-batch times, log ratios.

metrics.py (the summary), predicted_metrics.py (the cost model's predictions) and the readers that need one of
these small pieces (the report's selection, the coverage study, the runners' divergence index, every JSON writer)
share them from here, so the summary's module holds the summary alone.
"""

from __future__ import annotations

import math

NAN = float("nan")


def ratio(num: float, den: float) -> float:
    return num / den if den else NAN


def passes_after_prefill(engine: dict) -> int | None:
    """One decode's target passes after prefill: its count or, where the engine leaves it 0 (vLLM: draft and verify
    are one step), one per step it reports (proposal_lengths, a 0 per step without a proposal); None if neither.
    Spec-Bench's #MAT (metrics.spec_bench_metrics) and its accept_lengths (tidy_table.pass_tokens) both count these."""
    if engine.get("target_calls") or engine.get("n_tokens", 0) <= 1:
        return int(engine.get("target_calls") or 0)
    return len(engine.get("proposal_lengths") or []) or None


def _total(records: list[dict], engine: str, key: str) -> float:
    return sum(r[engine][key] for r in records)


# the raw counts of an engine record that the metrics sum (the export's per-example columns are derived from these)
ENGINE_COUNTS = (
    "n_tokens",
    "prefill_s",
    "decode_s",
    "target_calls",
    "draft_calls",
    "drafted",
    "accepted",
    "trials",
    "draft_s",
    "verify_s",
)


def engine_totals(records: list[dict], engine: str) -> dict:
    """Summed raw counts (ENGINE_COUNTS) of one engine over the records."""
    return {k: _total(records, engine, k) for k in ENGINE_COUNTS}


def is_batched(records: list[dict]) -> bool:
    """Whether the records come from a run with --batch-size > 1 (their rows share batch times)."""
    return any((r.get("batch_size") or 1) > 1 for r in records)


def batches(records: list[dict]) -> list[list[dict]]:
    """The records grouped by batch_index, in the order the batches first appear."""
    groups: dict[int, list[dict]] = {}
    for r in records:
        groups.setdefault(r.get("batch_index") or 0, []).append(r)
    return list(groups.values())


def batch_unit(rows: list[dict], engine: str, decode_only: bool = False) -> tuple[float, float]:
    """(tokens, seconds) of one engine over one batch: Σ row tokens and its batch_s (minus its prefill, the
    rows' longest, when decode_only)."""
    tokens = sum(r[engine]["n_tokens"] - (1 if decode_only else 0) for r in rows)
    seconds = rows[0][engine]["batch_s"] - (max(r[engine]["prefill_s"] for r in rows) if decode_only else 0.0)
    return tokens, seconds


def per_batch_speedups(records: list[dict], decode_only: bool = False):
    """(speculative tokens, seconds, baseline tokens, seconds) per batch as numpy arrays."""
    import numpy as np

    units = [
        (*batch_unit(b, "speculative", decode_only), *batch_unit(b, "baseline", decode_only)) for b in batches(records)
    ]
    return tuple(np.array(col, dtype=float) for col in zip(*units))


def per_example_speedups(records: list[dict], decode_only: bool = False):
    """(speculative tokens, seconds, baseline tokens, seconds) per example (per batch when batched) as numpy arrays."""
    import numpy as np

    if is_batched(records):
        return per_batch_speedups(records, decode_only)

    def arrays(engine):
        tok = np.array([r[engine]["n_tokens"] - (1 if decode_only else 0) for r in records], dtype=float)
        sec = np.array(
            [r[engine]["decode_s"] + (0.0 if decode_only else r[engine]["prefill_s"]) for r in records], dtype=float
        )
        return tok, sec

    return (*arrays("speculative"), *arrays("baseline"))


def unit_log_ratios(records: list[dict]) -> dict[str, float]:
    """Each resampling unit's log throughput ratio (speculative ÷ baseline tokens/s), keyed by example id, or by
    batch when batched (statistics.unit_keys): what two cells are paired on."""
    from specbench.measure.stats import statistics as st

    logs = st.log_ratios(*per_example_speedups(records))
    return {k: float(v) for k, v in zip(st.unit_keys(records), logs)}


def unit_examples(records: list[dict]) -> list[frozenset[str]]:
    """The example ids behind each resampling unit, in unit order (statistics.unit_keys): one per example, or a
    batch's rows."""
    if is_batched(records):
        return [frozenset(str(r.get("example_id")) for r in b) for b in batches(records)]
    return [frozenset({str(r.get("example_id", i))}) for i, r in enumerate(records)]


def batch_paired_log_ratios(fine: list[dict], coarse: list[dict]) -> tuple[dict[str, float], dict[str, float]] | None:
    """Two cells that batched the same examples differently (B = 1 against B = 8, say), made comparable batch by
    batch: every batch of the coarse cell, and the fine cell's units that make up exactly its examples with their
    tokens and seconds summed, each as a log ratio of sums, keyed alike ("examples a,b,…") so that a comparison
    pairs them. A batch's examples differ in how well they draft far more than one batch size differs from another,
    so pairing on the batch removes that spread from the comparison. (fine logs, coarse logs); coarse batches the
    fine cell did not wholly run are left out; None when a fine unit straddles two coarse batches (batched another
    way) or no batch is shared."""
    import numpy as np

    from specbench.measure.stats import statistics as st

    coarse_ids = unit_examples(coarse)
    home = {e: i for i, ids in enumerate(coarse_ids) for e in ids}
    sums = [np.zeros(4) for _ in coarse_ids]
    covered: list[set[str]] = [set() for _ in coarse_ids]
    for ids, values in zip(unit_examples(fine), zip(*per_example_speedups(fine))):
        homes = {home.get(e) for e in ids}
        if len(homes) != 1:
            return None
        (i,) = homes
        if i is None:
            continue  # examples the coarse cell did not run
        sums[i] += np.asarray(values, dtype=float)
        covered[i] |= ids
    coarse_values = list(zip(*per_example_speedups(coarse)))
    a: dict[str, float] = {}
    b: dict[str, float] = {}
    for i, ids in enumerate(coarse_ids):
        if covered[i] == ids:
            key = "examples " + ",".join(sorted(ids))
            a[key] = float(st.log_ratios(*([x] for x in sums[i]))[0])
            b[key] = float(st.log_ratios(*([x] for x in coarse_values[i]))[0])
    return (a, b) if a else None


def comparable_log_ratios(a: list[dict], b: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    """Two cells' per-unit log ratios ready to compare (statistics.compare pairs the keys both hold): per example
    when neither is batched; batch by batch (batch_paired_log_ratios) when either is and the examples nest;
    otherwise each cell's own units (batch keys, compared as independent samples)."""
    size_a, size_b = (max((r.get("batch_size") or 1) for r in x) if x else 1 for x in (a, b))
    if max(size_a, size_b) > 1:
        found = batch_paired_log_ratios(a, b) if size_a <= size_b else batch_paired_log_ratios(b, a)
        if found is not None:
            return found if size_a <= size_b else (found[1], found[0])
    return unit_log_ratios(a), unit_log_ratios(b)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where two token lists differ (a length difference counts), None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def json_safe(obj):
    """Non-finite floats → None, tuples → lists, recursively (strict JSON has no NaN/Infinity)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj

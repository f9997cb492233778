"""Two of the summary's field groups, batches and load runs, declared apart from results/schema.py (which
composes them into `Summary`) so that neither module outgrows the house limit; their fields are null in runs of the
other kind."""

from __future__ import annotations

from dataclasses import dataclass

from specbench.measure.results.field_docs import documented


@dataclass
class BatchFields:
    """--batch-size B > 1 (metrics.batch_metrics)."""

    # --- batches (metrics.batch_metrics; null at batch size 1 except the row throughputs and row α)
    baseline_row_tokens_per_s: float | None = documented(
        "mean over examples of each one's tokens ÷ its own prefill + decode seconds, baseline (at B > 1 a row's "
        "seconds run to its own stop)",
        unit="tokens/s",
    )
    speculative_row_tokens_per_s: float | None = documented(
        "the same for speculative decoding (what one request sees)",
        unit="tokens/s",
        label="per row: a row's tokens ÷ its own seconds, mean (batches)",
    )
    alpha_row_mean: float | None = documented(
        "mean over examples (rows) of each one's own α (`alpha` is the pooled one)", unit="share"
    )
    alpha_row_range: list[float | None] | None = documented(
        "[lowest, highest] α of one example (row)", unit="[low, high]"
    )
    tokens_per_batch_pass: float | None = documented(
        "B > 1: Σ decode tokens of all rows ÷ Σ batched target passes (a batch's passes: its longest row's)",
        unit="tokens/pass",
        label="decode tokens of all rows per batched target pass (B > 1)",
    )
    batch_verify_cost: float | None = documented(
        "B > 1: calibrated t(B, γ+1) ÷ t(B, 1), the manifest's `batch_calibration`",
        unit="ratio",
        label="calibrated t(B, γ+1) / t(B, 1) (B > 1)",
    )
    batch_draft_cost: float | None = documented(
        "B > 1: calibrated batched draft-model token ÷ batched one-token target pass (0: model-free)", unit="ratio"
    )
    predicted_speedup_batch: float | None = documented(
        "B > 1: the batch cost model's decode speedup (measure/auto/batch_model.py): a Monte Carlo of each batch "
        "in which every live row draws one of its own measured steps (tokens offered, accepted) per pass, rows "
        "leave as they reach their length, the policy sets how far rows advance, and each pass costs the "
        "calibrated t(b, widest + 1) for its b live rows (plus the draft model's batched tokens); the baseline's "
        "steps cost t(b, 1). Compare with `decode_speedup`",
        unit="×",
        label="batch cost model (rows' steps, t(b, k)); compare with decode_speedup (B > 1)",
    )
    replayed_speedup_batch: float | None = documented(
        "B > 1: both engines' measured pass shapes (`batch_pass_rows`, `batch_pass_widths`) priced by the same "
        "calibrated t(b, k): the decode speedup target passes alone explain. Near `decode_speedup` but far from "
        "`predicted_speedup_batch`: the step law was wrong; far from `decode_speedup`: time outside the calibrated "
        "passes",
        unit="×",
        label="the measured pass shapes priced by t(b, k) (B > 1)",
    )


@dataclass
class LoadFields:
    """--concurrency / --request-rate (measure/run/load_runner.py, measure/stats/load.py)."""

    # --- load runs (--concurrency, --request-rate: measure/run/load_runner.py, measure/stats/load.py); null otherwise
    concurrency: int | None = documented("load run: the most requests in flight at once (null: each example alone)")
    request_rate: float | None = documented(
        "load run: Poisson arrivals per second, seeded (null: all at once up to the cap)", unit="requests/s"
    )
    slo_tpot_ms: float | None = documented("load run: goodput's bound on a request's TPOT", unit="ms")
    baseline_load_tokens_per_s: float | None = documented(
        "load run, plain: Σ output tokens of every request ÷ the batch's wall seconds (median over repeats)",
        unit="tokens/s",
    )
    baseline_load_ttft_p50_s: float | None = documented(
        "load run, plain: median time to first token over the requests of every repeat (from submission)",
        unit="s",
    )
    baseline_load_ttft_p99_s: float | None = documented("its 99th percentile (linear interpolation)", unit="s")
    baseline_load_tpot_p50_s: float | None = documented(
        "load run, plain: median over requests of (last − first token's arrival) ÷ (tokens − 1)", unit="s"
    )
    baseline_load_tpot_p99_s: float | None = documented("its 99th percentile (linear interpolation)", unit="s")
    baseline_goodput: float | None = documented(
        "load run, plain: requests whose TPOT ≤ slo_tpot_ms (one-token requests count) ÷ the batch's "
        "wall seconds (median over repeats)",
        unit="requests/s",
    )
    speculative_load_tokens_per_s: float | None = documented(
        "load run, speculative: Σ output tokens of every request ÷ the batch's wall seconds (median over repeats)",
        unit="tokens/s",
    )
    speculative_load_ttft_p50_s: float | None = documented(
        "load run, speculative: median time to first token over the requests of every repeat (from submission)",
        unit="s",
    )
    speculative_load_ttft_p99_s: float | None = documented("its 99th percentile (linear interpolation)", unit="s")
    speculative_load_tpot_p50_s: float | None = documented(
        "load run, speculative: median over requests of (last − first token's arrival) ÷ (tokens − 1)", unit="s"
    )
    speculative_load_tpot_p99_s: float | None = documented("its 99th percentile (linear interpolation)", unit="s")
    speculative_goodput: float | None = documented(
        "load run, speculative: requests whose TPOT ≤ slo_tpot_ms (one-token requests count) ÷ the batch's "
        "wall seconds (median over repeats)",
        unit="requests/s",
    )
    load_speedup: float | None = documented(
        "load run: speculative ÷ plain output tokens/s, geometric mean over the repeats of the whole batch",
        unit="×",
    )
    load_speedup_ci95: list[float | None] | None = documented(
        "its 95 % Student t interval on the per-repeat log ratios (null below 2 repeats)", unit="[low, high]"
    )
    load_repeats: int | None = documented("load run: the repeats behind load_speedup (its n)")
    load_verdict: str | None = documented(
        "load run: faster (the interval above 1), slower (below 1) or inconclusive (it holds 1, or n < 2)"
    )

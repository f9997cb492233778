"""Which figures a report gets, in what order, with what captions: the plan, and `make_figures`, which draws them.

Each figure is drawn by one function from the table of runs (report/collect.py): the speedup figures in
speedup.py, the ones that explain a speedup in detail.py; kit.py saves each as PNG and SVG. A figure appears
only where the runs carry its data (a batch figure needs two batch sizes, the claims' figures need their axis),
and its caption names the runs drawn hollow.
"""

from __future__ import annotations

from pathlib import Path

from specbench.report.analysis import batch_curves, batch_sentence, quality_rows, short_labels
from specbench.report.collect import ReportData
from specbench.report.figures.detail import (
    fig_alpha,
    fig_histograms,
    fig_pass_cost,
    fig_perplexity,
    fig_quality,
    fig_time_split,
)
from specbench.report.figures.kit import RenderedFigure, figure_style, render_figure
from specbench.report.figures.speedup import fig_axis, fig_batch, fig_prediction, fig_speedup, fig_targets
from specbench.report.run_frame import fixed_gamma
from specbench.report.values import num, primary_speedup

PASS_COST_CAPTION = (
    "Each line: one calibration (the target's median time for a pass over k new tokens after a context of the "
    "task's typical length, divided by the time for one), per dtype, context and machine; runs and auto choices "
    "that share a calibration share a line. Dashed: t(k) = t(1), the free verification the paper's Theorem 3.8 "
    "assumes. Where a line rises above it, verifying γ drafts costs more than one step and the best γ is smaller "
    "than the theorem says; a drop is a kernel that handles that k better."
)
SPEEDUP_CAPTION = (
    "Solid: measured speedup, the geometric mean over examples of each example's speedup (the primary measure). "
    "Dashed: Theorem 3.8 from the measured α and c. Dash-dot: the extended model, which also charges the measured "
    "cost of verifying γ+1 tokens. Grey line: no speedup. Bars: the 95% Student t interval over examples. Runs "
    "with a γ policy (adaptive, heuristic) are not drawn here; see Recommended γ."
)
AXIS_CAPTION = (
    "Each line: one configuration (target, draft, γ, T, task) run at several values of this axis and nothing else "
    "changed; points: geometric mean of per-example speedups; bars: 95% Student t intervals over examples. "
    "Whether the gains are consistent is judged in the claims table by paired intervals of the ratios."
)
TARGET_CAPTION = (
    "Each target model's best configuration on each task it ran, smallest model first, chosen on one half of the "
    "examples (split by a hash of each example id) and drawn with the other half's speedup (geometric mean of "
    "per-example speedups; bars: its 95% t interval), so the luck of the pick does not inflate the bar. The "
    "paper expects larger targets (slower passes, same draft cost) to gain more."
)
PERPLEXITY_CAPTION = (
    "Each output's mean negative log-likelihood per token under the target's raw law (its log-perplexity), "
    "baseline (grey) beside speculative (blue); box: quartiles and median. Equal output laws give equal "
    "distributions here; the paired equivalence test of the mean (TOST against a margin in nats/token, the same "
    "prompt and seed per pair), with its power, is in the Perplexity table; its verdict is under each run."
)
ALPHA_CAPTION = (
    "α per draft, task and temperature; black diamonds: the expected acceptance E[Σ min(p, q)] at the "
    "verified positions, which α estimates."
)
HISTOGRAM_CAPTION = (
    "Bars: share of verification steps that accepted n drafts. Dots: the law theory predicts if each "
    "draft were accepted independently with the measured α. A model-free draft that sometimes "
    "proposes fewer than γ tokens piles up mass at small n."
)
TIME_CAPTION = (
    "Speculative decoding's milliseconds per generated token, split into prefill, drafting, target "
    "verification passes and the rest (sampling, bookkeeping); the black tick is the baseline's."
)
QUALITY_CAPTION = (
    "BLEU or ROUGE (0–100) of the baseline and speculative outputs against the task references; whiskers: "
    "95% bootstrap intervals, where the runner computed them (sampling runs)."
)


BATCH_CAPTION = (
    "Solid: measured speedup at each batch size, the geometric mean over batches (at B = 1 over examples) of each "
    "one's tokens/s of batched speculative decoding ÷ the batched baseline's, with its 95 % Student t interval, "
    "per draft, γ and batch policy (ragged: each "
    "row keeps its own accepted prefix; min: every row advances by the batch's minimum); hollow grey points had "
    "suspect timings. Dotted: the measured decode speedup (prefill excluded). Dashed: the batch cost model's "
    "decode speedup (each row's own measured steps, rows leaving as they finish, every pass priced by the "
    "calibrated t(b, k) of its live rows b; at B = 1 the batch-1 model). Grey line: no speedup."
)


def flagged_caption(runs) -> str:
    """The caption's sentence naming the flagged (suspect-timing) runs drawn hollow, or ''."""
    if "timing_suspect" not in runs or not runs["timing_suspect"].astype(bool).any():
        return ""
    names = sorted(runs.loc[runs["timing_suspect"].astype(bool), "run_id"].astype(str))
    return (
        f" Hollow grey markers: runs whose timings failed a check, not to be trusted without a rerun "
        f"({', '.join(names)})."
    )


def ratio_of_sums_caption(runs) -> str:
    """The caption's sentence naming the runs drawn with their ratio of sums (a summary without the primary
    measure, values.primary_speedup), or ''."""
    if not len(runs):
        return ""
    names = sorted(str(r["run_id"]) for _, r in runs.iterrows() if not primary_speedup(r)[2])
    return (
        f" Drawn with their ratio of sums (no geometric mean in their summaries): {', '.join(names)}." if names else ""
    )


AXIS_LABELS = {"max_new_tokens": "new tokens per example", "prompt_length": "prompt length", "batch_size": "batch size"}


def _claim_figures(
    runs, params: dict | None, perplexity: list[dict] | None, taken: list[str], data: ReportData | None
) -> list[tuple]:
    """The figures the claims table links to: speedup against each measured axis, per target, and perplexity."""
    from specbench.report.analysis import AXES, axis_column
    from specbench.report.claims import axis_groups, size_cells

    plan: list[tuple] = []
    for axis in AXES:
        column = axis_column(runs, axis)
        groups = axis_groups(runs, column) if column else []
        if groups and not (axis == "batch_size" and any("batch" in name for name in taken)):
            plan.append(
                (
                    lambda g, c=column, a=axis: fig_axis(g, c, AXIS_LABELS[a]),
                    groups,
                    f"speedup_vs_{axis}",
                    f"Speedup vs {AXIS_LABELS[axis]}",
                    AXIS_CAPTION + flagged_caption(runs) + ratio_of_sums_caption(runs),
                )
            )
    cells = size_cells(data, params or {}) if data is not None else []
    if cells:
        plan.append(
            (
                lambda c: fig_targets(c, params or {}),
                cells,
                "speedup_by_target",
                "Speedup by target model",
                TARGET_CAPTION + flagged_caption(runs),
            )
        )
    if perplexity:
        plan.append(
            (fig_perplexity, perplexity, "perplexity", "Perplexity: baseline vs speculative", PERPLEXITY_CAPTION)
        )
    return plan


PREDICTION_CAPTION = (
    "Each auto run's end-to-end speedup predicted before timing, held out (x: the pilot examples' acceptance "
    "applied to the timed examples' prompts, with its 95 % interval, which includes how acceptance differs between "
    "example sets) against the speedup it measured (y: geometric mean over examples, 95 % t interval). On the "
    "diagonal the prediction was right; the band is ±10 %. Runs from before issue 40 (a cost-model check only) "
    "are not shown."
)


def _auto_runs(runs):
    """The runs that carry a held-out auto prediction (None when there are none). A summary written before issue 40
    has no `auto_check_speedup`, and its `auto_predicted_speedup` was the cost-model check: left out."""
    if "auto_predicted_speedup" not in runs or "auto_check_speedup" not in runs:
        return None
    sel = runs[runs["auto_predicted_speedup"].map(num).notna() & runs["auto_check_speedup"].map(num).notna()]
    return sel if len(sel) else None


def _figure_plan(
    runs,
    curves: list[dict] | None,
    params: dict | None = None,
    perplexity: list[dict] | None = None,
    data: ReportData | None = None,
) -> list[tuple]:
    """(draw, its argument, file stem, title, caption) for every figure these runs call for, in report order."""
    fixed = fixed_gamma(runs)
    plan: list[tuple] = [
        (
            fig_speedup,
            fixed,
            "speedup_vs_gamma",
            "Speedup vs γ",
            SPEEDUP_CAPTION + flagged_caption(fixed) + ratio_of_sums_caption(fixed),
        ),
        (fig_pass_cost, curves, "pass_cost_curve", "Pass-cost curve", PASS_COST_CAPTION),
        (fig_alpha, runs, "alpha", "Acceptance rate α", ALPHA_CAPTION),
    ]
    plan = [step for step in plan if step[1] is not None and len(step[1])]
    plan += [
        (
            lambda task: fig_histograms(runs, task),
            task,
            f"accepted_lengths_{i}",
            f"Accepted lengths: {task}",
            HISTOGRAM_CAPTION,
        )
        for i, task in enumerate(sorted(fixed["task"].unique()))
    ]
    plan.append((fig_time_split, runs, "time_per_token", "Time per token", TIME_CAPTION))
    auto_runs = _auto_runs(runs)
    if auto_runs is not None:
        plan.append((fig_prediction, auto_runs, "auto_prediction", "Auto: predicted vs measured", PREDICTION_CAPTION))
    sampled = set(runs.loc[runs["temperature"].map(num) > 0, "run_id"]) if "temperature" in runs else set()
    short = short_labels(runs)
    qrows = [{**q, "label": short.get(q["run_id"], q["run_id"])} for q in quality_rows(runs) if q["run_id"] in sampled]
    if qrows:  # at T = 0 both engines emit the same tokens: a quality figure would carry no information
        plan.append((fig_quality, qrows, "quality", "Output quality", QUALITY_CAPTION))
    curves = batch_curves(runs)
    if curves:  # named as the claims table's batch figure, so the generic axis figure is not drawn twice
        plan.append(
            (
                fig_batch,
                curves,
                "speedup_vs_batch_size",
                "Speedup vs batch size",
                BATCH_CAPTION + " " + batch_sentence(curves),
            )
        )
    return plan + _claim_figures(runs, params, perplexity, [step[2] for step in plan], data)


def make_figures(
    runs,
    folder: Path,
    curves: list[dict] | None = None,
    params: dict | None = None,
    perplexity: list[dict] | None = None,
    data: ReportData | None = None,
) -> list[RenderedFigure]:
    """Draw and save every figure (PNG and SVG under `folder`); `params` (target → parameters), `perplexity`
    (analysis.perplexity_rows) and `data` (the per-example records a best configuration is chosen and confirmed
    on) add the figures the claims table links to."""
    with figure_style():
        return [
            render_figure(draw(arg), name, title, caption, folder)
            for draw, arg, name, title, caption in _figure_plan(runs, curves, params, perplexity, data)
        ]

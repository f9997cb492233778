"""The report's figures: speedup against γ beside both predictions, pass cost, α, accepted lengths, time, quality.

Each figure is drawn by one function from the table of runs (collect.py) and saved as PNG and SVG;
the PNG bytes are kept to inline into the self-contained HTML. Matplotlib's mathtext is off, so a
`$` in a draft or task name is a dollar sign, not a parse error; the SVG hash salt and a null date
keep the files identical from one report to the next.
"""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from specbench.files import atomic_write_bytes
from specbench.report.analysis import (
    axis_sort_key,
    axis_text,
    batch_curves,
    batch_sentence,
    quality_rows,
    short_labels,
)
from specbench.report.collect import fixed_gamma, num


@dataclass
class RenderedFigure:
    name: str  # file stem under figures/
    title: str
    caption: str
    png: bytes = b""


def _rc():
    import matplotlib

    return matplotlib.rc_context(
        {
            "text.parse_math": False,
            "svg.hashsalt": "specbench",
            "font.size": 9,
            "axes.titlesize": 10,
            "axes.grid": True,
            "grid.alpha": 0.3,
        }
    )


def _new_figure(width: float, height: float):
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=(width, height), layout="constrained")


def _panels(fig, n: int, ncols: int):
    nrows = math.ceil(n / ncols)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return flat[:n]


def _colors(labels: list[str]) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"] if len(labels) <= 10 else colormaps["tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _speedup_points(g):
    """One point per γ of a series: mean speedup and predictions over duplicate runs, the widest interval, and
    whether every run at that γ is flagged (suspect timing)."""
    import numpy as np

    rows = []
    for gamma, cell in g.groupby("gamma", sort=True):
        speed = cell["speedup"].map(num)
        cis = [ci for ci in cell.get("speedup_ci95", []) if isinstance(ci, (list, tuple)) and len(ci) == 2]
        lo = min((num(c[0]) for c in cis), default=float("nan"))
        hi = max((num(c[1]) for c in cis), default=float("nan"))
        rows.append(
            {
                "gamma": gamma,
                "speedup": speed.mean(),
                "lo": lo,
                "hi": hi,
                "predicted_speedup": cell["predicted_speedup"].map(num).mean(),
                "predicted_speedup_extended": cell["predicted_speedup_extended"].map(num).mean(),
                "suspect": bool(cell["timing_suspect"].astype(bool).all()) if "timing_suspect" in cell else False,
            }
        )
    import pandas as pd

    pts = pd.DataFrame(rows)
    pts["err_lo"] = np.clip(np.nan_to_num(pts["speedup"] - pts["lo"]), 0, None)
    pts["err_hi"] = np.clip(np.nan_to_num(pts["hi"] - pts["speedup"]), 0, None)
    return pts


def draw_speedups(ax, x, pts, color, label: str | None) -> None:
    """Measured speedups with their 95 % intervals as error bars; flagged (suspect) points hollow and grey."""
    ax.plot(x, pts["speedup"], "-", color=color, label=label, lw=1.8)
    ax.errorbar(
        x, pts["speedup"], yerr=[pts["err_lo"], pts["err_hi"]], fmt="none", ecolor=color, elinewidth=1.0, capsize=3
    )
    ok, bad = ~pts["suspect"].to_numpy(), pts["suspect"].to_numpy()
    ax.plot([v for v, k in zip(x, ok) if k], pts["speedup"][ok], "o", color=color, ms=5)
    if bad.any():
        ax.plot([v for v, k in zip(x, bad) if k], pts["speedup"][bad], "o", mfc="white", mec="0.55", mew=1.4, ms=7)


def _speedup_legend(fig, colors: dict) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[label], ls="-", marker="o", label=label) for label in colors]
    handles += [
        Line2D([], [], color="0.2", ls="-", marker="o", label="measured, 95% CI bars"),
        Line2D([], [], color="0.55", ls="none", marker="o", mfc="white", label="suspect timing (hollow)"),
        Line2D([], [], color="0.2", ls="--", label="Theorem 3.8 from measured α, c"),
        Line2D([], [], color="0.2", ls="-.", marker="x", label="extended: + measured verify cost"),
    ]
    # as many columns as fit the figure's width (7 pt text: ~0.055 in a character, plus the marker): never clipped
    column_in = 0.055 * max(len(str(h.get_label())) for h in handles) + 0.6
    ncol = max(1, min(3, len(handles), int(fig.get_figwidth() // column_in)))
    fig.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize=7)


def fig_speedup(runs) -> object:
    """Measured speedup vs γ per task with 95 % intervals: one line per series, Theorem 3.8 and the extended
    model dashed, flagged cells hollow."""
    runs = fixed_gamma(runs)
    tasks = sorted(runs["task"].unique())
    colors = _colors(sorted(runs["series"].unique()))
    rows = math.ceil(len(tasks) / 3)
    fig = _new_figure(
        min(5.6 * len(tasks), 16.8) if len(tasks) > 1 else 7.0,
        4.2 * rows + 0.25 * (len(colors) + 4) + 0.3,  # room for a one-column legend
    )
    for ax, task in zip(_panels(fig, len(tasks), min(len(tasks), 3)), tasks):
        sub = runs[runs["task"] == task]
        for label, g in sub.groupby("series", sort=True):
            pts = _speedup_points(g)
            x, color = list(pts["gamma"]), colors[label]
            draw_speedups(ax, x, pts, color, None)
            ax.plot(x, pts["predicted_speedup"], "--", color=color, lw=1.2)
            ax.plot(x, pts["predicted_speedup_extended"], "-.", color=color, lw=1.2, marker="x", ms=4)
        ax.axhline(1.0, color="0.4", lw=0.8)
        ax.set_title(f"Speedup vs γ: {task}")
        ax.set_xlabel("draft length γ (tokens drafted per target pass)")
        ax.set_ylabel("walltime speedup (× target alone)")
        ax.set_xticks(sorted(int(g) for g in sub["gamma"].unique()))
    _speedup_legend(fig, colors)
    return fig


def fig_axis(groups: list[list], column: str, label: str) -> object:
    """Speedup against one sweep axis (new tokens, prompt length, batch size), one line per configuration
    that varied only that axis; 95 % intervals as bars, flagged cells hollow."""
    import pandas as pd

    from specbench.report.claims import config_text, interval

    names = [config_text(rows[0]) for rows in groups]
    colors = _colors(names)
    values = sorted({r[column] for rows in groups for r in rows}, key=axis_sort_key)
    fig = _new_figure(7.5, 4.2 + 0.22 * len(groups))
    ax = fig.subplots()
    for name, rows in zip(names, groups):
        pts = pd.DataFrame(
            [
                {
                    "speedup": interval(r)[0],
                    "err_lo": interval(r)[0] - interval(r)[1],
                    "err_hi": interval(r)[2] - interval(r)[0],
                    "suspect": bool(r.get("timing_suspect")),
                }
                for r in rows
            ]
        )
        draw_speedups(ax, [values.index(r[column]) for r in rows], pts, colors[name], name)
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.set_xticks(range(len(values)), [axis_text(v) for v in values])
    ax.set_xlabel(label)
    ax.set_ylabel("walltime speedup (× target alone)")
    ax.set_title(f"Speedup vs {label} (bars: 95% bootstrap CI)")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=1, fontsize=7)
    return fig


def fig_batch(curves: list[dict]) -> object:
    """Speedup against batch size per task: one colour per draft, γ and policy; the measured speedup with its
    95 % interval (solid, suspect points hollow), the measured decode speedup (dotted) and the cost model's
    prediction of it (dashed)."""
    import pandas as pd
    from matplotlib.lines import Line2D

    tasks = sorted({c["task"] for c in curves})
    colors = _colors(sorted({c["label"] for c in curves}))
    fig = _new_figure(7.5, 3.8 * len(tasks) + 0.25 * (len(colors) + 4))
    sizes = sorted({p["batch_size"] for c in curves for p in c["points"]})
    for ax, task in zip(_panels(fig, len(tasks), 1), tasks):
        for c in (c for c in curves if c["task"] == task):
            xs = [p["batch_size"] for p in c["points"]]
            pts = pd.DataFrame(c["points"])
            pts["err_lo"] = (pts["speedup"] - pts["ci_low"]).fillna(0.0).clip(lower=0.0)
            pts["err_hi"] = (pts["ci_high"] - pts["speedup"]).fillna(0.0).clip(lower=0.0)
            draw_speedups(ax, xs, pts, colors[c["label"]], None)
            ax.plot(xs, pts["decode_speedup"], ":", color=colors[c["label"]], lw=1.2)
            ax.plot(xs, pts["predicted"], "--", color=colors[c["label"]], lw=1.0, alpha=0.8)
        ax.axhline(1.0, color="0.4", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(b) for b in sizes])
        ax.set_title(f"Speedup vs batch size: {task}")
        ax.set_xlabel("batch size B (examples decoded together)")
        ax.set_ylabel("walltime speedup (× batched target alone)")
    handles = [Line2D([], [], color=colors[label], ls="-", marker="o", label=label) for label in colors]
    handles += [
        Line2D([], [], color="0.2", ls="-", marker="o", label="measured, 95% CI bars"),
        Line2D([], [], color="0.55", ls="none", marker="o", mfc="white", label="suspect timing (hollow)"),
        Line2D([], [], color="0.2", ls=":", label="measured decode speedup (prefill excluded)"),
        Line2D([], [], color="0.2", ls="--", label="batch cost model's decode speedup"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=7)
    return fig


def fig_targets(cells: list[tuple[str, list]], params: dict[str, float]) -> object:
    """Each target's best speedup per task, smallest model first, with its 95 % interval."""
    import numpy as np

    from specbench.report.claims import interval

    fig = _new_figure(max(6.0, 1.8 * sum(len(rows) for _, rows in cells) + 1.5), 4.4)
    ax = fig.subplots()
    x, ticks = 0.0, []
    for task, rows in cells:
        for r in rows:
            s, lo, hi = interval(r)
            suspect = bool(r.get("timing_suspect"))
            ax.bar(
                x,
                s,
                0.7,
                color="white" if suspect else "tab:blue",
                edgecolor="0.55" if suspect else "tab:blue",
                yerr=np.array([[s - lo], [hi - s]]),
                capsize=4,
            )
            ticks.append((x, f"{r['target']}\n{params[str(r['target'])] / 1e6:,.0f}M params\n{task}, {r['draft']}"))
            x += 1
        x += 0.5
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=8)
    ax.set_ylabel("best walltime speedup (× target alone)")
    ax.set_title("Best speedup per target model (bars: 95% bootstrap CI)")
    return fig


def fig_perplexity(rows: list[dict]) -> object:
    """Per-example mean NLL under the target, baseline beside speculative, per T > 0 run (box and points)."""
    import numpy as np

    fig = _new_figure(max(6.5, 1.3 * len(rows) + 2.5), 4.6)
    ax = fig.subplots()
    for i, r in enumerate(rows):
        for offset, engine, color in ((-0.18, "baseline", "0.45"), (0.18, "speculative", "tab:blue")):
            vals = np.asarray(r[engine], dtype=float)
            if not len(vals):
                continue
            ax.boxplot(
                [vals],
                positions=[i + offset],
                widths=0.3,
                showfliers=False,
                patch_artist=True,
                boxprops={"facecolor": "white", "edgecolor": color},
                medianprops={"color": color},
            )
            jitter = np.random.default_rng(i).uniform(-0.08, 0.08, len(vals))
            ax.plot(i + offset + jitter, vals, ".", color=color, ms=3, alpha=0.7, label=engine if i == 0 else None)
    ax.set_xticks(
        range(len(rows)),
        [
            f"{r['run_id']}\np = {r['check'].p_value:.2g}" if r["check"].p_value is not None else r["run_id"]
            for r in rows
        ],
        fontsize=7,
        rotation=20,
        ha="right",
    )
    ax.set_ylabel("mean NLL per token under the target (nats)")
    ax.set_title("Perplexity of sampled outputs: baseline vs speculative (Mann-Whitney p below each run)")
    ax.legend(fontsize=7)
    return fig


def fig_pass_cost(curves: list[dict]) -> object:
    """t(k)/t(1) against k, one line per distinct calibration; dashed: the paper's free verification, t(k) = t(1)."""
    colors = _colors([c["label"] for c in curves])
    fig = _new_figure(7.5, 4.4 + 0.2 * len(curves))
    ax = fig.subplots()
    ks = sorted({k for c in curves for k in c["curve"]})
    for c in curves:
        x = list(c["curve"])
        ax.plot(x, [c["curve"][k] for k in x], "o-", color=colors[c["label"]], lw=1.6, ms=4, label=c["label"])
    ax.axhline(1.0, color="0.3", ls="--", lw=1.0, label="t(k) = t(1): free verification (the paper's assumption)")
    ax.set_xticks(ks)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("k: new tokens in one target pass (verifying γ drafts takes k = γ+1)")
    ax.set_ylabel("t(k) / t(1): cost in single-token passes")
    ax.set_title("Target pass cost vs tokens per pass (calibrated before timing)")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=1, fontsize=7)
    return fig


def fig_alpha(runs) -> object:
    """α per draft, task and temperature: mean over γ cells, whiskers from the smallest to the largest cell."""
    import numpy as np

    groups = sorted({(t, float(temp)) for t, temp in zip(runs["task"], runs["temperature"])})
    drafts = sorted(runs["draft"].unique())
    colors = _colors(drafts)
    width = 0.8 / len(drafts)
    fig = _new_figure(max(6.5, 1.2 * len(groups) * max(1, len(drafts) / 2) + 2), 4.4)
    ax = fig.subplots()
    for i, draft in enumerate(drafts):
        means, lo, hi, expected = [], [], [], []
        for task, temp in groups:
            sel = runs[(runs["task"] == task) & (runs["temperature"] == temp) & (runs["draft"] == draft)]
            a = sel["alpha"].map(num).dropna()
            means.append(a.mean() if len(a) else np.nan)
            lo.append(a.mean() - a.min() if len(a) else 0.0)
            hi.append(a.max() - a.mean() if len(a) else 0.0)
            e = sel["alpha_expected"].map(num).dropna()
            expected.append(e.mean() if len(e) else np.nan)
        x = np.arange(len(groups)) + (i - (len(drafts) - 1) / 2) * width
        ax.bar(x, means, width * 0.9, yerr=[lo, hi], capsize=3, color=colors[draft], label=draft)
        ax.plot(x, expected, "D", color="black", ms=4, label="E[Σ min(p, q)] (α expected)" if i == 0 else None)
    ax.set_xticks(np.arange(len(groups)), [f"{t}\nT={temp:g}" for t, temp in groups])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("acceptance rate α (accepted / acceptance trials)")
    ax.set_xlabel("task and temperature")
    ax.set_title("Acceptance rate α per draft\n(bars: mean over the γ cells; whiskers: their min and max)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _histogram(value, gamma: int) -> list[float] | None:
    if not isinstance(value, (list, tuple)) or len(value) != gamma + 1:
        return None
    counts = [num(v) for v in value]
    return counts if all(x >= 0 for x in counts) else None


def fig_histograms(runs, task: str) -> object:
    """Accepted drafts per step, measured (bars) against the capped geometric law for the measured α (dots)."""
    from specbench.decoding import theory

    sub = fixed_gamma(runs)
    sub = sub[sub["task"] == task]
    series, gammas = sorted(sub["series"].unique()), sorted(sub["gamma"].unique())
    fig = _new_figure(max(6.0, 2.3 * len(gammas) + 0.6), 2.0 * len(series) + 1.1)
    axes = fig.subplots(len(series), len(gammas), squeeze=False)
    for r, label in enumerate(series):
        for col, gamma in enumerate(gammas):
            ax = axes[r][col]
            cell = sub[(sub["series"] == label) & (sub["gamma"] == gamma)]
            ax.set_title("\n".join(textwrap.wrap(f"{label}, γ={gamma}", 36)), fontsize=7)  # a 2.3 in panel
            if r == len(series) - 1:
                ax.set_xlabel("drafts accepted per step")
            if col == 0:
                ax.set_ylabel("share of steps")
            if cell.empty:
                ax.set_visible(False)
                continue
            row = cell.iloc[0]
            counts = _histogram(row["accepted_length_histogram"], int(gamma))
            if not counts or sum(counts) == 0:
                ax.text(0.5, 0.5, "no verification steps", ha="center", va="center", transform=ax.transAxes)
                continue
            n = range(int(gamma) + 1)
            ax.bar(
                n,
                [x / sum(counts) for x in counts],
                color="tab:blue",
                alpha=0.7,
                label=f"measured ({int(sum(counts))} steps)",
            )
            alpha = num(row["alpha"])
            if 0.0 <= alpha <= 1.0:
                ax.plot(
                    n,
                    theory.accepted_length_law(alpha, int(gamma)),
                    "o",
                    color="tab:red",
                    ms=4,
                    label=f"law, α={alpha:.2f}",
                )
            ax.set_ylim(0, 1.0)
            ax.set_xticks(list(n))
            ax.legend(fontsize=6)
    fig.suptitle(f"Accepted-length histograms: {task}\n(law: (1−α)αⁿ for n < γ, α^γ for n = γ)", fontsize=9)
    return fig


TIME_PARTS = (
    ("prefill", "prefill (time to first token)", "#9e9e9e"),
    ("draft", "drafting", "#f28e2b"),
    ("verify", "verification (target passes)", "#4e79a7"),
    ("overhead", "overhead (sampling, bookkeeping)", "#59a14f"),
)


def time_parts(sub) -> dict:
    """Speculative milliseconds per generated token per part, and the baseline's, for each run of `sub`."""
    import numpy as np

    tokens = sub["speculative_tokens"].map(num).replace(0, np.nan)
    ms = lambda col: (sub[col].map(num) / tokens * 1e3).fillna(0.0).to_numpy()  # noqa: E731
    parts = {"draft": ms("draft_s"), "verify": ms("verify_s"), "overhead": ms("overhead_s")}
    parts["prefill"] = np.clip(ms("speculative_s") - parts["draft"] - parts["verify"] - parts["overhead"], 0.0, None)
    parts["baseline"] = (
        sub["baseline_s"].map(num) / sub["baseline_tokens"].map(num).replace(0, np.nan) * 1e3
    ).to_numpy()
    return parts


def fig_time_split(runs) -> object:
    """Speculative milliseconds per generated token split into prefill, draft, verify and overhead (horizontal
    stacked bars, one per run, labelled in full); the baseline's as a black tick on each bar."""
    import numpy as np

    tasks = sorted(runs["task"].unique())
    heights = [0.55 * (runs["task"] == t).sum() + 1.4 for t in tasks]
    fig = _new_figure(10.0, sum(heights) + 0.6)
    axes = fig.subplots(len(tasks), 1, squeeze=False, height_ratios=heights)
    for ax, task in zip([a[0] for a in axes], tasks):
        sub = runs[runs["task"] == task]
        parts, y = time_parts(sub), np.arange(len(sub))
        left = np.zeros(len(sub))
        for key, label, color in TIME_PARTS:
            shown = label if np.nanmax(parts[key], initial=0.0) > 0 else "_nolegend_"  # no zero-width entries
            ax.barh(y, parts[key], 0.72, left=left, color=color, edgecolor="white", linewidth=0.6, label=shown)
            left += parts[key]
        ax.plot(parts["baseline"], y, "|", color="black", ms=16, mew=2.2, label="baseline (target alone)")
        short = short_labels(runs)
        ax.set_yticks(y, [short[r] for r in sub["run_id"]], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, max(float(np.nanmax(np.append(left, parts["baseline"]))) * 1.08, 1e-6))
        ax.set_xlabel("milliseconds per generated token")
        ax.set_title(f"Where the time goes: {task}")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


METRIC_NAMES = {"bleu": "BLEU", "rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L", "chrf": "chrF"}


def fig_quality(rows: list[dict]) -> object:
    import numpy as np

    metrics = sorted({r["metric"] for r in rows})
    fig = _new_figure(max(6.5, 0.6 * len(rows) / max(1, len(metrics)) + 3), 3.2 * len(metrics))
    for ax, metric in zip(_panels(fig, len(metrics), 1), metrics):
        sub = [r for r in rows if r["metric"] == metric]
        name = METRIC_NAMES.get(metric, metric)
        x = np.arange(len(sub))
        for offset, engine, color in ((-0.2, "baseline", "0.5"), (0.2, "speculative", "tab:blue")):
            vals = np.array([r[engine] for r in sub])
            ci = [r[f"{engine}_ci"] for r in sub]
            err = np.array(
                [
                    [v - c[0], c[1] - v] if isinstance(c, (list, tuple)) and len(c) == 2 else [0, 0]
                    for v, c in zip(vals, ci)
                ]
            ).T
            ax.bar(x + offset, vals, 0.38, yerr=np.clip(err, 0, None), capsize=3, color=color, label=engine)
        ax.set_xticks(x, [r.get("label", r["run_id"]) for r in sub], fontsize=7, rotation=30, ha="right")
        ax.set_ylabel(name)
        ax.set_title(f"{name}: baseline vs speculative (whiskers: 95% CI)")
        ax.legend(fontsize=7)
    return fig


def render_figure(fig, name: str, title: str, caption: str, folder: Path) -> RenderedFigure:
    """Save PNG and SVG files; keep the PNG bytes to inline into the HTML."""
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    png = buf.getvalue()
    atomic_write_bytes(folder / f"{name}.png", lambda tmp: tmp.write_bytes(png))
    atomic_write_bytes(folder / f"{name}.svg", lambda tmp: fig.savefig(tmp, format="svg", metadata={"Date": None}))
    return RenderedFigure(name, title, caption, png)


PASS_COST_CAPTION = (
    "Each line: one calibration (the target's median time for a pass over k new tokens after a context of the "
    "task's typical length, divided by the time for one), per dtype, context and machine; runs and auto choices "
    "that share a calibration share a line. Dashed: t(k) = t(1), the free verification the paper's Theorem 3.8 "
    "assumes. Where a line rises above it, verifying γ drafts costs more than one step and the best γ is smaller "
    "than the theorem says; a drop is a kernel that handles that k better."
)
SPEEDUP_CAPTION = (
    "Solid: measured walltime speedup. Dashed: Theorem 3.8 from the measured α and c. Dash-dot: the "
    "extended model, which also charges the measured cost of verifying γ+1 tokens. Grey line: no speedup. "
    "Bars: the 95% bootstrap interval over examples. Runs with a γ policy (adaptive, heuristic) are not drawn "
    "here; see Recommended γ."
)
AXIS_CAPTION = (
    "Each line: one configuration (target, draft, γ, T, task) run at several values of this axis and nothing else "
    "changed; bars: 95% bootstrap intervals over examples. Consistent gains mean intervals that overlap."
)
TARGET_CAPTION = (
    "The best trustworthy speedup of each target model on each task it ran, smallest model first; bars: 95% "
    "bootstrap intervals. The paper expects larger targets (slower passes, same draft cost) to gain more."
)
PERPLEXITY_CAPTION = (
    "Each output's mean negative log-likelihood per token under the target's raw law (its log-perplexity), "
    "baseline (grey) beside speculative (blue); box: quartiles and median. Equal output laws give equal "
    "distributions here; the Mann-Whitney U test of that, with its power, is in the Perplexity table."
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
    "Solid: measured walltime speedup at each batch size (total tokens/s of batched speculative decoding ÷ the "
    "batched baseline's) with its 95 % bootstrap interval over batches, per draft, γ and batch policy (ragged: each "
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


AXIS_LABELS = {"max_new_tokens": "new tokens per example", "prompt_length": "prompt length", "batch_size": "batch size"}


def _claim_figures(runs, params: dict | None, perplexity: list[dict] | None, taken: list[str]) -> list[tuple]:
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
                    AXIS_CAPTION + flagged_caption(runs),
                )
            )
    cells = size_cells(runs, params or {})
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
    "Each auto run's end-to-end speedup predicted before timing (x: on pilot examples that did not choose the "
    "configuration, with its 95 % prediction interval) against the speedup it measured (y: geometric mean over "
    "examples, BCa 95 % interval). On the diagonal the prediction was right; the band is ±10 %."
)


def _interval(value) -> tuple[float, float]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return num(value[0]), num(value[1])
    return math.nan, math.nan


def fig_prediction(runs) -> object:
    """Predicted (auto_predicted_speedup) against measured (speedup_geomean) for every auto run, with intervals."""
    fig = _new_figure(6.0, 5.0)
    ax = fig.subplots()
    labels = [f"{t} · {d} γ{g}" for t, d, g in zip(runs["task"], runs["draft"], runs["gamma"])]
    colors = _colors(sorted(set(labels)))
    lo_all, hi_all = [], []
    for (_, row), label in zip(runs.iterrows(), labels):
        x, y = num(row["auto_predicted_speedup"]), num(row.get("speedup_geomean"))
        if math.isnan(x) or math.isnan(y):
            continue
        xl, xh = _interval(row.get("auto_predicted_interval"))
        yl, yh = _interval(row.get("speedup_geomean_ci95"))
        xerr = [[x - xl], [xh - x]] if not math.isnan(xl) else None
        yerr = [[y - yl], [yh - y]] if not math.isnan(yl) else None
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", color=colors[label], capsize=3, label=label)
        lo_all += [v for v in (x, y, xl, yl) if not math.isnan(v)]
        hi_all += [v for v in (x, y, xh, yh) if not math.isnan(v)]
    lo, hi = (min(lo_all) * 0.9, max(hi_all) * 1.1) if lo_all else (0.5, 2.0)
    ax.plot([lo, hi], [lo, hi], "--", color="0.3", lw=1.0, label="measured = predicted")
    ax.fill_between([lo, hi], [0.9 * lo, 0.9 * hi], [1.1 * lo, 1.1 * hi], color="0.85", alpha=0.5, lw=0)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted speedup (before timing, held-out pilot examples)")
    ax.set_ylabel("measured speedup (geometric mean over the run's examples)")
    ax.set_title("Auto choice: predicted vs measured speedup")
    ax.legend(fontsize=7, loc="upper left")
    return fig


def _auto_runs(runs):
    """The runs that carry an auto prediction (None when there are none)."""
    if "auto_predicted_speedup" not in runs:
        return None
    sel = runs[runs["auto_predicted_speedup"].map(num).notna()]
    return sel if len(sel) else None


def _figure_plan(
    runs, curves: list[dict] | None, params: dict | None = None, perplexity: list[dict] | None = None
) -> list[tuple]:
    """(draw, its argument, file stem, title, caption) for every figure these runs call for, in report order."""
    fixed = fixed_gamma(runs)
    plan: list[tuple] = [
        (fig_speedup, fixed, "speedup_vs_gamma", "Speedup vs γ", SPEEDUP_CAPTION + flagged_caption(fixed)),
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
    return plan + _claim_figures(runs, params, perplexity, [step[2] for step in plan])


def make_figures(
    runs,
    folder: Path,
    curves: list[dict] | None = None,
    params: dict | None = None,
    perplexity: list[dict] | None = None,
) -> list[RenderedFigure]:
    """Draw and save every figure (PNG and SVG under `folder`); `params` (target → parameters) and `perplexity`
    (analysis.perplexity_rows) add the figures the claims table links to."""
    with _rc():
        return [
            render_figure(draw(arg), name, title, caption, folder)
            for draw, arg, name, title, caption in _figure_plan(runs, curves, params, perplexity)
        ]

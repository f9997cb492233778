"""The speedup figures: against γ beside both predictions, against one sweep axis, against batch size, per target
model, and the auto choice's predicted against measured speedup.

Each draws measured speedups with their 95 % intervals (kit.draw_speedups), so a point and its
uncertainty are always shown together.
"""

from __future__ import annotations

import math

from specbench.report.analysis import axis_sort_key, axis_text
from specbench.report.figures.kit import draw_speedups, grid_panels, new_figure, palette
from specbench.report.run_frame import fixed_gamma
from specbench.report.selection import config_text, interval
from specbench.report.values import num, primary_speedup


def _speedup_points(g):
    """One point per γ of a series: the mean of the primary measure (values.primary_speedup) and of the predictions
    over duplicate runs, the widest interval, and whether every run at that γ is flagged (suspect timing)."""
    import numpy as np

    rows = []
    for gamma, cell in g.groupby("gamma", sort=True):
        measured = [primary_speedup(r) for _, r in cell.iterrows()]
        values = [m[0] for m in measured if not math.isnan(m[0])]
        speed = sum(values) / len(values) if values else float("nan")
        cis = [ci for _, ci, _ in measured if isinstance(ci, (list, tuple)) and len(ci) == 2]
        lo = min((num(c[0]) for c in cis), default=float("nan"))
        hi = max((num(c[1]) for c in cis), default=float("nan"))
        rows.append(
            {
                "gamma": gamma,
                "speedup": speed,
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
    colors = palette(sorted(runs["series"].unique()))
    rows = math.ceil(len(tasks) / 3)
    fig = new_figure(
        min(5.6 * len(tasks), 16.8) if len(tasks) > 1 else 7.0,
        4.2 * rows + 0.25 * (len(colors) + 4) + 0.3,  # room for a one-column legend
    )
    for ax, task in zip(grid_panels(fig, len(tasks), min(len(tasks), 3)), tasks):
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
        ax.set_ylabel("speedup, geometric mean over examples (× target alone)")
        ax.set_xticks(sorted(int(g) for g in sub["gamma"].unique()))
    _speedup_legend(fig, colors)
    return fig


def fig_axis(groups: list[list], column: str, label: str) -> object:
    """Speedup against one sweep axis (new tokens, prompt length, batch size), one line per configuration
    that varied only that axis; 95 % intervals as bars, flagged cells hollow."""
    import pandas as pd

    names = [config_text(rows[0]) for rows in groups]
    colors = palette(names)
    values = sorted({r[column] for rows in groups for r in rows}, key=axis_sort_key)
    fig = new_figure(7.5, 4.2 + 0.22 * len(groups))
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
    ax.set_ylabel("speedup, geometric mean over examples (× target alone)")
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
    colors = palette(sorted({c["label"] for c in curves}))
    fig = new_figure(7.5, 3.8 * len(tasks) + 0.25 * (len(colors) + 4))
    sizes = sorted({p["batch_size"] for c in curves for p in c["points"]})
    for ax, task in zip(grid_panels(fig, len(tasks), 1), tasks):
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
        ax.set_ylabel("speedup, geometric mean over batches (× batched target alone)")
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
    """Each target's best configuration per task (claims.size_cells: chosen on one half of the examples), drawn
    with the other half's geometric-mean speedup and its 95 % interval, smallest model first."""
    import numpy as np

    fig = new_figure(max(6.0, 1.8 * sum(len(rows) for _, rows in cells) + 1.5), 4.4)
    ax = fig.subplots()
    x, ticks = 0.0, []
    for task, rows in cells:
        for r, est in rows:
            s = est.value
            lo, hi = (est.low, est.high) if est.has_interval else (s, s)
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
    ax.set_ylabel("best configuration's speedup on held-out examples (×)")
    ax.set_title("Best speedup per target model, confirmed on the other half (bars: 95% t CI)")
    return fig


def _interval(value) -> tuple[float, float]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return num(value[0]), num(value[1])
    return math.nan, math.nan


def fig_prediction(runs) -> object:
    """Predicted, held out (auto_predicted_speedup), against measured (speedup_geomean) for every auto run."""
    fig = new_figure(6.0, 5.0)
    ax = fig.subplots()
    labels = [f"{t} · {d} γ{g}" for t, d, g in zip(runs["task"], runs["draft"], runs["gamma"])]
    colors = palette(sorted(set(labels)))
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
    ax.set_xlabel("predicted speedup, held out (before timing: the pilot's acceptance on the timed prompts)")
    ax.set_ylabel("measured speedup (geometric mean over the run's examples)")
    ax.set_title("Auto choice: predicted vs measured speedup")
    ax.legend(fontsize=7, loc="upper left")
    return fig

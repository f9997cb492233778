"""The figures behind a speedup: the target's pass cost, α per draft, accepted-length histograms against the law,
where the time per token goes, output quality and perplexity, baseline beside speculative.

They explain a measured speedup (why it is what it is) rather than state it; speedup.py states it.
"""

from __future__ import annotations

import textwrap

from specbench.report.analysis import short_labels
from specbench.report.figures.kit import grid_panels, new_figure, palette
from specbench.report.run_frame import fixed_gamma
from specbench.report.values import num


def fig_perplexity(rows: list[dict]) -> object:
    """Per-example mean NLL under the target, baseline beside speculative, per T > 0 run (box and points)."""
    import numpy as np

    fig = new_figure(max(6.5, 1.3 * len(rows) + 2.5), 4.6)
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
        [f"{r['run_id']}\n{r['equivalence'].verdict}" for r in rows],
        fontsize=7,
        rotation=20,
        ha="right",
    )
    ax.set_ylabel("mean NLL per token under the target (nats)")
    ax.set_title("Perplexity of sampled outputs: baseline vs speculative (paired TOST verdict below each run)")
    ax.legend(fontsize=7)
    return fig


def fig_pass_cost(curves: list[dict]) -> object:
    """t(k)/t(1) against k, one line per distinct calibration; dashed: the paper's free verification, t(k) = t(1)."""
    colors = palette([c["label"] for c in curves])
    fig = new_figure(7.5, 4.4 + 0.2 * len(curves))
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
    colors = palette(drafts)
    width = 0.8 / len(drafts)
    fig = new_figure(max(6.5, 1.2 * len(groups) * max(1, len(drafts) / 2) + 2), 4.4)
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
    fig = new_figure(max(6.0, 2.3 * len(gammas) + 0.6), 2.0 * len(series) + 1.1)
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
    fig = new_figure(10.0, sum(heights) + 0.6)
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
    fig = new_figure(max(6.5, 0.6 * len(rows) / max(1, len(metrics)) + 3), 3.2 * len(metrics))
    for ax, metric in zip(grid_panels(fig, len(metrics), 1), metrics):
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

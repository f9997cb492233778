"""What every report figure shares: one matplotlib style, figure and panel helpers, colours, the speedup markers
(95 % interval bars; flagged runs hollow), and saving a figure as PNG and SVG.

Matplotlib's mathtext is off, so a `$` in a draft or task name is a dollar sign, not a parse error; the SVG
hash salt and a null date keep the files identical from one report to the next. The PNG bytes are kept to
inline into the self-contained HTML.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

from specbench.files import atomic_write_bytes


@dataclass
class RenderedFigure:
    name: str  # file stem under figures/
    title: str
    caption: str
    png: bytes = b""


def figure_style():
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


def new_figure(width: float, height: float):
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=(width, height), layout="constrained")


def grid_panels(fig, n: int, ncols: int):
    nrows = math.ceil(n / ncols)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return flat[:n]


def palette(labels: list[str]) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"] if len(labels) <= 10 else colormaps["tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


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


def render_figure(fig, name: str, title: str, caption: str, folder: Path) -> RenderedFigure:
    """Save PNG and SVG files; keep the PNG bytes to inline into the HTML."""
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    png = buf.getvalue()
    atomic_write_bytes(folder / f"{name}.png", lambda tmp: tmp.write_bytes(png))
    atomic_write_bytes(folder / f"{name}.svg", lambda tmp: fig.savefig(tmp, format="svg", metadata={"Date": None}))
    return RenderedFigure(name, title, caption, png)

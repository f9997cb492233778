"""Write the report: its blocks as report.md and as one self-contained report.html, and `write_report`, the entry.

The report is built once as (kind, payload) blocks (sections.py: one small function per section) and
each block list is rendered twice. The HTML comes from a jinja2 template (templates/report.html.j2)
with autoescape on, so every string that came from a model, a task or the user (outputs, references,
draft and task names, run ids, check names) is escaped without any call site having to remember it.
Markdown passes raw HTML through, so it is escaped the same way there, plus the pipes and newlines
that would break a table row.

Theory sits beside measurement, never instead of it: each measured speedup is shown with Theorem
3.8's prediction from the measured α and c, and with the extended model that also uses the measured
cost of a verification pass.
"""

from __future__ import annotations

import base64
import html
import numbers
import re
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.report.analysis import perplexity_rows, target_params
from specbench.report.collect import Skipped, collect
from specbench.report.figures.plan import make_figures
from specbench.report.sections import build_blocks
from specbench.report.tables import Link, Table
from specbench.report.values import cell_text

# --------------------------------------------------------------------------- Markdown and HTML


def md_escape(value) -> str:
    """Markdown renders raw HTML, so escape it like HTML; pipes and newlines would break table rows."""
    return html.escape(cell_text(value), quote=False).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _md_cell(value) -> str:
    if isinstance(value, Link):
        return f"[{md_escape(value.text)}]({value.md_href})"
    return md_escape(value)


def _md_table(table: Table) -> list[str]:
    return (
        ["| " + " | ".join(md_escape(c) for c in table.columns) + " |", "|" + "---|" * len(table.columns)]
        + ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in table.rows]
        + [""]
    )


def _md_block(kind: str, payload) -> list[str]:
    if kind in ("h1", "h2"):
        return [f"{'#' * int(kind[1])} {md_escape(payload)}\n"]
    if kind == "p":
        return [f"{md_escape(payload)}\n"]
    if kind == "list":
        return ["\n".join(f"- {md_escape(item)}" for item in payload) + "\n"]
    if kind == "table":
        return _md_table(payload)
    if kind == "details":  # HTML folds it; Markdown shows it under its summary
        summary, table = payload
        return [f"*{md_escape(summary)}:*\n", *_md_table(table)]
    if kind == "figure":
        return [
            f"![{md_escape(payload.title)}](figures/{payload.name}.png)\n",
            f"*{md_escape(payload.caption)}* (also [SVG](figures/{payload.name}.svg))\n",
        ]
    raise ValueError(f"unknown block kind {kind!r}")


def to_markdown(blocks: list[tuple]) -> str:
    return "\n".join(line for kind, payload in blocks for line in _md_block(kind, payload))


def _is_numeric(value) -> bool:
    """Right-aligned in a table: numbers, not booleans (which read yes/no)."""
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _html_environment():
    """The jinja2 environment of templates/: autoescape on for every template, whatever its file name."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("specbench.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = cell_text
    env.filters["base64"] = lambda data: base64.b64encode(data).decode("ascii")
    env.tests["numeric"] = _is_numeric
    env.tests["link"] = lambda value: isinstance(value, Link)
    env.filters["slug"] = lambda text: re.sub(r"[^a-z0-9]+", "-", cell_text(text).lower()).strip("-") or "section"
    return env


def to_html(blocks: list[tuple]) -> str:
    title = next((p for k, p in blocks if k == "h1"), "specbench report")
    return _html_environment().get_template("report.html.j2").render(title=title, blocks=blocks)


# --------------------------------------------------------------------------- entry point


@dataclass
class ReportOutcome:
    out: Path
    files: list[Path]
    n_runs: int
    skipped: list[Skipped]
    notes: list[str]


def default_name(paths: list[Path]) -> str:
    names = [Path(p).resolve().name or "results" for p in paths]
    name = names[0] if len(names) == 1 else f"{names[0]}+{len(names) - 1}-more"
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name)


def write_report(
    paths: list[Path],
    out: Path | None = None,
    reports_dir: Path = Path("reports"),
    margin: float | None = None,
    look: int = 1,
) -> ReportOutcome:
    """Load, check, analyse and render; the report folder holds report.md, report.html and figures/. `margin`: δ
    of the claims' verdicts (statistics.DEFAULT_MARGIN when None); `look`: 1, or 2 for the one re-run of an
    inconclusive claim the stopping rule allows (its claims table is judged at the re-run's level)."""
    from specbench.files import atomic_write_text

    data = collect(paths)
    if margin is not None:
        data.margin = margin
    if data.runs.empty:
        listed = "; ".join(f"{s.path}: {s.reason}" for s in data.skipped[:3]) or "no summary.json found"
        raise SpecbenchError(
            f"no usable runs under {', '.join(map(str, paths))} ({len(data.skipped)} skipped: {listed}); pass run "
            f"folders, sweep folders or a results/ folder"
        )
    out = Path(out) if out else Path(reports_dir) / default_name(paths)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecbenchError(f"cannot write the report to {out}: {exc.strerror}; pass a writable --out") from exc
    perplexity = perplexity_rows(data)
    figures = make_figures(data.runs, out / "figures", data.curves, target_params(data), perplexity, data)
    blocks = build_blocks(data, figures, f"specbench report: {default_name(paths)}", perplexity, look)
    atomic_write_text(out / "report.md", to_markdown(blocks))
    atomic_write_text(out / "report.html", to_html(blocks))
    files = [out / "report.md", out / "report.html"] + sorted((out / "figures").iterdir())
    return ReportOutcome(out, files, len(data.runs), data.skipped, data.notes)

"""Turn run and sweep folders into a report: tables, figures, the paper comparison and what was skipped.

`specbench report RESULTS...` reads every run under the given folders and writes `report.md`
plus one self-contained `report.html` (figures inlined as base64 PNG; PNG and SVG files beside
them). The work flows one way through four modules:

  collect.py   folders → one DataFrame of checked runs; whatever is unusable (a missing or torn
               summary, a non-UTF-8 or wrongly shaped examples.jsonl line, a sweep cell never run)
               is listed as skipped with its reason, never raised
  analysis.py  the runs → best γ measured and predicted (Theorem 3.8 and the extended model), quality
  figures.py   the runs → matplotlib figures, saved as PNG and SVG
  render.py    all of it → blocks → Markdown and HTML (jinja2, autoescaped); `write_report`
"""

from specbench.report.collect import timing_note
from specbench.report.render import write_report

__all__ = ["timing_note", "write_report"]

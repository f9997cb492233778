"""Turn run and sweep folders into a report: tables, figures, the paper comparison and what was skipped.

`specbench report RESULTS...` reads every run under the given folders and writes `report.md`
plus one self-contained `report.html` (figures inlined as base64 PNG; PNG and SVG files beside
them). The work flows one way:

  collect.py          folders → one DataFrame of checked runs; whatever is unusable (a missing or torn
                      summary, a non-UTF-8 or wrongly shaped examples.jsonl line, a sweep cell never run)
                      is listed as skipped with its reason, never raised; helped by values.py (missing,
                      numbers, cell text), timing_checks.py (the report's timing flags) and
                      calibrations.py (the manifests' pass-cost curves); run_frame.py types the runs'
                      table and splits fixed-γ from γ-policy runs
  analysis.py         the runs → best γ measured and predicted (Theorem 3.8 and the extended model),
                      quality, axes, perplexity, batch curves
  selection.py        per-example log ratios, the two halves, select-then-confirm (no winner's curse)
  claims.py           the seed paper's claims, each with a verdict; headline.py the report's first sentence
  figures/            which figures, with captions (plan.py); drawn by speedup.py and detail.py
                      with kit.py (style, markers, PNG and SVG)
  tables.py           the report's tables; environment.py the setup lines; sections.py every section
                      as blocks, in reading order
  render.py           blocks → Markdown and HTML (jinja2, autoescaped); `write_report`
"""

from specbench.report.render import write_report
from specbench.report.timing_checks import timing_note

__all__ = ["timing_note", "write_report"]

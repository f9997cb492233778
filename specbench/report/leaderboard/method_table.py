"""The methods × categories table Spec-Bench's leaderboard draws (issue 43 item 4): for every draft a set of runs
holds, per Spec-Bench category (and per other task), its speedup over the same run's own plain baseline and its
#MAT, each with an interval, and n.

A sweep times every cell against its own baseline, interleaved, so each example gives a paired ratio and the table
averages those; nothing here times or parses files: the runs come from the one results reader
(measure/results/reader.py) and every figure from measure/stats. `bench/methods.py` prints and writes the table,
`specbench report --by category` draws it.
  speedup  the primary measure on the category's examples: geometric mean of each one's speculative tokens/s ÷ its
           baseline tokens/s, prefill included (metric_units.unit_log_ratios), Student t interval on the logs
           (statistics.geometric_mean)
  #MAT     Spec-Bench's mean accepted tokens per target pass, the bonus token included (metrics.spec_bench_metrics:
           Σ tokens ÷ Σ (target passes + one prefill pass per turn)), Student t interval on its log with the delta
           method's standard error (statistics.linearized_t)
  n        the examples (questions) behind both; no interval below `min_n` (statistics.MIN_INTERVAL_N by default)
A run whose every example id is "<category>:<question id>" of a Spec-Bench category is split by category, with a
`spec-bench overall` row over all its questions (Spec-Bench's "overall"); a SPEED-Bench run likewise, by its
category labels ("speed-bench:coding:<question id>", tasks/speed_bench.py) with a `speed-bench overall` row, after
Spec-Bench's rows and never merged with them; a run of any other task is one category named after the task. A
category that one method ran and another did not is a row of the other with n = 0, no figures (null) and `missing`
true: never a zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specbench.measure.results.reader import RunRead
from specbench.measure.stats import statistics as st
from specbench.measure.stats.metric_units import is_batched, unit_log_ratios
from specbench.measure.stats.metrics import spec_bench_metrics
from specbench.tasks import speed_bench
from specbench.tasks.spec_bench import CATEGORIES

OVERALL = "spec-bench overall"  # all of a Spec-Bench run's questions (Spec-Bench's "overall" column)
KEY_FIELDS = ("method", "gamma", "dtype", "target", "temperature", "engine")  # what makes two runs one method row
FIGURES = ("speedup", "speedup_low", "speedup_high", "mat", "mat_low", "mat_high")
COLUMNS = (*KEY_FIELDS, "category", "n", *FIGURES, "missing", "note")  # a row's keys, in the CSV's order
NOT_RUN = "not run for this method"


@dataclass
class MethodTable:
    """The table's rows (COLUMNS each, JSON-safe: null where a figure is missing) and what was left out, and why."""

    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def methods(self) -> list[tuple]:
        """The method keys (KEY_FIELDS values), in row order."""
        return list(dict.fromkeys(tuple(r[k] for k in KEY_FIELDS) for r in self.rows))

    def categories(self) -> list[str]:
        return list(dict.fromkeys(r["category"] for r in self.rows))


def method_key(run: RunRead) -> tuple:
    """A run's KEY_FIELDS values from its manifest's config (the draft as the run's --draft spelled it)."""
    cfg = run.manifest.get("config") or {}
    sampling = cfg.get("sampling") or {}
    return (
        str(cfg.get("draft")),
        cfg.get("gamma"),
        cfg.get("dtype"),
        cfg.get("target"),
        sampling.get("temperature"),
        cfg.get("engine") or "specbench",
    )


def task_name(run: RunRead) -> str:
    task = run.manifest.get("task") or {}
    return str(task.get("name") or (run.manifest.get("config") or {}).get("task") or run.run_dir.name)


def spec_bench_category(example_id: str) -> str | None:
    """'translation:161' → 'translation', 'speed-bench:coding:1a2b' → 'speed-bench:coding'; None for an id that
    names no Spec-Bench category or SPEED-Bench label."""
    category, colon, qid = str(example_id).rpartition(":")
    known = category in CATEGORIES or speed_bench.parse_label(category) is not None
    return category if colon and qid and known else None


def overall_of(categories: set[str]) -> str | None:
    """The overall row of a run's categories: OVERALL for Spec-Bench's, one SPEED-Bench config's overall label for
    its labels; None for a mixture (a run is one task, so never in practice)."""
    if categories <= set(CATEGORIES):
        return OVERALL
    configs = {(speed_bench.parse_label(c) or ("", ""))[0] for c in categories}
    return speed_bench.overall_label(configs.pop()) if len(configs) == 1 and "" not in configs else None


def record_groups(run: RunRead) -> dict[str, list[dict]]:
    """A run's records by category: Spec-Bench's or SPEED-Bench's (and the overall row) when every id names one,
    else the task's name."""
    cats = [spec_bench_category(r["example_id"]) for r in run.records]
    overall = overall_of({c for c in cats if c is not None})
    if not run.records or None in cats or overall is None:
        return {task_name(run): list(run.records)}
    groups: dict[str, list[dict]] = {}
    for cat, r in zip(cats, run.records):
        groups.setdefault(str(cat), []).append(r)
    return {**groups, overall: list(run.records)}


def _bound(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def mat_estimate(records: list[dict], level: float, min_n: int) -> st.Estimate:
    """#MAT (metrics.spec_bench_metrics) with a t interval on its log: a ratio of sums Σ tokens ÷ Σ passes, whose
    per-question influence on the log is tokens_i/mean(tokens) − passes_i/mean(passes) (the delta method)."""
    value = spec_bench_metrics(records)["mean_accepted_tokens"]
    n = len(records)
    if not n or not (value > 0):
        return st.Estimate(st.NAN, st.NAN, st.NAN, n, "no target passes")
    if n < min_n:
        return st.Estimate(value, st.NAN, st.NAN, n, st.INTERVAL_NOTE.format(n=n, min_n=min_n))
    tokens = np.array([r["speculative"]["n_tokens"] for r in records], dtype=float)
    passes = np.array([r["speculative"]["target_calls"] + (len(r.get("turns") or []) or 1) for r in records], float)
    lo, hi = st.linearized_t(math.log(value), tokens / tokens.mean() - passes / passes.mean(), level)
    return st.Estimate(value, math.exp(lo), math.exp(hi), n)


def cell(records: list[dict], level: float = st.LEVEL, min_n: int = st.MIN_INTERVAL_N) -> dict:
    """One method × category: n, speedup and #MAT with their intervals (null where none), missing, note."""
    if not records:
        return {"n": 0, **dict.fromkeys(FIGURES), "missing": True, "note": NOT_RUN}
    logs = np.array(list(unit_log_ratios(records).values()), dtype=float)
    speed = st.geometric_mean(logs, level, min_n=min_n)
    mat = mat_estimate(records, level, min_n)
    n = len(records)
    note = "" if speed.has_interval else f"n = {n} < {min_n}: no interval" if n < min_n else speed.note or ""
    return {
        "n": n,
        "speedup": _bound(speed.value),
        "speedup_low": _bound(speed.low),
        "speedup_high": _bound(speed.high),
        "mat": _bound(mat.value),
        "mat_low": _bound(mat.low),
        "mat_high": _bound(mat.high),
        "missing": False,
        "note": note,
    }


def category_order(found: list[str]) -> list[str]:
    """Spec-Bench's categories in its file's order, then OVERALL, then SPEED-Bench's labels (speed_bench.table_order),
    then the other tasks as first met."""
    spec = [c for c in CATEGORIES if c in found]
    speed = sorted((c for c in found if speed_bench.table_order(c)), key=lambda c: speed_bench.table_order(c) or (0, 0))
    rest = [c for c in found if c not in CATEGORIES and c != OVERALL and c not in speed]
    return spec + ([OVERALL] if OVERALL in found else []) + speed + rest


def method_table(runs: list[RunRead], level: float = st.LEVEL, min_n: int = st.MIN_INTERVAL_N) -> MethodTable:
    """Runs → one row per method × category (every category any method ran; see the module docstring). Two runs of
    one method that share an example (the same question run twice) keep the first record, with a note."""
    out = MethodTable()
    merged: dict[tuple, dict[str, dict[str, dict]]] = {}  # key → category → example id → record
    found: list[str] = []
    for run in runs:
        if is_batched(run.records):
            out.notes.append(f"{run.run_dir}: a batched run (its rows share times: no per-example ratio); left out")
            continue
        mine = merged.setdefault(method_key(run), {})
        for category, records in record_groups(run).items():
            found.append(category)
            have = mine.setdefault(category, {})
            for r in records:
                if r["example_id"] in have:
                    if category != OVERALL:
                        out.notes.append(f"{run.run_dir}: example {r['example_id']!r} already read; the first kept")
                    continue
                have[r["example_id"]] = r
    order = category_order(list(dict.fromkeys(found)))
    for key, by_cat in merged.items():
        for category in order:
            records = list(by_cat.get(category, {}).values())
            out.rows.append({**dict(zip(KEY_FIELDS, key)), "category": category, **cell(records, level, min_n)})
    return out


# --------------------------------------------------------------------------- shown and written


def figure_text(row: dict, name: str, digits: int = 2, unit: str = "") -> str:
    """'1.42× [1.10, 1.83]' for a figure with its interval, '1.42×' without one, 'missing' for a method that did not
    run the category, '—' for a figure that could not be computed."""
    if row["missing"]:
        return "missing"
    value = row[name]
    if value is None:
        return "—"
    text = f"{value:.{digits}f}{unit}"
    low, high = row[f"{name}_low"], row[f"{name}_high"]
    return text if low is None or high is None else f"{text} [{low:.{digits}f}, {high:.{digits}f}]"


def method_label(row: dict, vary: set[str]) -> str:
    """The method's name, with γ, dtype, target or temperature where the table holds more than one of them."""
    extra = [f"{k}={row[k]}" for k in KEY_FIELDS[1:] if k in vary]
    return row["method"] + (f" ({', '.join(extra)})" if extra else "")


def rich_table(table: MethodTable, title: str = "methods × categories"):
    """One row per category, one column per method: speedup [95 % CI], #MAT [95 % CI] and n in each cell."""
    from rich.markup import escape
    from rich.table import Table

    keys = table.methods()
    vary = {k for i, k in enumerate(KEY_FIELDS) if len({key[i] for key in keys}) > 1}
    shown = Table(
        title=title,
        caption="speedup: geometric mean of per-example ratios over the same run's baseline; "
        "#MAT: tokens per target pass, bonus included; [95 % Student t]",
    )
    shown.add_column("category", no_wrap=True)
    by = {(tuple(r[k] for k in KEY_FIELDS), r["category"]): r for r in table.rows}
    first = {key: next(r for r in table.rows if tuple(r[k] for k in KEY_FIELDS) == key) for key in keys}
    for key in keys:
        shown.add_column(escape(method_label(first[key], vary)), justify="right")
    for category in table.categories():
        cells = []
        for key in keys:
            r = by[(key, category)]
            cells.append(
                "missing"
                if r["missing"]
                else f"{figure_text(r, 'speedup', unit='×')}\n#MAT {figure_text(r, 'mat')}  n={r['n']}"
            )
        shown.add_row(escape(category), *cells)
    return shown


def write_table(table: MethodTable, folder: Path, stem: str = "methods", extra: dict | None = None) -> list[Path]:
    """The rows as <stem>.csv and <stem>.json (rows, notes and `extra`'s keys) in `folder`, each written atomically."""
    import csv
    import io

    from specbench.errors import SpecbenchError
    from specbench.files import atomic_write_json, atomic_write_text

    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file of that name, a read-only parent: one line, as the report's --out says it
        raise SpecbenchError(f"cannot write the table to {folder}: {exc.strerror}; pass a writable --out") from exc
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:  # a text cell a spreadsheet would run as a formula is quoted (tidy_table.csv_safe)
        writer.writerow({k: csv_cell(row[k]) for k in COLUMNS})
    paths = [folder / f"{stem}.csv", folder / f"{stem}.json"]
    atomic_write_text(paths[0], buf.getvalue())
    atomic_write_json(paths[1], {"columns": list(COLUMNS), "rows": table.rows, "notes": table.notes, **(extra or {})})
    return paths


def csv_cell(value):
    """A CSV cell: empty for null, a text that starts like a formula prefixed with a quote (tidy_table.csv_safe)."""
    from specbench.measure.results.tidy_table import FORMULA_STARTS

    if value is None:
        return ""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def read_method_table(paths: list[Path], min_n: int = st.MIN_INTERVAL_N) -> MethodTable:
    """`specbench report --by category`: the runs under `paths` (the one results reader) as the table, with what the
    reader skipped among the notes; one line when none is usable."""
    from specbench.errors import SpecbenchError
    from specbench.measure.results.reader import read_folders

    found = read_folders([Path(p) for p in paths])
    table = method_table([r for r in found.runs if r.records], min_n=min_n)
    table.notes = found.messages() + table.notes
    if not table.rows:
        listed = "; ".join(found.messages()[:3]) or "no examples.jsonl with records found"
        raise SpecbenchError(
            f"no runs with example records under {', '.join(map(str, paths))} ({listed}); pass run folders, "
            f"sweep folders or a results/ folder"
        )
    return table

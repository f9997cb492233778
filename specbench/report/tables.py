"""The report's tables: the runs, the recommended γ, γ-policy runs and the paper's Table 2 beside ours.

Each table is a `Table` of cells (text, numbers, None, or a `Link` to a figure) built from the table of
runs (collect.py) and the best-γ rows (analysis.py), so Markdown and HTML render the same rows; this
module decides what a row says, render.py how it is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbench.report.analysis import short_labels
from specbench.report.run_frame import fixed_gamma
from specbench.report.values import num, primary_speedup, truthy

# Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding", ICML 2023
# (arXiv:2211.17192), Table 2: T5-XXL (11B) target, batch 1, one TPU-v4; speed = walltime improvement
# over the T5X baseline. The paper's PDF could not be opened from this machine; every value below was
# confirmed against two independent third-party study notes in a public code index that transcribe the
# full table identically (EnDe and CNNDM, T5-small/base/large, T = 0 and 1), and a third partial
# transcription that matches the CNNDM T = 1 rows. Rows: (task, draft, T, γ, α, speedup).
PAPER_TABLE2 = (
    ("EnDe", "T5-small", 0, 7, 0.75, 3.4),
    ("EnDe", "T5-base", 0, 7, 0.80, 2.8),
    ("EnDe", "T5-large", 0, 7, 0.82, 1.7),
    ("EnDe", "T5-small", 1, 7, 0.62, 2.6),
    ("EnDe", "T5-base", 1, 5, 0.68, 2.4),
    ("EnDe", "T5-large", 1, 3, 0.71, 1.4),
    ("CNNDM", "T5-small", 0, 5, 0.65, 3.1),
    ("CNNDM", "T5-base", 0, 5, 0.73, 3.0),
    ("CNNDM", "T5-large", 0, 3, 0.74, 2.2),
    ("CNNDM", "T5-small", 1, 5, 0.53, 2.3),
    ("CNNDM", "T5-base", 1, 3, 0.55, 2.2),
    ("CNNDM", "T5-large", 1, 3, 0.56, 1.7),
)
PAPER_SOURCE = "Leviathan et al. 2023, Table 2 (T5-XXL target, TPU-v4)"

RUNS_COLUMNS = [  # at most 10: the rest are in RUNS_DETAIL_COLUMNS, behind a <details> element
    "run",
    "task",
    "n",
    "speedup (geomean) [95% CI]",
    "α",
    "mean acc. length",
    "base tok/s",
    "spec tok/s",
    "identical share",
    "timing",
]
RUNS_DETAIL_COLUMNS = [
    "run",
    "run id",
    "α exp.",
    "c",
    "verify",
    "tok/call",
    "ratio-of-sums speedup [95% CI]",
    "Thm 3.8",
    "extended",
    "decode [95% CI]",
    "predicted decode",
    "complete",
]
BEST_GAMMA_COLUMNS = [
    "task",
    "draft, T",
    "γ run",
    "best γ measured",
    "its speedup (geomean) [95% CI]",
    "pooled α",
    "pooled c",
    "γ* Thm 3.8",
    "predicted",
    "γ* extended",
    "predicted (ext.)",
    "suspect timings at γ",
]
POLICY_COLUMNS = [
    "run",
    "task",
    "draft, T",
    "γ policy",
    "γ max",
    "n",
    "α",
    "tok/call",
    "speedup (geomean) [95% CI]",
    "timing",
    "decode [95% CI]",
]


# --------------------------------------------------------------------------- cell text


@dataclass
class Table:
    columns: list[str]
    rows: list[list]  # cells: str, numbers, None, Link


@dataclass
class Link:
    """A table cell that links to a figure: the PNG file in Markdown, the inlined figure's anchor in HTML."""

    text: str
    name: str  # the figure's file stem

    @property
    def md_href(self) -> str:
        return f"figures/{self.name}.png"

    @property
    def html_href(self) -> str:
        return f"#fig-{self.name}"


def with_ci(value, ci, digits: int = 2, unit: str = "") -> str:
    """'1.23 [1.06, 1.41]': a value and its 95 % interval ('—' for what was not measurable)."""
    x = num(value)
    if np.isnan(x):
        return "—"
    text = f"{x:.{digits}f}{unit}"
    if isinstance(ci, (list, tuple, np.ndarray)) and len(ci) == 2:
        lo, hi = num(ci[0]), num(ci[1])
        if not (np.isnan(lo) or np.isnan(hi)):
            text += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return text


def speedup_text(row, unit: str = "") -> str:
    """A run's speedup as the report shows it: the primary measure (geometric mean of per-example speedups) with
    its 95 % interval; an older summary without it shows its ratio of sums, labelled "(ratio of sums)"."""
    value, ci, primary = primary_speedup(row)
    text = with_ci(value, ci, unit=unit)
    return text if primary or text == "—" else f"{text} (ratio of sums)"


def _timing_text(r) -> str:
    return "SUSPECT" if truthy(r.get("timing_suspect")) else "ok"


def _best_cell(runs, b: dict):
    """The run behind a best-γ row's measured γ (the first of duplicates; a trustworthy one where there is one)."""
    if b["measured_gamma"] is None:
        return None
    runs = fixed_gamma(runs)
    cell = runs[(runs["task"] == b["task"]) & (runs["series"] == b["series"]) & (runs["gamma"] == b["measured_gamma"])]
    if "timing_suspect" in cell and (~cell["timing_suspect"]).any():
        cell = cell[~cell["timing_suspect"]]
    return cell.iloc[0] if len(cell) else None


def held_out_text(b: dict, unit: str = "") -> str | None:
    """A best-γ row's speedup on the half of the examples that did not choose it (analysis._held_out_best), with
    its interval and n, or None where the row was chosen on all examples."""
    est = b.get("held_out")
    if est is None:
        return None
    text = f"{est.value:.2f}{unit}" + (f" [{est.low:.2f}, {est.high:.2f}]" if est.has_interval else "")
    return f"{text} (other half, n = {est.n})"


def _best_speedup_text(runs, b: dict) -> str:
    r = _best_cell(runs, b)
    if r is None:
        return held_out_text(b) or with_ci(b["measured_speedup"], None)
    text = held_out_text(b) or speedup_text(r)
    return text + (" (suspect timing)" if truthy(r.get("timing_suspect")) else "")


def _thm_gamma_text(b: dict):
    """Theorem 3.8's γ, recommended only within the measured range; its optimum outside it is marked extrapolated."""
    if b["thm_gamma"] is None or b["thm_in_range"]:
        return b["thm_gamma"]
    lo, hi = b["gammas"][0], b["gammas"][-1]
    return (
        f"{b['thm_gamma_in_range']} (best within the measured {lo}–{hi}; the optimum over 1..64, "
        f"γ = {b['thm_gamma']}, is extrapolated)"
    )


# --------------------------------------------------------------------------- tables


def runs_table(runs) -> Table:
    """The runs at a glance: at most 10 columns (runs_detail_table has the rest)."""
    labels = short_labels(runs)
    return Table(
        RUNS_COLUMNS,
        [
            [
                labels[r["run_id"]],
                r["task"],
                r["n_examples"],
                speedup_text(r),
                num(r["alpha"]),
                num(r.get("mean_acceptance_length")),
                num(r.get("baseline_tokens_per_s")),
                num(r.get("speculative_tokens_per_s")),
                num(r.get("identical_rate")),
                _timing_text(r),
            ]
            for _, r in runs.iterrows()
        ],
    )


def runs_detail_table(runs) -> Table:
    """Every other column of the runs, keyed by the full run id (the folder's name)."""
    labels = short_labels(runs)
    return Table(
        RUNS_DETAIL_COLUMNS,
        [
            [
                labels[r["run_id"]],
                r["run_id"],
                num(r["alpha_expected"]),
                num(r["c"]),
                num(r["verify_cost"]),
                num(r["tokens_per_target_call"]),
                with_ci(r["speedup"], r.get("speedup_ci95")),
                num(r["predicted_speedup"]),
                num(r["predicted_speedup_extended"]),
                with_ci(r.get("decode_speedup"), r.get("decode_speedup_ci95")),
                num(r.get("predicted_decode_speedup")),
                r.get("complete"),
            ]
            for _, r in runs.iterrows()
        ],
    )


def best_gamma_table(runs, best: list[dict]) -> Table:
    return Table(
        BEST_GAMMA_COLUMNS,
        [
            [
                b["task"],
                b["series"],
                ",".join(map(str, b["gammas"])),
                b["measured_gamma"],
                _best_speedup_text(runs, b),
                b["alpha"],
                b["c"],
                _thm_gamma_text(b),
                b["thm_factor"] if b["thm_in_range"] else b["thm_factor_in_range"],
                b["ext_gamma"],
                b["ext_factor"],
                ",".join(map(str, b["suspect_gammas"])) or "none",
            ]
            for b in best
        ],
    )


def policy_table(policies) -> Table:
    return Table(
        POLICY_COLUMNS,
        [
            [
                r["run_id"],
                r["task"],
                r["series"],
                r["gamma_policy"],
                int(r["gamma"]),
                r["n_examples"],
                num(r["alpha"]),
                num(r["tokens_per_target_call"]),
                speedup_text(r),
                _timing_text(r),
                with_ci(r.get("decode_speedup"), r.get("decode_speedup_ci95")),
            ]
            for _, r in policies.iterrows()
        ],
    )


def paper_table(runs, best: list[dict]) -> Table:
    rows = [
        [PAPER_SOURCE, task, draft, f"{t:g}", gamma, alpha, f"{speed:.1f}×"]
        for task, draft, t, gamma, alpha, speed in PAPER_TABLE2
    ]
    for b in best:
        r = _best_cell(runs, b)
        if r is None:
            continue
        speed = held_out_text(b, unit="×") or speedup_text(r, unit="×")
        rows.append(
            [
                f"specbench ({r['target']})",
                b["task"],
                r["draft"],
                f"{r['temperature']:g}",
                b["measured_gamma"],
                num(r["alpha"]),
                speed + (" (suspect timing)" if truthy(r.get("timing_suspect")) else ""),
            ]
        )
    return Table(["source", "task", "draft", "T", "γ", "α", "speedup"], rows)

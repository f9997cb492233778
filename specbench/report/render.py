"""Assemble the report: one list of blocks, written as report.md and as one self-contained report.html.

The report is built once as (kind, payload) blocks (h1, h2, p, list, table, figure), one small
function per section, and each block list is rendered twice. The HTML comes from a jinja2 template
(templates/report.html.j2) with autoescape on, so every string that came from a model, a task or
the user (outputs, references, draft and task names, run ids, check names) is escaped without any
call site having to remember it. Markdown passes raw HTML through, so it is escaped the same way
there, plus the pipes and newlines that would break a table row.

Theory sits beside measurement, never instead of it: each measured speedup is shown with Theorem
3.8's prediction from the measured α and c, and with the extended model that also uses the measured
cost of a verification pass.
"""

from __future__ import annotations

import base64
import html
import numbers
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specbench.errors import SpecbenchError
from specbench.measure.hardware import describe
from specbench.measure.schema import Manifest
from specbench.report.analysis import best_gamma_rows, perplexity_rows, quality_rows, short_labels, target_params
from specbench.report.claims import UNTESTED, Claim, claims, headline
from specbench.report.collect import (
    ReportData,
    Skipped,
    cell_text,
    collect,
    fixed_gamma,
    isnull,
    num,
    policy_runs,
    timing_note,
    truthy,
)
from specbench.report.figures import RenderedFigure, make_figures

CHECK_FIELDS = (
    "name",
    "statistic",
    "p_value",
    "n",
    "threshold",
    "power",
    "passed",
)  # a checks.json row (verification.py)
SAMPLE_CHARS = 240  # characters of each output shown in the samples table
SAMPLE_RUNS = 24  # runs whose first example is shown

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

# --------------------------------------------------------------------------- the report's prose

TIMING_WARNINGS_TEXT = (
    "These runs failed a timing check (noise probes re-timed between examples, the spread of the "
    "baseline's time per token, disagreeing repeats, a re-timed shared baseline that drifted, or a "
    "verify cost no quiet machine gives). Do not trust their speedups without a rerun on a quiet "
    "machine; the tables mark them, and the γ recommendation leaves them out when other cells "
    "remain."
)
AUTO_TEXT = (
    "Runs that asked for --gamma, --draft or --dtype auto (or the adaptive γ policy): what was "
    "chosen on the machine, and why, as recorded in each manifest."
)
RUNS_TEXT = (
    "α = accepted / acceptance trials; c = draft cost per token over target cost per token; "
    "verify = cost of one target pass over γ+1 tokens in single-token passes; speedup = speculative "
    "tokens/s over baseline tokens/s, prefill included (at T = 0, baseline walltime over speculative "
    "walltime). Predictions use each run's measured α, c "
    "(Theorem 3.8) and also its measured verify cost (extended). Decode: the speedup of the decode "
    "phase alone, beside the cost model's prediction for outputs of the lengths measured "
    "(predicted_decode_speedup: drafts accepted past an EOS are lost, the budget shortens the last "
    "drafts). c and the verify cost come from the same run, so this pair checks the loop's own time "
    "and the predicted number of target passes, not the cost measurements themselves. Speedup and "
    "decode carry their 95 % bootstrap interval over examples in brackets; timing SUSPECT: see "
    "Timing warnings at the top."
)
IDENTITY_TEXT = (
    "In bf16 or fp16 the target's logits depend on how many tokens share a pass, so where its two "
    "best tokens nearly tie, a verify pass can choose differently from a one-token step: such a "
    "divergence is classified numerics when replaying both runs' own passes shows the target itself "
    "flipping, and unexplained (a candidate bug) otherwise. The numerics floor is the share of the "
    "baseline's positions a teacher-forced (γ+1)-token pass flips: what this hardware forces on "
    "any multi-token verifier."
)
BEST_GAMMA_TEXT = (
    "Measured: the γ with the largest measured speedup among those run (95 % bootstrap interval in "
    "brackets). Theorem 3.8: the γ maximising (1−α^(γ+1))/((1−α)(γc+1)) with α and c pooled over the "
    "γ cells (mean); only γ within the measured range are recommended, and where the theorem's "
    "optimum over 1..64 lies outside it, the table says so beside the best γ inside the range. "
    "Extended: the same with each γ's measured verify cost, so only measured γ values are "
    "candidates. Cells whose timings look inconsistent (see Timing warnings) are left out when "
    "others remain."
)
POLICY_TEXT = (
    "Runs with a γ policy choose γ per step (up to γ max), so they have no place in the γ "
    "comparison above; they are listed here on their own."
)
PAPER_TEXT = (
    f"Paper rows: {PAPER_SOURCE}; each is the paper's best γ for that draft. Our rows: the best "
    "measured γ per task, draft and temperature. The paper's target is an 11B T5 on a TPU; ours is "
    "whatever these runs used (see Setup), so compare trends (α by draft and temperature, the "
    "α–cost trade-off), not absolute speedups. Our speedups carry their 95 % bootstrap interval "
    "over examples in brackets."
)
CLAIMS_TEXT = (
    "The seed paper's claims, each judged on these runs and this hardware by paired intervals over examples "
    "(docs/statistics.md): holds (every 90 % interval of the ratios between axis values lies within the margin δ, "
    "or a one-sided 95 % bound clears the claim's threshold), does not hold (a Holm-adjusted interval lies beyond "
    "it), inconclusive (neither, or fewer than 20 examples per cell: the row says how many would decide it), or "
    "not tested here (with the command that measures it). A best configuration is chosen on half of the examples "
    "and quoted with the other half's figure. Runs with suspect timings stay in; a verdict says where leaving "
    "them out changes it. Human evaluation of quality is not something a benchmark can run; perplexity stands "
    "in for it."
)
PERPLEXITY_TEXT = (
    "At T > 0 the outputs differ from the baseline's by design; their law must not. Each output is scored by its "
    "mean negative log-likelihood per token under the target's raw law (perplexity = exp of it), and a two-sided "
    "Mann-Whitney U test asks whether baseline and speculative scores share one distribution. The level is 0.01 "
    "split over the runs tested (Bonferroni). Power is simulated (400 redraws from the pooled scores) against "
    "the stated shift; 'detectable' is the shift found with power 0.8. Baseline and speculative share a seed per "
    "example, which can only make the test conservative."
)
QUALITY_TEXT = (
    "At T = 0 the scores must be equal (identical outputs); at T > 0 the intervals should overlap "
    "(same output distribution)."
)

LEAD_FIGURES = ("speedup_vs_gamma", "time_per_token")  # right after the headline: the speedup and its cost
RUNS_COLUMNS = [  # at most 10: the rest are in RUNS_DETAIL_COLUMNS, behind a <details> element
    "run",
    "task",
    "n",
    "speedup [95% CI]",
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
    "its speedup [95% CI]",
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
    "speedup [95% CI]",
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


def _clip(text, n: int = SAMPLE_CHARS) -> str:
    text = "" if isnull(text) else str(text)
    return text if len(text) <= n else text[:n] + "…"


def _timing_text(r) -> str:
    return "SUSPECT" if truthy(r.get("timing_suspect")) else "ok"


def _gamma_text(r) -> str:
    label = r.get("gamma_label")
    return str(label) if isinstance(label, str) else str(r["gamma"])


def _best_cell(runs, b: dict):
    """The run behind a best-γ row's measured γ (the first of duplicates; a trustworthy one where there is one)."""
    if b["measured_gamma"] is None:
        return None
    runs = fixed_gamma(runs)
    cell = runs[(runs["task"] == b["task"]) & (runs["series"] == b["series"]) & (runs["gamma"] == b["measured_gamma"])]
    if "timing_suspect" in cell and (~cell["timing_suspect"]).any():
        cell = cell[~cell["timing_suspect"]]
    return cell.iloc[0] if len(cell) else None


def _best_speedup_text(runs, b: dict) -> str:
    r = _best_cell(runs, b)
    if r is None:
        return with_ci(b["measured_speedup"], None)
    text = with_ci(b["measured_speedup"], r.get("speedup_ci95"))
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
                with_ci(r.get("speedup_geomean"), r.get("speedup_geomean_ci95"))
                if num(r.get("speedup_geomean")) == num(r.get("speedup_geomean"))
                else with_ci(r["speedup"], r.get("speedup_ci95")),
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
                with_ci(r["speedup"], r.get("speedup_ci95")),
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
        speed = with_ci(b["measured_speedup"], r.get("speedup_ci95"), unit="×")
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


def _auto_reasons(data: ReportData) -> list[str]:
    """Each auto choice's reason lines, run by run (manifest `auto`)."""
    lines = []
    for _, r in data.runs.iterrows():
        manifest = data.manifests.get(r["run_dir"])
        auto = manifest.auto if manifest is not None else None
        if not isinstance(auto, dict):
            continue
        asked = auto.get("requested")
        asked = ", ".join(f"{k} {v}" for k, v in asked.items()) if isinstance(asked, dict) and asked else "auto"
        reasons = auto.get("reasons") if isinstance(auto.get("reasons"), list) else []
        for reason in reasons or ["(no reasons recorded)"]:
            lines.append(f"{r['run_id']} (asked for {asked}): {reason}")
    return lines


def _versions_text(versions) -> str | None:
    """Package versions as words ('python 3.11.2, torch 2.5.1, ...'), not a JSON object."""
    if not isinstance(versions, dict) or not versions:
        return None
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))


def _params_text(params) -> str:
    """1540000000 → '1.54B', 135000000 → '135M', 1000 → '1000'."""
    x = num(params)
    if np.isnan(x):
        return "?"
    return f"{x / 1e9:.3g}B" if x >= 1e9 else f"{x / 1e6:.3g}M" if x >= 1e6 else f"{x:.0f}"


def _manifest_facts(m: Manifest) -> list[tuple[str, str | None]]:
    """(key, text) of one manifest's target model, hardware, versions and commit."""
    model = m.models.get("target", {}) if isinstance(m.models, dict) else {}
    target = (
        f"{model.get('spec')} ({_params_text(model.get('params'))} params, {model.get('dtype')}, {model.get('device')})"
        if isinstance(model, dict) and model
        else None
    )
    return [
        ("target", target),
        ("engine", _engine_text(m.engine)),
        ("hardware", describe(m.hardware) if m.hardware else None),
        ("versions", _versions_text(m.versions)),
        ("git commit", m.git_commit),
    ]


def _engine_text(engine: dict | None) -> str | None:
    """--engine llama-cpp runs: 'llama-cpp (llama-cpp-python 0.3.36, 2 threads, llama 256M Q4_1)'; None for torch."""
    if not isinstance(engine, dict) or not engine:
        return None
    return (
        f"{engine.get('engine')} (llama-cpp-python {engine.get('engine_version')}, {engine.get('threads')} threads, "
        f"{engine.get('model_desc')})"
    )


def _sweep_line(doc: dict) -> str:
    grid = doc.get("grid", {}) if isinstance(doc.get("grid"), dict) else {}
    pairs = grid.get("pairs") if isinstance(grid.get("pairs"), list) else []
    models = (
        f"pairs {', '.join(':'.join(map(str, p)) for p in pairs if isinstance(p, list))}"
        if pairs
        else f"drafts {grid.get('drafts')}"
    )
    baselines = doc.get("baselines") if isinstance(doc.get("baselines"), list) else []
    shared = (
        f"{len(baselines)} baseline(s), one per target, task, sampling, budget, batch size and prompt-length "
        f"bucket, each shared by its cells"
        if baselines
        else "one baseline per task and temperature, shared by its cells"
    )
    return (
        f"sweep {doc.get('sweep_id')}: {len(doc.get('cells', []))} cells, "
        f"{len(doc.get('complete_cells', []) or [])} complete; {models}, γ {grid.get('gammas')}, "
        f"T {grid.get('temperatures')}, tasks {grid.get('tasks')}; {shared}" + _placement_text(doc.get("placement"))
    )


def _placement_text(placement) -> str:
    """'; cells measured on node (device): cell, …' for a sweep run by --executor ray; '' for a local one."""
    if not isinstance(placement, dict) or not placement:
        return ""
    where: dict[str, list[str]] = {}
    for cell_id, rows in sorted(placement.items()):
        for r in rows:
            gpus = f" GPU {','.join(r.get('gpu_ids') or [])}" if r.get("gpu_ids") else ""
            where.setdefault(f"{r['node']} ({r['device']}{gpus})", []).append(cell_id)
    return "; cells measured on " + "; ".join(f"{k}: {', '.join(v)}" for k, v in where.items())


def _environment(data: ReportData) -> list[str]:
    """Distinct hardware, versions and models across the runs' manifests, then one line per sweep."""
    seen: dict[str, set] = {}
    for m in data.manifests.values():
        for key, value in _manifest_facts(m):
            if value:
                seen.setdefault(key, set()).add(str(value))
    return [f"{k}: {'; '.join(sorted(v))}" for k, v in seen.items()] + [_sweep_line(doc) for doc in data.sweeps]


def _sample_of(ex, start: int, shown: set):
    """The first example from `start` on (wrapping) whose reference and outputs no earlier row showed, or None."""
    for k in range(len(ex)):
        row = ex.iloc[(start + k) % len(ex)]
        key = tuple(str(row.get(c)) for c in ("reference", "baseline.text", "speculative.text"))
        if key not in shown:
            shown.add(key)
            return row
    return None


def _samples(data: ReportData) -> list[list]:
    """One example per run (the i-th run starts looking at its i-th example), for the first SAMPLE_RUNS runs; an
    example whose reference and outputs an earlier row already showed (a sweep's shared baseline) is passed over,
    so every row differs."""
    samples: list = []
    shown: set = set()
    for i, (_, r) in enumerate(data.runs.head(SAMPLE_RUNS).iterrows()):
        ex = data.examples.get(r["run_dir"])
        row = None if ex is None or ex.empty else _sample_of(ex, i, shown)
        if row is None:
            continue
        samples.append(
            [
                r["run_id"],
                row.get("example_id"),
                _clip(row.get("reference")),
                _clip(row.get("baseline.text")),
                _clip(row.get("speculative.text")),
                row.get("identical"),
            ]
        )
    return samples


# --------------------------------------------------------------------------- sections, in report order


def _suspect(runs):
    return runs[runs["timing_suspect"]] if "timing_suspect" in runs else runs.iloc[0:0]


def header_section(data: ReportData, title: str) -> list[tuple]:
    return [
        ("h1", title),
        ("p", headline(data)),
        (
            "p",
            f"Generated {time.strftime('%Y-%m-%d %H:%M')} by specbench report from "
            f"{len(data.runs)} run(s); {len(data.skipped)} item(s) skipped (listed at the end).",
        ),
    ]


def _claim_link(claim: Claim, figures: list[RenderedFigure]):
    """The claim's figure as a link, when it was drawn (batch size: any figure about batches), else '—'."""
    names = {f.name: f.title for f in figures}
    name = claim.figure if claim.figure in names else None
    if name is None and claim.figure == "speedup_vs_batch_size":
        name = next((n for n in names if "batch" in n), None)
    return Link(names[name], name) if name else "—"


def claims_section(data: ReportData, figures: list[RenderedFigure], rows: list[dict]) -> list[tuple]:
    """The claims these runs tested, as a table; the untested ones in one line (each says what would test it)."""
    every = claims(data, rows)
    tested = [c for c in every if not c.verdict.startswith(UNTESTED)]
    untested_ = [c for c in every if c.verdict.startswith(UNTESTED)]
    blocks: list[tuple] = [("h2", "Claims"), ("p", CLAIMS_TEXT)]
    if tested:
        table = Table(
            ["claim", "verdict on this data and hardware", "numbers behind it (95% CI)", "figure"],
            [[c.claim, c.verdict, c.numbers, _claim_link(c, figures)] for c in tested],
        )
        blocks.append(("table", table))
    if untested_:
        why = lambda c: c.verdict.removeprefix(f"{UNTESTED}: ").replace("; run ", ", run ")  # noqa: E731
        blocks.append(("p", "Not tested by these runs: " + "; ".join(f"{c.claim} ({why(c)})" for c in untested_) + "."))
    return blocks


def perplexity_section(rows: list[dict]) -> list[tuple]:
    if not rows:
        return []
    table = Table(
        [
            "run",
            "N base+spec",
            "mean NLL base",
            "mean NLL spec",
            "difference [95% CI]",
            "U",
            "p",
            "level",
            "power",
            "against",
            "detectable shift (power 0.8)",
            "equal",
        ],
        [
            [
                r["run_id"],
                f"{c.detail.get('n_baseline')}+{c.detail.get('n_speculative')}",
                num(c.detail.get("mean_nll_baseline")),
                num(c.detail.get("mean_nll_speculative")),
                with_ci(
                    num(c.detail.get("mean_nll_speculative")) - num(c.detail.get("mean_nll_baseline")),
                    c.detail.get("diff_ci95"),
                    3,
                ),
                c.statistic,
                c.p_value,
                c.threshold,
                c.power,
                c.alternative,
                c.detail.get("detectable_shift"),
                c.passed,
            ]
            for r in rows
            for c in [r["check"]]
        ],
    )
    return [("h2", "Perplexity: baseline vs speculative"), ("p", PERPLEXITY_TEXT), ("table", table)]


def timing_section(data: ReportData) -> list[tuple]:
    suspect = _suspect(data.runs)
    if not len(suspect):
        return []
    return [
        ("h2", f"Timing warnings ({len(suspect)} of {len(data.runs)} runs)"),
        ("p", TIMING_WARNINGS_TEXT),
        ("list", [f"{r['run_id']}: " + "; ".join(r["timing_warnings"] or ["flagged"]) for _, r in suspect.iterrows()]),
    ]


def setup_sections(data: ReportData) -> list[tuple]:
    env, choices = _environment(data), _auto_reasons(data)
    blocks = [("h2", "Setup"), ("list", env)] if env else []
    if choices:
        blocks += [("h2", "Automatic choices"), ("p", AUTO_TEXT), ("list", choices)]
    return blocks


def runs_sections(runs) -> list[tuple]:
    blocks = [
        ("h2", "Runs"),
        ("p", RUNS_TEXT),
        ("table", runs_table(runs)),
        (
            "details",
            ("Every other column: costs, predictions, the ratio-of-sums and decode speedups", runs_detail_table(runs)),
        ),
    ]
    greedy = runs[runs["identity_line"].notna()] if "identity_line" in runs else runs.iloc[0:0]
    if len(greedy):
        blocks += [
            ("h2", "Greedy identity, explained"),
            ("p", IDENTITY_TEXT),
            (
                "table",
                Table(
                    ["run", "dtype", "identity", "numerics floor", "unexplained"],
                    [
                        [
                            r["run_id"],
                            r.get("dtype"),
                            r["identity_line"],
                            num(r.get("numerics_floor")),
                            r.get("divergences_unexplained"),
                        ]
                        for _, r in greedy.iterrows()
                    ],
                ),
            ),
        ]
    return blocks


def gamma_sections(runs, best: list[dict]) -> list[tuple]:
    blocks = [("h2", "Recommended γ"), ("p", BEST_GAMMA_TEXT), ("table", best_gamma_table(runs, best))]
    policies = policy_runs(runs)
    if len(policies):
        blocks += [("p", POLICY_TEXT), ("table", policy_table(policies))]
    return blocks + [
        ("h2", "Compared with the paper (Table 2 shape)"),
        ("p", PAPER_TEXT),
        ("table", paper_table(runs, best)),
    ]


def figure_sections(figures: list[RenderedFigure]) -> list[tuple]:
    return [block for fig in figures for block in (("h2", fig.title), ("figure", fig))]


def quality_section(runs) -> list[tuple]:
    qrows = quality_rows(runs)
    if not qrows:
        return []
    return [
        ("h2", "Quality: baseline vs speculative"),
        ("p", QUALITY_TEXT),
        (
            "table",
            Table(
                ["run", "score", "baseline", "95% CI", "speculative", "95% CI", "spec − base"],
                [
                    [
                        q["run_id"],
                        q["metric"],
                        q["baseline"],
                        cell_text(q["baseline_ci"], 2),
                        q["speculative"],
                        cell_text(q["speculative_ci"], 2),
                        q["speculative"] - q["baseline"],
                    ]
                    for q in qrows
                ],
            ),
        ),
    ]


def checks_sections(data: ReportData) -> list[tuple]:
    blocks = []
    for path, checks in data.checks:
        passed = sum(1 for c in checks if c.get("passed") is True)
        blocks += [
            ("h2", f"Verification checks ({passed}/{len(checks)} passed)"),
            ("p", f"From {path}."),
            ("table", Table(list(CHECK_FIELDS), [[c.get(k) for k in CHECK_FIELDS] for c in checks])),
        ]
    return blocks


def samples_section(data: ReportData) -> list[tuple]:
    samples = _samples(data)
    if not samples:
        return []
    more = f" (first {SAMPLE_RUNS} of {len(data.runs)} runs)" if len(data.runs) > SAMPLE_RUNS else ""
    return [
        ("h2", f"Sample outputs: one example per run, no two rows alike{more}"),
        (
            "table",
            Table(["run", "example", "reference", "baseline output", "speculative output", "identical"], samples),
        ),
    ]


def closing_sections(data: ReportData) -> list[tuple]:
    """Notes not already told under Timing warnings, then everything skipped."""
    shown = {timing_note(r) for _, r in _suspect(data.runs).iterrows()}
    notes = [n for n in data.notes if n not in shown]
    blocks = [("h2", "Notes"), ("list", notes)] if notes else []
    return blocks + [
        ("h2", f"Skipped ({len(data.skipped)})"),
        ("list", [f"{s.path}: {s.reason}" for s in data.skipped] or ["nothing: every result found was usable"]),
    ]


def build_blocks(
    data: ReportData, figures: list[RenderedFigure], title: str, perplexity: list[dict] | None = None
) -> list[tuple]:
    """The report as a list of (kind, payload) blocks, rendered identically to Markdown and HTML: shows before it
    tells: the headline, the speedup-vs-γ and cost figures, the claims tested (the untested in one line), the timing
    warnings and the runs, then the rest of the evidence."""
    runs = data.runs
    perplexity = perplexity_rows(data) if perplexity is None else perplexity
    first = [f for name in LEAD_FIGURES for f in figures if f.name == name]
    return (
        header_section(data, title)
        + figure_sections(first)
        + claims_section(data, figures, perplexity)
        + timing_section(data)
        + runs_sections(runs)
        + setup_sections(data)
        + gamma_sections(runs, best_gamma_rows(runs))
        + figure_sections([f for f in figures if f not in first])
        + quality_section(runs)
        + perplexity_section(perplexity)
        + checks_sections(data)
        + samples_section(data)
        + closing_sections(data)
    )


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
    paths: list[Path], out: Path | None = None, reports_dir: Path = Path("reports"), margin: float | None = None
) -> ReportOutcome:
    """Load, check, analyse and render; the report folder holds report.md, report.html and figures/. `margin`: δ
    of the claims' verdicts (statistics.DEFAULT_MARGIN when None)."""
    from specbench.files import atomic_write_text

    data = collect(paths)
    if margin is not None:
        data.margin = margin
    if data.runs.empty:
        listed = "; ".join(f"{s.path}: {s.reason}" for s in data.skipped[:3]) or "no summary.json found"
        raise SpecbenchError(
            f"no usable runs under {', '.join(map(str, paths))} ({len(data.skipped)} skipped: {listed})"
        )
    out = Path(out) if out else Path(reports_dir) / default_name(paths)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecbenchError(f"cannot write the report to {out}: {exc.strerror}; pass a writable --out") from exc
    perplexity = perplexity_rows(data)
    figures = make_figures(data.runs, out / "figures", data.curves, target_params(data), perplexity)
    blocks = build_blocks(data, figures, f"specbench report: {default_name(paths)}", perplexity)
    atomic_write_text(out / "report.md", to_markdown(blocks))
    atomic_write_text(out / "report.html", to_html(blocks))
    files = [out / "report.md", out / "report.html"] + sorted((out / "figures").iterdir())
    return ReportOutcome(out, files, len(data.runs), data.skipped, data.notes)

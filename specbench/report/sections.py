"""The report's sections, in reading order: one small function per section, each a list of (kind, payload) blocks.

A block is (h1|h2|p|list|table|details|figure, payload); build_blocks puts the sections in the order a
reader needs them (the headline and the speedup figure first, the claims, timing warnings and runs,
then the rest of the evidence). The prose that explains each table lives beside it here; render.py
writes the blocks as Markdown and HTML.
"""

from __future__ import annotations

import time

import numpy as np

from specbench.evidence.perplexity import MARGIN as NLL_MARGIN
from specbench.report.analysis import best_gamma_rows, perplexity_rows, quality_rows
from specbench.report.claims import UNTESTED, Claim, claims
from specbench.report.collect import ReportData
from specbench.report.environment import auto_reasons, environment_lines
from specbench.report.figures.kit import RenderedFigure
from specbench.report.headline import headline
from specbench.report.run_frame import policy_runs
from specbench.report.tables import (
    PAPER_SOURCE,
    Link,
    Table,
    best_gamma_table,
    paper_table,
    policy_table,
    runs_detail_table,
    runs_table,
    with_ci,
)
from specbench.report.timing_checks import timing_note
from specbench.report.values import cell_text, isnull, num

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
    "verify = cost of one target pass over γ+1 tokens in single-token passes; speedup (geomean) = the "
    "primary measure: the geometric mean over examples of each example's speculative tokens/s over its "
    "baseline tokens/s, prefill included, with its 95 % Student t interval (a summary written before it "
    "existed shows its ratio of sums instead, labelled so; the ratio of sums of every run is under Every other "
    "column). Predictions use each run's measured α, c "
    "(Theorem 3.8) and also its measured verify cost (extended). Decode: the speedup of the decode "
    "phase alone, beside the cost model's prediction for outputs of the lengths measured "
    "(predicted_decode_speedup: drafts accepted past an EOS are lost, the budget shortens the last "
    "drafts). c and the verify cost come from the same run, so this pair checks the loop's own time "
    "and the predicted number of target passes, not the cost measurements themselves. The ratio of sums and "
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
    "Measured: the γ with the largest measured speedup (geometric mean of per-example speedups) on one half of "
    "the examples (split by a hash of each example id), quoted with the other half's geometric mean and its 95 % "
    "t interval, so the luck of the pick does not inflate it (where the runs have no per-example records: "
    "chosen and quoted on all examples, without 'other half'). Theorem 3.8: the γ maximising (1−α^(γ+1))/((1−α)(γc+1)) "
    "with α and c pooled over the γ cells (mean); only γ within the measured range are recommended, and where "
    "the theorem's optimum over 1..64 lies outside it, the table says so beside the best γ inside the range. "
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
    "measured γ per task, draft and temperature, chosen on one half of the examples and quoted with the other "
    "half's speedup (as in Recommended γ). The paper's target is an 11B T5 on a TPU; ours is "
    "whatever these runs used (see Setup), so compare trends (α by draft and temperature, the "
    "α–cost trade-off), not absolute speedups. Our speedups are geometric means of per-example speedups "
    "with their 95 % Student t interval over examples in brackets."
)
CLAIMS_TEXT = (
    "The seed paper's claims, each judged on these runs and this hardware by paired intervals over examples "
    "(docs/statistics.md): holds (every 90 % interval of the ratios between axis values lies within the margin δ, "
    "or a one-sided 95 % bound clears the claim's threshold), does not hold (a Holm-adjusted interval lies beyond "
    "it), inconclusive (neither, or fewer than 20 examples per cell: the row says how many would decide it and the "
    "one re-run, on fresh examples, that the stopping rule allows), or not tested here (with the command that "
    "measures it). The table is one family: a verdict stands only when its p-value survives Holm's step-down over "
    "the table's tested claims at 4 % (a re-run's table: 1 %; 5 % over both looks). Each configuration's own verdict "
    "is shown beside, at 5 % and not adjusted. A best configuration is chosen on half of the examples "
    "and quoted with the other half's figure. Runs with suspect timings stay in; a verdict says where leaving "
    "them out changes it. Human evaluation of quality is not something a benchmark can run; perplexity stands "
    "in for it."
)
PERPLEXITY_TEXT = (
    "At T > 0 the outputs differ from the baseline's by design; their law must not. Each output is scored by its "
    "mean negative log-likelihood per token under the target's raw law (perplexity = exp of it). The baseline's and "
    "the speculative engine's outputs of one example share its prompt and seed, so they are compared in pairs: the "
    "mean of the per-example differences (speculative − baseline) with its 90 % t-interval, and two one-sided tests "
    f"(TOST) against a margin of ±{NLL_MARGIN:g} nats/token (evidence/perplexity.py). Holds: the interval lies "
    "inside the margin; does not hold: it lies wholly outside; otherwise inconclusive, with the pairs that would "
    "give the TOST power 0.8 at the observed spread. The claims table's quality verdict is this table's."
)
QUALITY_TEXT = (
    "At T = 0 the scores must be equal (identical outputs); at T > 0 the intervals should overlap "
    "(same output distribution)."
)

LEAD_FIGURES = ("speedup_vs_gamma", "time_per_token")  # right after the headline: the speedup and its cost


def _clip(text, n: int = SAMPLE_CHARS) -> str:
    text = "" if isnull(text) else str(text)
    return text if len(text) <= n else text[:n] + "…"


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


def claims_section(data: ReportData, figures: list[RenderedFigure], rows: list[dict], look: int = 1) -> list[tuple]:
    """The claims these runs tested, as a table; the untested ones in one line (each says what would test it).
    `look`: 1, or 2 for the one re-run the stopping rule allows (its family's level; docs/statistics.md)."""
    every = claims(data, rows, look=look)
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
    """Each T > 0 run's paired equivalence test of mean NLL (analysis.perplexity_rows), one row per run."""
    if not rows:
        return []
    table = Table(
        [
            "run",
            "pairs",
            "mean NLL base",
            "mean NLL spec",
            "difference [90% CI]",
            "margin ±",
            "TOST p",
            "power",
            "pairs for power 0.8",
            "verdict",
        ],
        [
            [
                r["run_id"],
                eq.n,
                float(np.mean(r["baseline"])) if len(r["baseline"]) else None,
                float(np.mean(r["speculative"])) if len(r["speculative"]) else None,
                with_ci(eq.estimate, list(eq.interval), 3),
                eq.margin,
                eq.p_value,
                eq.power,
                eq.n_needed,
                eq.verdict,
            ]
            for r in rows
            for eq in [r["equivalence"]]
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
    env, choices = environment_lines(data), auto_reasons(data)
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
    data: ReportData, figures: list[RenderedFigure], title: str, perplexity: list[dict] | None = None, look: int = 1
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
        + claims_section(data, figures, perplexity, look)
        + timing_section(data)
        + runs_sections(runs)
        + setup_sections(data)
        + gamma_sections(runs, best_gamma_rows(runs, data))
        + figure_sections([f for f in figures if f not in first])
        + quality_section(runs)
        + perplexity_section(perplexity)
        + checks_sections(data)
        + samples_section(data)
        + closing_sections(data)
    )

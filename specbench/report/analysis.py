"""The comparisons the report draws from the table of runs: the best γ, measured and predicted, and quality.

Both the figures and the rendered tables need these rows, so they live apart from either; they read
only the DataFrame that collect.py builds and never touch files.
"""

from __future__ import annotations

import math

from specbench.report.run_frame import fixed_gamma
from specbench.report.values import isnull, num, primary_speedup

NAN = float("nan")


def _empty_prediction(row: dict) -> None:
    row["thm_gamma"] = row["thm_factor"] = row["ext_gamma"] = row["ext_factor"] = None
    row["thm_in_range"], row["thm_gamma_in_range"], row["thm_factor_in_range"] = True, None, None


def _trusted(group, row: dict):
    """The group's cells with trustworthy timings when there are any (the suspect γ go into the row)."""
    suspect = (group["timing_suspect"] if "timing_suspect" in group else group["gamma"] < 0).astype(bool)
    row["suspect_gammas"] = sorted(int(g) for g in group.loc[suspect, "gamma"])
    return group[~suspect] if suspect.any() and not suspect.all() else group


def _measured_best(group, row: dict) -> None:
    """The γ whose primary measure (values.primary_speedup) is largest, and that speedup."""
    speed = {i: primary_speedup(r)[0] for i, r in group.iterrows()}
    speed = {i: s for i, s in speed.items() if not math.isnan(s)}
    best = max(speed, key=lambda i: speed[i]) if speed else None
    row["measured_gamma"] = int(group.loc[best, "gamma"]) if best is not None else None
    row["measured_speedup"] = float(speed[best]) if best is not None else float("nan")


def _held_out_best(data, group, row: dict) -> None:
    """The γ whose primary measure is largest on one half of the examples (selection.select_then_confirm), quoted
    with the other half's geometric mean and its interval (`held_out`, a statistics.Estimate): no winner's curse.
    Left as _measured_best set it where no run of the group has per-example records on both halves."""
    from specbench.measure.stats import statistics as st
    from specbench.report.selection import select_then_confirm

    found = select_then_confirm(data, group)
    est = st.geometric_mean(list(found[1].values())) if found is not None else None
    if found is None or est is None or math.isnan(est.value):
        return
    row["measured_gamma"], row["measured_speedup"], row["held_out"] = int(found[0]["gamma"]), est.value, est


def _predicted_best(group, row: dict) -> None:
    """Theorem 3.8's γ over 1..64 and within the measured range, and the extended model's over measured γ."""
    from specbench.decoding import theory

    alpha, c = row["alpha"], row["c"]
    if not (0.0 <= alpha <= 1.0 and c >= 0.0):
        return
    lo, hi = row["gammas"][0], row["gammas"][-1]
    opt = theory.optimal_gamma(alpha, c)
    row["thm_gamma"], row["thm_factor"] = opt.gamma, opt.factor
    inside = theory.optimal_gamma_extended(alpha, c, {g: 1.0 for g in range(lo, hi + 1)}, max_gamma=hi)
    row["thm_in_range"] = lo <= opt.gamma <= hi
    row["thm_gamma_in_range"], row["thm_factor_in_range"] = inside.gamma, inside.factor
    costs = {int(g): num(v) for g, v in zip(group["gamma"], group["verify_cost"]) if num(v) > 0}
    if costs:
        ext = theory.optimal_gamma_extended(alpha, c, costs)
        row["ext_gamma"], row["ext_factor"] = ext.gamma, ext.factor


def best_gamma_rows(runs, data=None) -> list[dict]:
    """Per task and series: the best measured γ, and the γ Theorem 3.8 / the extended model would pick.

    Only integer-γ runs take part (policy runs: run_frame.policy_runs). Theorem 3.8 searches γ in 1..64; where its
    optimum lies outside the γ that were run, `thm_in_range` is False and `thm_gamma_in_range` /
    `thm_factor_in_range` give the best γ within the measured range, which is what the report recommends. With
    `data` (the per-example records), the measured best is chosen on one half of the examples and quoted with the
    other half's figure (`held_out`: _held_out_best); without, on all of them.
    """
    out = []
    for (task, series), group in fixed_gamma(runs).groupby(["task", "series"], sort=True):
        group = group.sort_values("gamma")
        row = {"task": task, "series": series, "gammas": sorted(set(int(g) for g in group["gamma"]))}
        group = _trusted(group, row)
        _measured_best(group, row)
        if data is not None:
            _held_out_best(data, group, row)
        # α should not depend on γ: pool the cells (mean over γ); c likewise
        row["alpha"], row["c"] = group["alpha"].map(num).mean(), group["c"].map(num).mean()
        _empty_prediction(row)
        _predicted_best(group, row)
        out.append(row)
    return out


def quality_rows(runs) -> list[dict]:
    """One row per run and score: baseline vs speculative, with bootstrap CIs where the runner computed them."""
    rows: list[dict] = []
    if "quality.metric" not in runs:
        return rows
    scores = sorted(c.removeprefix("quality.baseline.") for c in runs.columns if c.startswith("quality.baseline."))
    scores = [k for k in scores if not k.endswith("_ci95") and k != "signature"]
    for _, r in runs.iterrows():
        if isnull(r.get("quality.metric")):
            continue
        for key in scores:
            base, spec = num(r.get(f"quality.baseline.{key}")), num(r.get(f"quality.speculative.{key}"))
            if math.isnan(base) and math.isnan(spec):
                continue
            rows.append(
                {
                    "run_id": r["run_id"],
                    "metric": key,
                    "baseline": base,
                    "speculative": spec,
                    "baseline_ci": r.get(f"quality.baseline.{key}_ci95"),
                    "speculative_ci": r.get(f"quality.speculative.{key}_ci95"),
                }
            )
    return rows


# --------------------------------------------------------------------------- axes and perplexity

# The sweep axes a summary may carry, and the columns each may arrive under (the first present wins): a summary's
# own field, or one nested under `axes` (json_normalize flattens it to "axes.<name>").
AXES = {
    "max_new_tokens": ("max_new_tokens", "axes.max_new_tokens"),
    "prompt_length": ("prompt_length", "prompt_length_bucket", "prompt_bucket", "axes.prompt_length"),
    "batch_size": ("batch_size", "axes.batch_size"),
}
BUCKET_ORDER = {"short": 0, "medium": 1, "long": 2}  # prompt-length buckets in reading order


def axis_column(runs, axis: str) -> str | None:
    """The column holding `axis` in these runs (None when no run records it)."""
    return next((c for c in AXES[axis] if c in runs and runs[c].notna().any()), None)


def axis_sort_key(value):
    """Numbers by value, known prompt-length buckets in order, anything else by its text."""
    x = num(value)
    if not math.isnan(x):
        return (0, x, "")
    return (1, BUCKET_ORDER.get(str(value), 99), str(value))


def axis_text(value) -> str:
    """An axis value as the user typed it: 4, not 4.0 (a column with gaps holds floats)."""
    x = num(value)
    return str(int(x)) if not math.isnan(x) and x == int(x) else str(value)


def target_params(data) -> dict[str, float]:
    """target → its parameter count, from the runs' manifests (models.target.params)."""
    out: dict[str, float] = {}
    for _, r in data.runs.iterrows():
        manifest = data.manifests.get(r["run_dir"])
        model = (manifest.models if manifest is not None else None) or {}
        params = num(model.get("target", {}).get("params")) if isinstance(model.get("target"), dict) else float("nan")
        if not math.isnan(params):
            out[str(r["target"])] = params
    return out


def target_families(data) -> dict[str, int]:
    """target → its family, as far as the manifests can tell: the size of its vocabulary (models.target.vocab_size).
    Models of one family share a tokenizer (Qwen2.5-Coder 0.5B and 1.5B: 151,936 ids; SmolLM2: 49,152), so the
    size claim compares targets within one vocabulary only; a model of another family is shown beside them."""
    out: dict[str, int] = {}
    for _, r in data.runs.iterrows():
        manifest = data.manifests.get(r["run_dir"])
        model = (manifest.models if manifest is not None else None) or {}
        target = model.get("target")
        vocab = num(target.get("vocab_size")) if isinstance(target, dict) else float("nan")
        if not math.isnan(vocab):
            out[str(r["target"])] = int(vocab)
    return out


def perplexity_rows(data, margin: float | None = None) -> list[dict]:
    """One row per T > 0 run whose records carry `nll` scores: the paired equivalence test of its per-example mean
    NLLs (evidence/perplexity.nll_equivalence: a TOST against ±margin nats/token, perplexity.MARGIN by default;
    the claims table's quality verdict is read from the same rows) and each engine's finite scores (the figure)."""
    from specbench.evidence.perplexity import MARGIN, finite, nll_equivalence

    rows = []
    for _, r in data.runs.iterrows():
        ex = data.examples.get(r["run_dir"])
        if float(r["temperature"]) == 0.0 or ex is None or "nll.baseline" not in ex or "nll.speculative" not in ex:
            continue
        base, spec = finite(ex["nll.baseline"]), finite(ex["nll.speculative"])
        if not (len(base) or len(spec)):
            continue
        rows.append(
            {
                "run_id": r["run_id"],
                "target": r["target"],
                "task": r["task"],
                "series": r["series"],
                "baseline": base,
                "speculative": spec,
                "equivalence": nll_equivalence(
                    list(ex["nll.baseline"]), list(ex["nll.speculative"]), margin=MARGIN if margin is None else margin
                ),
            }
        )
    return rows


# --------------------------------------------------------------------------- batch sizes


def _batch_of(value) -> int:
    x = num(value)
    return 1 if math.isnan(x) else int(x)


def batch_point(row) -> dict:
    """One batch size of a curve: the measured speedup and its 95 % interval, the measured decode speedup, and the
    cost model's prediction of the decode speedup (predicted_speedup_batch at B > 1, predicted_decode_speedup
    at B = 1) with the pass-shape replay beside it."""
    speed, ci, _ = primary_speedup(row)
    low, high = (num(ci[0]), num(ci[1])) if isinstance(ci, (list, tuple)) and len(ci) == 2 else (NAN, NAN)
    batched = row["b"] > 1
    return {
        "batch_size": int(row["b"]),
        "speedup": speed,
        "ci_low": low,
        "ci_high": high,
        "decode_speedup": num(row.get("decode_speedup")),
        "predicted": num(row.get("predicted_speedup_batch") if batched else row.get("predicted_decode_speedup")),
        "replayed": num(row.get("replayed_speedup_batch")) if batched else NAN,
        "suspect": bool(row.get("timing_suspect")) if not isnull(row.get("timing_suspect")) else False,
    }


def batch_curves(runs) -> list[dict]:
    """Per task, draft, γ, temperature and batch policy: the measured speedups (with intervals) and the cost
    model's decode-speedup prediction at each batch size (batch_point), B = 1 shared by both policies.
    [] unless some configuration ran at two batch sizes."""
    frame = fixed_gamma(runs)
    if "batch_size" not in frame or frame["batch_size"].map(_batch_of).nunique() < 2:
        return []
    frame = frame.assign(
        b=frame["batch_size"].map(_batch_of),
        policy=frame["batch_policy"].map(lambda v: "ragged" if isnull(v) else str(v))
        if "batch_policy" in frame
        else "ragged",
    )
    out = []
    for (task, draft, gamma, temp), g in frame.groupby(["task", "draft", "gamma", "temperature"], sort=True):
        for policy in ("ragged", "min"):
            sub = g[(g["policy"] == policy) | (g["b"] == 1)].drop_duplicates(subset=["b"]).sort_values("b")
            if len(sub) < 2 or not (sub["b"] > 1).any():
                continue
            points = [batch_point(r) for _, r in sub.iterrows()]
            out.append(
                {
                    "task": task,
                    "label": f"{draft}, γ={int(gamma)}, T={float(temp):g}, {policy}",
                    "policy": policy,
                    "points": points,
                }
            )
    return out


def batch_sentence(curves: list[dict]) -> str:
    """One sentence: the range of the batch curves' speedups. The verdict on the seed's "gains consistent across
    batch sizes" is the claims table's alone (report/claims.py: paired intervals against the margin), so this
    caption never states a second, point-estimate one."""
    speeds = [
        (p["speedup"], p["batch_size"], c["label"]) for c in curves for p in c["points"] if not math.isnan(p["speedup"])
    ]
    if not speeds:
        return "No batched run has a measured speedup, so the seed's claim about batch sizes is untested here."
    low, high = min(speeds), max(speeds)
    return (
        f"Speedups run from {low[0]:.2f}× (B={low[1]}, {low[2]}) to {high[0]:.2f}× (B={high[1]}, {high[2]}); "
        f"whether gains are consistent across batch sizes is judged in the claims table, by intervals."
    )


def short_labels(runs) -> dict[str, str]:
    """run id → a short label for the report's tables and figures: the draft, γ and T (and the task when the runs
    span several), with the run id's last part added only where two runs would otherwise read alike."""
    several_tasks = "task" in runs and runs["task"].nunique() > 1
    labels = {}
    for _, r in runs.iterrows():
        gamma = r.get("gamma_label") if isinstance(r.get("gamma_label"), str) else r.get("gamma")
        temperature = num(r.get("temperature"))
        label = f"{r.get('draft')}, γ={gamma}" + (f", T={temperature:g}" if temperature == temperature else "")
        labels[r["run_id"]] = f"{r.get('task')}: {label}" if several_tasks else label
    counts: dict[str, int] = {}
    for label in labels.values():
        counts[label] = counts.get(label, 0) + 1
    return {rid: lab if counts[lab] == 1 else f"{lab} ({str(rid).rsplit('-', 1)[-1]})" for rid, lab in labels.items()}

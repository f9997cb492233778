"""The table of runs as one DataFrame: typed axes, a series label per line of the figures, and the split between
runs with a fixed γ and runs whose γ is a policy.

collect.py builds the rows; every table and figure reads the runs through these few functions, so a line
of a figure and a row of a table are told apart by the same keys.
"""

from __future__ import annotations


def series_keys(runs) -> list[str]:
    """Columns that tell lines apart: draft and temperature, plus target/top-k/top-p and the sweep axes (batch,
    budget, prompt-length bucket) when they vary: runs at another B, budget or bucket are other lines."""
    return ["draft", "temperature"] + [
        k
        for k in ("target", "top_k", "top_p", "batch_size", "batch_policy", "max_new_tokens", "prompt_length")
        if k in runs and runs[k].nunique() > 1
    ]


def series_label(row, keys: list[str]) -> str:
    parts = [str(row["draft"]), f"T={float(row['temperature']):g}"]
    parts += [f"{k}={row[k]}" for k in keys if k not in ("draft", "temperature")]
    return ", ".join(parts)


def runs_frame(rows: list[dict]):
    """The usable runs as one DataFrame with typed axes and a series label, in a stable order."""
    import pandas as pd

    runs = pd.DataFrame(rows)
    runs["gamma"] = runs["gamma"].astype(int)
    runs["temperature"] = runs["temperature"].astype(float)
    runs["timing_suspect"] = runs["timing_suspect"].astype(bool)
    keys = series_keys(runs)
    runs["series"] = [series_label(r, keys) for _, r in runs.iterrows()]
    return runs.sort_values(["task", "draft", "temperature", "gamma", "run_id"]).reset_index(drop=True)


def fixed_gamma(runs):
    """The runs with an integer γ (a policy run's γ varies per step: it has no place on a γ axis)."""
    if "gamma_policy" not in runs:
        return runs
    return runs[runs["gamma_policy"].isna()]


def policy_runs(runs):
    """The runs whose γ is a policy (adaptive, heuristic): shown beside the fixed-γ ones, never mixed in."""
    if "gamma_policy" not in runs:
        return runs.iloc[0:0]
    return runs[runs["gamma_policy"].notna()]

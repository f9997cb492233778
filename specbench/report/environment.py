"""What the runs were measured on and why: hardware, versions, models, sweeps and the auto choices' reasons.

The report's Setup and Automatic choices sections are lines of text read from the runs' manifests and
sweep documents; they are worded here, apart from the tables, so each fact is phrased in one place.
"""

from __future__ import annotations

import numpy as np

from specbench.measure.machine.hardware import describe
from specbench.measure.results.schema import Manifest
from specbench.report.collect import ReportData
from specbench.report.values import num


def auto_reasons(data: ReportData) -> list[str]:
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
        ("engine", engine_text(m.engine)),
        ("hardware", describe(m.hardware) if m.hardware else None),
        ("versions", _versions_text(m.versions)),
        ("git commit", m.git_commit),
    ]


def engine_text(engine: dict | None) -> str | None:
    """--engine llama-cpp runs: 'llama-cpp (llama-cpp-python 0.3.36, 2 threads, llama 256M Q4_1)'; None for torch."""
    if not isinstance(engine, dict) or not engine:
        return None
    return (
        f"{engine.get('engine')} (llama-cpp-python {engine.get('engine_version')}, {engine.get('threads')} threads, "
        f"{engine.get('model_desc')})"
    )


def sweep_line(doc: dict) -> str:
    grid = doc.get("grid", {}) if isinstance(doc.get("grid"), dict) else {}
    pairs = grid.get("pairs") if isinstance(grid.get("pairs"), list) else []
    models = (
        f"pairs {', '.join(':'.join(map(str, p)) for p in pairs if isinstance(p, list))}"
        if pairs
        else f"drafts {grid.get('drafts')}"
    )
    baselines = doc.get("baselines") if isinstance(doc.get("baselines"), list) else []
    if doc.get("baselines_per_cell") is True:  # sweeps since issue 26 item 7
        shared = "each cell timed its own baseline, A B B A with the speculative engine, as run does"
    elif baselines:
        shared = (
            f"{len(baselines)} baseline(s), one per target, task, sampling, budget, batch size and prompt-length "
            f"bucket, each shared by its cells"
        )
    else:
        shared = "one baseline per task and temperature, shared by its cells"
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


def environment_lines(data: ReportData) -> list[str]:
    """Distinct hardware, versions and models across the runs' manifests, then one line per sweep."""
    seen: dict[str, set] = {}
    for m in data.manifests.values():
        for key, value in _manifest_facts(m):
            if value:
                seen.setdefault(key, set()).add(str(value))
    return [f"{k}: {'; '.join(sorted(v))}" for k, v in seen.items()] + [sweep_line(doc) for doc in data.sweeps]

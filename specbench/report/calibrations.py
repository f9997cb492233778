"""The pass-cost calibrations the runs' manifests hold, one entry per distinct curve t(k)/t(1), for the report's
pass-cost figure.

A run's own calibration and each dtype an `auto` choice calibrated are read from its manifest; runs
that share a calibration share a curve, and each curve gets a legend label (dtype, context, hardware).
"""

from __future__ import annotations

import math
from pathlib import Path

from specbench.measure.machine.hardware import describe
from specbench.measure.results.schema import Manifest
from specbench.report.values import cell_text


def hardware_short(hw, device: str | None = None) -> str:
    """The CPU or GPU model a calibration ran on (the GPU's when the device is CUDA)."""
    if not isinstance(hw, dict) or not hw:
        return describe(None)
    gpus = [str(g["name"]) for g in hw.get("gpus") or [] if isinstance(g, dict) and g.get("name")]
    if gpus and str(device or "").startswith("cuda"):
        return ", ".join(sorted(set(gpus)))
    return str(hw.get("cpu_model") or describe(hw).split(",")[0])


def _curve(cal: dict) -> dict[int, float] | None:
    """k → t(k)/t(1) of a Calibration.to_dict(): its pass_cost, or derived from target_ms; None if unusable."""
    cost = cal.get("pass_cost")
    try:
        if not isinstance(cost, dict) or not cost:
            ms = {int(k): float(v) for k, v in (cal.get("target_ms") or {}).items()}
            cost = {k: v / ms[1] for k, v in ms.items()} if ms.get(1, 0) > 0 else {}
        curve = {int(k): float(v) for k, v in cost.items()}
    except (TypeError, ValueError, AttributeError):
        return None
    curve = {k: v for k, v in sorted(curve.items()) if k >= 1 and math.isfinite(v) and v > 0}
    return curve or None


def _manifest_calibrations(manifest: Manifest) -> list[tuple[str, object]]:
    """(dtype key, calibration) pairs: the run's own, then each dtype an `auto` choice calibrated."""
    cals = [("", manifest.calibration)]
    auto = manifest.auto
    if isinstance(auto, dict) and isinstance(auto.get("calibrations"), dict):
        cals += sorted(auto["calibrations"].items())
    return [(key, cal) for key, cal in cals if cal is not None]


def _label_curves(curves: list[dict]) -> None:
    """A legend label per curve; the same setup calibrated twice (another session) is told apart by a run."""
    for c in curves:
        c["label"] = f"{c['dtype']}, {cell_text(c['context_tokens'])}-token context, {c['hardware']}"
    counts: dict[str, int] = {}
    for c in curves:
        counts[c["label"]] = counts.get(c["label"], 0) + 1
    for c in curves:
        if counts[c["label"]] > 1:
            c["label"] += f" ({c['runs'][0]})"


def calibration_curves(manifests: dict[str, Manifest], notes: list[str]) -> list[dict]:
    """Each distinct pass-cost calibration across the runs' manifests (run_dir → Manifest; the run's own, and each
    dtype an `auto` choice calibrated): {label, dtype, context_tokens, hardware, device, curve {k: t(k)/t(1)}, runs}.
    A calibration without a usable curve adds a line to `notes`."""
    found: dict[tuple, dict] = {}
    for run_dir, m in sorted(manifests.items()):
        run_id = str(m.run_id or Path(run_dir).name)
        for dtype_key, cal in _manifest_calibrations(m):
            curve = _curve(cal) if isinstance(cal, dict) else None
            if curve is None or not isinstance(cal, dict):
                notes.append(f"{run_id}: a calibration in manifest.json has no usable pass-cost curve; not plotted")
                continue
            dtype, device = str(cal.get("dtype") or dtype_key or "?"), str(cal.get("device") or "?")
            hw = hardware_short(m.hardware, device)
            key = (dtype, device, cal.get("context_tokens"), hw, tuple((k, round(v, 6)) for k, v in curve.items()))
            entry = found.setdefault(
                key,
                {
                    "dtype": dtype,
                    "device": device,
                    "context_tokens": cal.get("context_tokens"),
                    "hardware": hw,
                    "curve": curve,
                    "runs": [],
                },
            )
            if run_id not in entry["runs"]:
                entry["runs"].append(run_id)
    curves = list(found.values())
    _label_curves(curves)
    return curves

"""The distilled drafts that ship inside the package, and how `--draft distilled` finds them.

Kept apart from `specbench.distill` (which builds drafts) so that listing or loading a draft never
imports the trainer: the data flows one way, distill writes a folder, this module reads it.
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench.errors import SpecbenchError

DRAFTS_DIR = Path(__file__).parent / "distilled"  # package data: distilled drafts shipped inside the wheel
DISTILLED_ALIAS = "distilled"  # `--draft distilled`: the shipped draft for the run's target


def shipped_draft_dir(target_spec: str, root: Path | None = None) -> Path:
    """specbench/models/distilled/<target name>-distilled, the folder `--draft distilled` means; a clear error when
    it is not built."""
    folder = (root or DRAFTS_DIR) / f"{Path(target_spec).name}-distilled"
    if not (folder / "config.json").is_file():
        raise SpecbenchError(
            f"no distilled draft for target {target_spec!r} in {folder}; build it with "
            f"`specbench distill --target {target_spec} --out {folder}`"
        )
    return folder


def shipped_draft_rows(root: Path | None = None) -> list[dict]:
    """`specbench list drafts`: each distilled draft shipped in the package, with what its manifest measured."""
    rows = []
    for manifest_path in sorted((root or DRAFTS_DIR).glob("*/manifest.json")):
        folder = manifest_path.parent
        try:
            m = json.loads(manifest_path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        checks = m.get("checks") or {}
        cost, spec = checks.get("cost") or {}, checks.get("speculative") or {}
        built = m.get("status") == "done" and (folder / "config.json").is_file()
        measured = (
            f"c = {cost['c']:.3f}, α(γ={spec['gamma']}) = {spec['alpha']:.2f} on {spec['prompts']} held-out prompts"
            if built and cost and spec
            else f"not finished ({m.get('steps', {}).get('done')} steps)"
        )
        rows.append(
            {
                "name": f"{DISTILLED_ALIAS} ({folder.name})",
                "kind": "model (distilled)",
                "cost": "one draft forward per token",
                "description": (
                    f"distilled from {m.get('target', {}).get('spec')}; {measured}; rebuild: {m.get('command')}"
                ),
            }
        )
    return rows

"""The benchmark scripts run end to end on CPU (tiny models), so they cannot rot untested. No timing is asserted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import CORPUS, save_tiny

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import gpu  # noqa: E402


def test_gpu_script_runs_on_cpu_and_says_what_it_skipped(tmp_path, capsys):
    target, draft = save_tiny(tmp_path / "t", 0), save_tiny(tmp_path / "d", 1)
    task = tmp_path / "task.jsonl"
    task.write_text("\n".join(json.dumps({"prompt": p}) for p in CORPUS[:3]) + "\n")
    results = gpu.main(
        [
            "--target",
            target,
            "--draft",
            draft,
            "--task",
            str(task),
            "--gamma",
            "2",
            "--limit",
            "2",
            "--max-new-tokens",
            "6",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    printed = capsys.readouterr().out
    assert "no CUDA GPU" in printed and "skipped" in printed
    assert set(results["bench"]) == {"eager", "static"}
    for run in results["bench"].values():
        names = [f[0] for f in run["figures"]]
        assert [n[:3] for n in names if n.startswith("(")] == ["(a)", "(b)", "(c)", "(d)"]
    assert set(results["backend_ratio"]) == {"ours_base", "ours_spec"}
    assert results["greedy_checks"] and all(c["passed"] for c in results["greedy_checks"])
    assert (tmp_path / "out" / "gpu-check.json").exists()

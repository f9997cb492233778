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


def test_verify_price_bench_reads_a_run_folder_and_sees_a_costlier_verify(tmp_path):
    """bench/verify_price.py on a synthetic auto run whose verify passes cost exactly their price reads 1.0, and
    1.3 when they cost 1.3× (the control that the comparison can move)."""
    import verify_price

    from specbench.measure.prediction import verify_prices

    bare = {1: 20.0, 2: 21.0, 3: 22.0, 4: 23.0, 5: 24.0}
    prices = verify_prices(30.0, bare)
    for factor in (1.0, 1.3):
        run = tmp_path / f"x{factor}" / "task-auto-gauto-t0-0"
        run.mkdir(parents=True)
        manifest = {"auto": {"dtype": "bfloat16", "calibrations": {"bfloat16": {"target_ms": bare}}}}
        (run / "manifest.json").write_text(json.dumps(manifest))
        passes = [5, 5, 1, 3]
        record = {
            "baseline": {"decode_s": 0.3, "n_tokens": 11},  # a 30 ms step
            "speculative": {"verify_s": factor * sum(prices[k] for k in passes) / 1e3, "pass_lengths": passes},
        }
        (run / "examples.jsonl").write_text(json.dumps(record) + "\n")
        got = verify_price.timed_over_priced(verify_price.extract(run))
        assert abs(got - factor) < 1e-9, (factor, got)

"""Sweep cells on a Ray cluster (measure/executors): the same records as a local sweep, and a killed worker
costs only its unfinished examples.

One local cluster (2 CPUs, 127.0.0.1, no dashboard) is shared by the module: Ray takes seconds to start.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from specbench.config import LoadSpec
from specbench.errors import SpecbenchError
from specbench.measure.results.records import read_placements
from specbench.measure.results.schema import PLACEMENT_FILE
from specbench.measure.run.executors import make_executor
from specbench.measure.run.sweep import SweepGrid
from specbench.measure.run.sweep_run import run_sweep

ray = pytest.importorskip("ray")  # an optional extra: without it these tests skip (CI installs it: scripts/setup.sh)

from helpers import CORPUS, save_tiny  # noqa: E402

TIMING = {"prefill_s", "decode_s", "draft_s", "verify_s", "repeat_s"}


@pytest.fixture(scope="module")
def cluster():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}},
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    task = root / "task.jsonl"
    task.write_text("\n".join(json.dumps({"prompt": p, "reference": p}) for p in CORPUS[:3]) + "\n")
    return {"target": save_tiny(root / "target", 0), "draft": save_tiny(root / "draft", 1), "task": str(task)}


def grid(tiny, **over) -> SweepGrid:
    spec = dict(
        target=tiny["target"],
        draft=f"prompt-lookup,{tiny['draft']}",
        gamma="1,2",
        temperature="0",
        task=tiny["task"],
        limit=3,
        max_new_tokens=6,
        device="cpu",
    )
    spec.update(over)
    return SweepGrid.from_specs(**spec)


def records(root: Path) -> dict[str, list[dict]]:
    """cell → its examples.jsonl rows without timings (or anything derived from them), in example order."""
    out = {}
    for path in sorted(root.glob("*/examples.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        out[path.parent.name] = sorted((strip(r) for r in rows), key=lambda r: r["example_id"])
    return out


def strip(row):
    if isinstance(row, dict):
        return {k: strip(v) for k, v in row.items() if k not in TIMING and k != "numerics"}
    return row


def test_four_cells_under_ray_equal_the_local_sweep(cluster, tiny, tmp_path):
    g = grid(tiny)
    local = run_sweep(g, tmp_path / "local")
    niceness = {}

    def worker_niceness(cell_id: str, record: dict) -> None:  # while the worker is alive
        pid = read_placements(tmp_path / "ray" / local.root.name)[cell_id][-1]["pid"]
        niceness[cell_id] = os.getpriority(os.PRIO_PROCESS, pid)

    remote = run_sweep(g, tmp_path / "ray", executor=make_executor("ray", cpus_per_cell=1), on_example=worker_niceness)
    assert len(local.cells) == len(remote.cells) == 4
    # a cell's worker competes for the CPU as the local cell would (Ray's default niceness, 15, yields to anything)
    assert set(niceness.values()) == {os.getpriority(os.PRIO_PROCESS, 0)}, niceness
    assert records(local.root) == records(remote.root)
    assert all(c.summary["complete"] for c in remote.cells)
    for name in ("sweep.json",):
        assert (
            json.loads((local.root / name).read_text())["cells"]
            == json.loads((remote.root / name).read_text())["cells"]
        )
    assert not (remote.root / "baselines").exists()  # every cell timed its own baseline on its worker
    placed = read_placements(remote.root)
    assert sorted(placed) == sorted(c.cell_id for c in remote.cells)
    assert all(p[0]["device"] == "cpu" and p[0]["executor"] == "ray" for p in placed.values())
    assert not (local.root / PLACEMENT_FILE).exists()  # the local executor writes what it always wrote
    from specbench.report.collect import collect
    from specbench.report.environment import environment_lines

    assert any("cells measured on" in line and "(cpu)" in line for line in environment_lines(collect([remote.root])))
    again = run_sweep(g, tmp_path / "ray", executor=make_executor("ray"))
    assert again.new_examples == 0  # resumed from the driver's folder: nothing measured twice


@pytest.mark.parametrize("retries", [1, 0])
def test_a_killed_worker_loses_only_its_unfinished_examples(cluster, tiny, tmp_path, retries):
    g = grid(tiny, draft="prompt-lookup")
    killed = []

    def kill_once(cell_id: str, record: dict) -> None:
        if not killed:
            pid = read_placements(tmp_path / out_id)[cell_id][-1]["pid"]
            os.kill(pid, signal.SIGKILL)  # the worker process dies mid-cell, after one example came back
            killed.append(cell_id)

    from specbench.measure.run.sweep_run import sweep_id_for

    out_id = sweep_id_for(g)
    executor = make_executor("ray", max_cell_retries=retries)
    if retries:
        out = run_sweep(g, tmp_path, executor=executor, on_example=kill_once)
    else:
        with pytest.raises(SpecbenchError, match="lost their Ray worker.*rerun the same command"):
            run_sweep(g, tmp_path, executor=executor, on_example=kill_once)
        out = run_sweep(g, tmp_path, executor=make_executor("ray"))
    assert killed and all(c.summary["complete"] for c in out.cells)
    for cell, rows in records(out.root).items():
        ids = [r["example_id"] for r in rows]
        assert len(ids) == len(set(ids)) == 3, cell  # every example once: none lost, none measured twice
    assert len(read_placements(out.root)[killed[0]]) == 2  # started, killed, started again elsewhere


def test_pairs_and_prompt_length_buckets_under_ray_equal_the_local_sweep(cluster, tiny, tmp_path):
    """Every sweep axis runs under Ray: two targets (--pair) × two prompt-length buckets, 4 cells, each counted by
    its own bucket's examples, against the same sweep run locally."""
    words = CORPUS[0].split()
    task = tmp_path / "lengths.jsonl"  # prompts of 2..10 words: the short and long thirds differ
    task.write_text("".join(json.dumps({"prompt": " ".join(words[:n]), "reference": "x"}) + "\n" for n in range(2, 11)))
    pairs = (f"{tiny['target']}:prompt-lookup", f"{tiny['draft']}:prompt-lookup")
    g = SweepGrid.from_specs(
        target="",
        draft="",
        pairs=pairs,
        gamma="1",
        temperature="0",
        task=str(task),
        limit=9,
        max_new_tokens=4,
        device="cpu",
        prompt_length=("short", "long"),
    )
    local = run_sweep(g, tmp_path / "local")
    remote = run_sweep(g, tmp_path / "ray", executor=make_executor("ray", cpus_per_cell=1))
    assert len(remote.cells) == 4 and all(c.summary["complete"] for c in remote.cells)
    assert records(local.root) == records(remote.root)
    assert {c.summary["n_examples"] for c in remote.cells} == {3}  # a third of 9 prompts each, not the task's 9
    assert {(c.summary["target"], c.summary["prompt_length"]) for c in remote.cells} == {
        (t, b) for t in (tiny["target"], tiny["draft"]) for b in ("short", "long")
    }


def test_a_worker_holds_one_target_at_a_time(monkeypatch):
    """A worker keeps its last target for the next cell of that target and frees it before loading another."""
    import specbench.engines.torch.session as torch_session
    from specbench.config import RunConfig
    from specbench.measure.run.executors.ray_cluster import CellWorker

    loaded = []
    monkeypatch.setattr(
        torch_session, "TorchSession", lambda load: loaded.append(load.target) or f"session:{load.target}"
    )
    worker, g = (
        CellWorker(),
        SweepGrid.from_specs(target="a", draft="prompt-lookup", gamma="1", temperature="0", task="t"),
    )
    sessions = [worker.session(g, RunConfig(target, "prompt-lookup", "t")) for target in ("a", "a", "b", "b", "a")]
    assert loaded == ["a", "b", "a"] and sessions[-1] == worker.loaded == "session:a"


def test_the_worker_measures_its_cell_without_planning_the_sweep_again(tiny, tmp_path, monkeypatch):
    """measure_in_scratch (the actor's body, run here without Ray): one message per example, then done carrying
    the cell's last change; the driver planned the sweep, so the worker loads no task list and writes no sweep.json
    (each of those was a fixed cost per cell under Ray)."""
    import specbench.measure.run.sweep_run as sweep_module
    from specbench.engines.torch.session import TorchSession as Session
    from specbench.measure.run.executors.mirror import apply, folder_files
    from specbench.measure.run.executors.ray_cluster import measure_in_scratch
    from specbench.measure.run.sweep_run import cell_ids

    g = grid(tiny, draft="prompt-lookup", gamma="2")
    local = run_sweep(g, tmp_path / "local")
    ((cell_id, config),) = cell_ids(g)
    root = tmp_path / "driver" / local.root.name
    root.mkdir(parents=True)

    def no_planning(*args, **kwargs):
        raise AssertionError("the worker planned the sweep again")

    monkeypatch.setattr(sweep_module, "_task_info", no_planning)
    monkeypatch.setattr(sweep_module, "write_sweep_file", no_planning)
    request = {
        "grid": g,
        "config": config,
        "sweep_id": root.name,
        "cell_id": cell_id,
        "files": folder_files(root, [cell_id]),
    }
    scratch = tmp_path / "scratch"
    session = Session(LoadSpec(g.load.target, device="cpu"))
    messages = list(measure_in_scratch(scratch, session, request, ThreadPoolExecutor(1)))
    assert [m["kind"] for m in messages] == ["change"] * 3 + ["done"], messages[-1]
    # done carries whatever the cell wrote after its last example (the final summary: empty when it rewrote the
    # same bytes, e.g. no new peak memory), so no separate message is needed for it
    assert set(messages[-1]["change"]) == {"rows", "json"}
    assert not (scratch / root.name / "sweep.json").exists()
    for m in messages:
        apply(root, m.get("change", m))
    assert records(root) == records(local.root)
    for name in ("examples.jsonl", "summary.json", "manifest.json"):  # the driver copies the worker's bytes
        assert (root / cell_id / name).read_bytes() == (scratch / root.name / cell_id / name).read_bytes(), name


def test_every_torch_call_of_a_worker_runs_on_one_thread(tiny, tmp_path, monkeypatch):
    """The actor loads its target and decodes every cell on one long-lived thread: a second thread opening OpenMP
    regions gives the process a second team of threads and libgomp then throttles their spin-wait (each forward of
    the tiny model 2.6 → 8.5 ms on 2 cores). Checked by the thread each step runs on, not by time."""
    import specbench.engines.torch.session as torch_session
    import specbench.measure.run.runner as runner
    from specbench.measure.run.executors.ray_cluster import CellWorker
    from specbench.measure.run.sweep_run import cell_ids

    threads = []
    real_session, real_execute = torch_session.TorchSession, runner.execute_run

    def session(*args, **kwargs):
        threads.append(("load", threading.get_ident()))
        return real_session(*args, **kwargs)

    def execute(*args, **kwargs):
        threads.append(("cell", threading.get_ident()))
        return real_execute(*args, **kwargs)

    monkeypatch.setattr(torch_session, "TorchSession", session)
    monkeypatch.setattr(runner, "execute_run", execute)
    g = grid(tiny, draft="prompt-lookup", gamma="1,2")
    root = tmp_path / "driver" / "sweep"
    root.mkdir(parents=True)
    worker = CellWorker()
    for cell_id, config in cell_ids(g):
        request = {"grid": g, "config": config, "sweep_id": root.name, "cell_id": cell_id, "files": {}}
        assert list(worker.run_cell(request))[-1]["kind"] == "done"
    assert [kind for kind, _ in threads] == ["load", "cell", "cell"]
    assert len({ident for _, ident in threads}) == 1 and threads[0][1] != threading.get_ident()


def test_ray_missing_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(SpecbenchError, match=r"pip install specbench-sd\[ray\]"):
        make_executor("ray")


def test_unreachable_address_is_one_line():
    with pytest.raises(SpecbenchError, match="no Ray head answers at 127.0.0.1:9"):
        make_executor("ray", address="ray://127.0.0.1:9")
    with pytest.raises(SpecbenchError, match="host:port"):
        make_executor("ray", address="nowhere")


def test_gpus_on_a_cluster_without_them_is_one_line(cluster, tiny, tmp_path):
    with pytest.raises(SpecbenchError, match="--gpus-per-cell 1: no node of the Ray cluster has that many GPUs"):
        run_sweep(
            grid(tiny, draft="prompt-lookup", gamma="1"), tmp_path, executor=make_executor("ray", gpus_per_cell=1)
        )


def test_local_executor_is_run_sweeps_own_loop():
    assert make_executor("local") is None
    with pytest.raises(SpecbenchError, match="add --executor ray"):
        make_executor("local", gpus_per_cell=1)

"""`specbench sweep --executor ray`: each cell on a Ray worker actor; the driver alone writes the sweep folder.

Why actors and not plain tasks: an actor keeps its `Session` (models loaded once) between the
cells it runs. Each cell is one streaming call on an actor holding --cpus-per-cell CPUs and
--gpus-per-cell GPUs; Ray decides where that actor lives. The actor runs the cell exactly as
run_sweep's loop does (execute_run, both engines timed in the cell) in a scratch copy of the
cell's folder (mirror.py) and yields what each example added; the driver, which planned the
sweep and checked the cell is unfinished, appends it under the same per-cell lock a local
sweep takes. The worker plans nothing again per cell, so a cell's fixed cost beyond a local
cell's is Ray's own: one call, one message per example (bench/ray_overhead.py measures it).
Each cell times its own baseline on its worker, A B B A with the speculative engine, so cells
need no order among themselves and start as soon as an actor is free. A worker that dies
mid-cell loses the example it was measuring; its cell is started again on a fresh actor
from what the driver holds (max_cell_retries times), so no example is measured twice.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import platform
import queue
import socket
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.errors import SpecbenchError
from specbench.files import append_jsonl
from specbench.measure.results.record_checks import example_problem
from specbench.measure.results.record_writing import run_lock
from specbench.measure.results.records import scan_jsonl
from specbench.measure.results.schema import PLACEMENT_FILE, CellPlacement
from specbench.measure.run.executors import RAY_INSTALL_HINT
from specbench.measure.run.executors.mirror import Mirror, apply, folder_files, seed

if TYPE_CHECKING:  # sweep_run imports this module's executor; the driver imports sweep_run where it runs
    from specbench.config import LoadSpec, RunConfig

ADDRESS_TIMEOUT_S = 3.0  # a head that does not accept a TCP connection in this long is reported unreachable
# Ray starts its workers at niceness 15, so that its own daemons stay responsive. A cell is a timed benchmark:
# at 15 anything else runnable on the node (another process, the driver writing records, Ray's daemons) takes
# the CPU first, and the cell's times swing with the node's load (+1 % to +71 % over a local cell on a shared
# 2-core machine, issue 17). Its actor starts at the driver's niceness instead, as a local cell runs; Ray's
# job supervisor sets the same variable for its driver.
WORKER_NICENESS_ENV = "RAY_worker_niceness"


# --------------------------------------------------------------------------- connecting


def import_ray():
    try:
        import ray
    except ImportError:
        raise SpecbenchError(f"--executor ray needs Ray, which is not installed: {RAY_INSTALL_HINT}") from None
    return ray


def check_address(address: str | None) -> None:
    """host:port or ray://host:port must accept a connection now (Ray itself would retry for a minute)."""
    if address in (None, "auto"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise SpecbenchError(f"--address {address!r} is not auto, host:port or ray://host:port")
    try:
        socket.create_connection((host, int(port)), timeout=ADDRESS_TIMEOUT_S).close()
    except OSError as exc:
        raise SpecbenchError(
            f"--address {address}: no Ray head answers at {host}:{port} "
            f"({exc.strerror or type(exc).__name__}); start one there with `ray start --head` "
            f"or check the address"
        ) from None


def connect(ray, address: str | None) -> bool:
    """Join the cluster at `address` (None: start a one-node cluster here) → whether we started the connection."""
    if ray.is_initialized():  # a caller (a test, a notebook) connected already: use that cluster, leave it up
        return False
    check_address(address)
    try:
        # Ray's own start-up lines (a local instance started, token authentication on) would break the CLI's
        # one-line output; its errors still show
        if address is None:
            ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        else:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise SpecbenchError(f"--address {address}: cannot join the Ray cluster ({first})") from None
    return True


def cell_slots(ray, gpus_per_cell: float, cpus_per_cell: float) -> int:
    """How many cells the cluster can run at once; one line when a single cell cannot be placed at all."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    gpus, cpus = sum(n.get("GPU", 0) for n in nodes), sum(n.get("CPU", 0) for n in nodes)
    if gpus_per_cell > max((n.get("GPU", 0) for n in nodes), default=0):
        raise SpecbenchError(
            f"--gpus-per-cell {gpus_per_cell:g}: no node of the Ray cluster has that many GPUs "
            f"({gpus:g} in all); lower --gpus-per-cell (0 runs cells on CPUs) or add GPU nodes"
        )
    if cpus_per_cell > max((n.get("CPU", 0) for n in nodes), default=0):
        raise SpecbenchError(
            f"--cpus-per-cell {cpus_per_cell:g}: no node of the Ray cluster has that many CPUs "
            f"({cpus:g} in all); lower --cpus-per-cell"
        )
    slots = math.floor(cpus / cpus_per_cell)
    if gpus_per_cell:
        slots = min(slots, math.floor(gpus / gpus_per_cell))
    return max(1, slots)


# --------------------------------------------------------------------------- the worker


class CellWorker:
    """A Ray actor: sessions loaded once per worker, one cell at a time measured in a scratch folder.

    Every torch call of the worker (loading a target, every cell's execute_run) runs on one thread, `compute`,
    for the actor's whole life. libgomp (torch's OpenMP on CPU) gives each thread that opens a parallel region
    its own team of threads, and once the process holds more OpenMP threads than the node has CPUs it throttles
    their spin-wait, so each region's threads sleep and wake: a model loaded on the actor's main thread and cells
    decoded on a fresh thread each made every forward of the tiny model 2.6 → 8.5 ms (2 threads on 2 cores, AMD
    EPYC) and a cell about 20 % slower than the same cell run locally, on the main thread."""

    def __init__(self) -> None:
        self.key: tuple[LoadSpec, str] | None = None  # (load, engine session kind) of the loaded session
        self.loaded = None  # the Session of the target this worker measured last
        self.compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specbench-compute")

    def session(self, grid, config):
        """The cell's target loaded once: kept for the next cell of the same target, freed before another loads
        (a sweep of --pair holds one target per worker at a time, as a local sweep does)."""
        from specbench.engines import engine_spec, runtime
        from specbench.measure.run.sweep_run import release_memory

        key = (config.load, engine_spec(config.engine).session_kind)  # the cell's target, loaded by its engine
        if key != self.key:
            self.key, self.loaded = None, None
            release_memory()
            self.loaded = self.compute.submit(runtime(config.engine).open_session, config.load).result()
            self.key = key
        return self.loaded

    def where(self, session) -> dict:
        import ray

        return {
            "node": platform.node(),
            "node_ip": ray.util.get_node_ip_address(),
            "device": str(session.target.device),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "pid": os.getpid(),
        }

    def run_cell(self, request: dict):
        """Yield {"kind": "where" | "change" | "done" | "error", ...} messages while measuring one cell (done and
        error carry the cell's last change under "change")."""
        if request.get("cwd") and os.path.isdir(request["cwd"]):
            os.chdir(request["cwd"])  # relative task and model paths, where the driver's folder is visible
        try:
            session = self.session(request["grid"], request["config"])
        except SpecbenchError as exc:
            yield {"kind": "error", "message": str(exc)}
            return
        yield {"kind": "where", **self.where(session)}
        with tempfile.TemporaryDirectory(prefix="specbench-cell-") as tmp:
            yield from measure_in_scratch(Path(tmp), session, request, self.compute)


def measure_in_scratch(scratch: Path, session, request: dict, compute: ThreadPoolExecutor):
    """The cell's execute_run in `scratch` on the worker's `compute` thread; yield the mirror's changes after each
    example.

    What run_sweep's loop does for one unfinished cell, without re-planning the sweep (task loading,
    sweep.json writes) in the scratch folder: the driver planned it and sends the cell's config."""
    from specbench.measure.run.runner import execute_run

    root = scratch / request["sweep_id"]
    seed(root, request["files"])
    mirror = Mirror(root, [request["cell_id"]])
    messages: queue.Queue = queue.Queue()

    def work() -> None:
        try:
            run = execute_run(
                request["config"],
                root,
                run_id=request["cell_id"],
                session=session,
                on_example=lambda record: messages.put({"kind": "change", **mirror.changes()}),
            )
            messages.put({"kind": "done", "summary": run.summary, "new_examples": run.new_examples})
        except Exception as exc:  # noqa: BLE001  (any failure goes back to the driver as one line)
            messages.put(
                {
                    "kind": "error",
                    "message": str(exc)
                    if isinstance(exc, SpecbenchError)
                    else f"{type(exc).__name__}: {str(exc)[:300]}",
                }
            )

    finished = compute.submit(work)
    while True:
        message = messages.get()
        if message["kind"] != "change":
            finished.result()  # the last summary (and anything after the last example) rides on the final message
            yield {**message, "change": mirror.changes()}
            return
        yield message


# --------------------------------------------------------------------------- the driver


@dataclass
class Running:
    """A cell being measured: its actor, its message stream and the lock the driver holds on its folder."""

    cell_id: str
    config: RunConfig
    actor: object
    stream: object
    lock: contextlib.ExitStack
    placement: dict = field(default_factory=dict)


@dataclass
class RayExecutor:
    """Runs run_sweep's cells on a Ray cluster (see the module docstring)."""

    address: str | None = None  # None: a one-node cluster started here; auto: the cluster `ray start` made here
    gpus_per_cell: float = 0.0
    cpus_per_cell: float = 1.0
    max_cell_retries: int = 1  # a cell whose worker dies is started again this many times

    def run_cells(self, grid, root: Path, cells: list, n_examples: dict[str, int], *, on_cell, on_example) -> list:
        """cells: (cell id, RunConfig) in the sweep's order; n_examples: cell id → how many examples it measures."""
        ray = import_ray()
        owns = connect(ray, self.address)
        try:
            slots = cell_slots(ray, self.gpus_per_cell, self.cpus_per_cell)
            driver = Driver(ray, self, grid, root, n_examples, slots, on_cell, on_example)
            return driver.run(cells)
        finally:
            if owns:
                ray.shutdown()


class Driver:
    """One sweep's cells over a pool of actors: dispatch, stream, write, retry."""

    def __init__(
        self, ray, executor: RayExecutor, grid, root: Path, n_examples: dict[str, int], slots: int, on_cell, on_example
    ):
        self.ray, self.ex, self.grid, self.root, self.slots = ray, executor, grid, root, slots
        self.n_examples = n_examples
        self.on_cell, self.on_example = on_cell, on_example
        niceness = str(os.getpriority(os.PRIO_PROCESS, 0)) if hasattr(os, "getpriority") else "0"
        self.actor_class = ray.remote(CellWorker).options(
            num_cpus=executor.cpus_per_cell,
            num_gpus=executor.gpus_per_cell,
            runtime_env={"env_vars": {WORKER_NICENESS_ENV: niceness}},
        )
        self.actors: list = []  # every live actor
        self.idle: list = []
        self.holds: dict[int, str] = {}  # id(actor) → the target it has loaded (a --pair sweep has several)
        self.running: dict = {}  # message stream → Running
        self.attempts: dict[str, int] = {}
        self.lost: list[str] = []
        self.outcomes: dict[str, object] = {}

    def run(self, cells: list) -> list:
        from specbench.measure.run.sweep_run import CellOutcome, _cell_done

        pending = []
        for cell_id, config in cells:
            n = self.n_examples[cell_id]
            finished = _cell_done(self.root / cell_id, config, n)
            if finished is not None:
                self.on_cell(cell_id, n, n)
                self.outcomes[cell_id] = CellOutcome(cell_id, config, finished, 0)
            else:
                pending.append((cell_id, config))
        try:
            self.loop(pending)
        finally:
            for run in self.running.values():
                run.lock.close()
            for actor in self.actors:
                self.ray.kill(actor)
        if self.lost:
            raise SpecbenchError(
                f"{len(self.lost)} cell(s) lost their Ray worker and are unfinished "
                f"({', '.join(self.lost)}); every example streamed back is on disk: rerun the same "
                f"command to finish them"
            )
        return [self.outcomes[cid] for cid, _ in cells if cid in self.outcomes]

    def loop(self, pending: list) -> None:
        while pending or self.running:
            self.dispatch(pending)
            ready, _ = self.ray.wait(list(self.running), num_returns=1)
            self.step(ready[0], pending)

    def dispatch(self, pending: list) -> None:
        """Start pending cells on idle actors (new actors up to the cluster's slots), in the sweep's order."""
        for cell_id, config in list(pending):
            if not self.idle and len(self.actors) < self.slots:
                actor = self.actor_class.remote()
                self.actors.append(actor)
                self.idle.append(actor)
            if not self.idle:
                return
            pending.remove((cell_id, config))
            self.start(cell_id, config, self.idle_actor_for(config.load.target))

    def idle_actor_for(self, target: str):
        """An idle actor that holds `target` already (no reload), else the most recently idle one."""
        actor = next((a for a in self.idle if self.holds.get(id(a)) == target), self.idle[-1])
        self.idle.remove(actor)
        self.holds[id(actor)] = target
        return actor

    def start(self, cell_id: str, config, actor) -> None:
        (self.root / cell_id).mkdir(parents=True, exist_ok=True)
        lock = contextlib.ExitStack()
        lock.enter_context(run_lock(self.root / cell_id))  # as a local cell: one process measures into a folder
        files = folder_files(self.root, [cell_id])
        rows, _ = scan_jsonl(self.root / cell_id / "examples.jsonl", example_problem)
        self.on_cell(cell_id, self.n_examples[cell_id], len({r["example_id"] for r in rows}))
        request = {
            "grid": self.grid,
            "config": config,
            "sweep_id": self.root.name,
            "cell_id": cell_id,
            "files": files,
            "cwd": os.getcwd(),
        }
        stream = actor.run_cell.remote(request)
        self.running[stream] = Running(cell_id, config, actor, stream, lock)

    def step(self, stream, pending: list) -> None:
        run = self.running[stream]
        try:
            message = self.ray.get(next(stream))
        except StopIteration:
            message = {"kind": "error", "message": f"the worker of {run.cell_id} stopped without a result"}
        except self.ray.exceptions.RayError as exc:
            self.worker_lost(run, pending, exc)
            return
        kind = message.pop("kind")
        if kind == "where":
            run.placement = message
            append_jsonl(
                self.root / PLACEMENT_FILE, asdict(CellPlacement(cell_id=run.cell_id, executor="ray", **message))
            )
        elif kind == "change":
            self.write_change(run, message)
        else:  # done or error: what the cell wrote last comes with it (none when the worker could not start)
            self.write_change(run, message.pop("change", {"rows": {}, "json": {}}))
            self.finish(run, kind, message)

    def write_change(self, run: Running, change: dict) -> None:
        for rel, row in apply(self.root, change):
            if rel == f"{run.cell_id}/examples.jsonl":
                self.on_example(run.cell_id, row)

    def finish(self, run: Running, kind: str, message: dict) -> None:
        from specbench.measure.run.sweep_run import CellOutcome

        del self.running[run.stream]
        run.lock.close()
        self.idle.append(run.actor)
        if kind == "error":
            raise SpecbenchError(f"cell {run.cell_id}: {message['message']}")
        self.outcomes[run.cell_id] = CellOutcome(run.cell_id, run.config, message["summary"], message["new_examples"])

    def worker_lost(self, run: Running, pending: list, exc: Exception) -> None:
        """The actor died (killed, out of memory, node lost): start the cell again from what is on disk."""
        del self.running[run.stream]
        run.lock.close()
        self.actors.remove(run.actor)
        self.attempts[run.cell_id] = self.attempts.get(run.cell_id, 0) + 1
        if self.attempts[run.cell_id] <= self.ex.max_cell_retries:
            pending.insert(0, (run.cell_id, run.config))
        else:
            self.lost.append(run.cell_id)

"""Where a sweep's cells run: here, one after another (`local`), or on the workers of a Ray cluster (`ray`).

`local` is run_sweep's own loop and stays exactly as it was: make_executor returns None for it.
`ray` (ray_cluster.py) runs each cell on a worker actor that keeps its models loaded between
cells; the worker measures into a scratch copy of the cell's folder and streams every new line
back, and the driver (the process that ran `specbench sweep`) alone writes the sweep folder,
through the same append-only files, resume rules and locks as a local sweep (mirror.py). No
scheduling of our own: Ray places each worker by the resources a cell asks for.
"""

from __future__ import annotations

from specbench.errors import SpecbenchError

EXECUTORS = ("local", "ray")
RAY_INSTALL_HINT = "pip install specbench-sd[ray]"


def make_executor(
    name: str = "local",
    *,
    address: str | None = None,
    gpus_per_cell: float = 0.0,
    cpus_per_cell: float = 1.0,
    max_cell_retries: int = 1,
):
    """--executor and its options → None (local: run_sweep's own loop) or a RayExecutor; one line on bad input."""
    if name not in EXECUTORS:
        raise SpecbenchError(f"--executor must be one of {', '.join(EXECUTORS)} (got {name!r})")
    if name == "local":
        if address is not None or gpus_per_cell or cpus_per_cell != 1.0:
            raise SpecbenchError(
                "--address, --gpus-per-cell and --cpus-per-cell place cells on a Ray cluster; add --executor ray"
            )
        return None
    if not (gpus_per_cell >= 0 and cpus_per_cell > 0):
        raise SpecbenchError(
            f"--gpus-per-cell must be >= 0 and --cpus-per-cell > 0 (got {gpus_per_cell:g}, {cpus_per_cell:g})"
        )
    from specbench.measure.run.executors.ray_cluster import RayExecutor, check_address, import_ray

    import_ray()  # both checked before the sweep plans or writes anything
    check_address(address)
    return RayExecutor(
        address=address, gpus_per_cell=gpus_per_cell, cpus_per_cell=cpus_per_cell, max_cell_retries=max_cell_retries
    )

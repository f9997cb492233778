"""A full disk during a run: every write (manifest, examples, summary, sweep.json) fails with one line that
names the disk and exit 1, leaves no temporary file and no half-made run folder, and a later rerun with
space again resumes and finishes. Simulated by making the write raise ENOSPC at the point it would on a
full disk; where the test runs as root and may mount, also on a real 16 KiB tmpfs."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import run_args, save_tiny
from typer.testing import CliRunner

import specbench.files
from specbench.cli import app
from specbench.errors import SpecbenchError

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"target": save_tiny(root / "target", 0), "draft": save_tiny(root / "draft", 1)}


@pytest.fixture()
def task_file(tmp_path):
    path = tmp_path / "task.jsonl"
    path.write_text(
        '{"prompt": "the cat sat on the mat"}\n{"prompt": "the dog sat on the log"}\n'
        '{"prompt": "a small draft model proposes"}\n'
    )
    return str(path)


def temp_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if ".tmp" in p.name]


def disk_full_error(result) -> str:
    """The run failed with exactly one error line naming the full disk, and no traceback."""
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert "no space left on the disk" in errors[0]
    return errors[0]


def full_while_writing(monkeypatch, prefix: str) -> None:
    """Whole-file writes of a temp file named prefix*: the file is created, then the disk is full."""
    real = Path.write_text

    def write_text(self, data, *args, **kwargs):
        if self.name.startswith(prefix):
            real(self, "", *args, **kwargs)
            raise ENOSPC
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


def resumes(models_dir, task_file, tmp_path) -> Path:
    """Rerun the same command with space again: it finishes, with every example once and no temp file."""
    result = CliRunner().invoke(app, list(run_args(models_dir, task_file, tmp_path, "--json")))
    assert result.exit_code == 0, result.output
    run_dir = next((tmp_path / "res").iterdir())
    ids = [json.loads(line)["example_id"] for line in (run_dir / "examples.jsonl").read_text().splitlines()]
    assert len(ids) == 3 == len(set(ids))
    assert json.loads((run_dir / "summary.json").read_text())["complete"]
    assert temp_files(tmp_path) == []
    return run_dir


def test_no_space_for_the_summary(models_dir, task_file, tmp_path, monkeypatch):
    full_while_writing(monkeypatch, ".summary.json.tmp")
    result = CliRunner().invoke(app, list(run_args(models_dir, task_file, tmp_path)))
    assert "summary.json" in disk_full_error(result)
    assert temp_files(tmp_path) == []
    run_dir = next((tmp_path / "res").iterdir())
    assert len((run_dir / "examples.jsonl").read_text().splitlines()) == 1  # measured before the write: kept
    monkeypatch.undo()
    resumes(models_dir, task_file, tmp_path)


def test_no_space_for_the_manifest_leaves_no_folder(models_dir, task_file, tmp_path, monkeypatch):
    full_while_writing(monkeypatch, ".manifest.json.tmp")
    result = CliRunner().invoke(app, list(run_args(models_dir, task_file, tmp_path)))
    assert "manifest.json" in disk_full_error(result)
    assert list((tmp_path / "res").iterdir()) == []  # neither a temp file nor an empty run folder
    monkeypatch.undo()
    resumes(models_dir, task_file, tmp_path)


def test_no_space_while_appending_a_record(models_dir, task_file, tmp_path, monkeypatch):
    """The second record's append fails at fsync: the partial line is cut back, the first record stays."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to tell which file is synced")
    real, synced = os.fsync, []

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("examples.jsonl"):
            synced.append(fd)
            if len(synced) == 2:
                raise ENOSPC
        return real(fd)

    monkeypatch.setattr(specbench.files.os, "fsync", fsync)
    result = CliRunner().invoke(app, list(run_args(models_dir, task_file, tmp_path)))
    assert "examples.jsonl" in disk_full_error(result)
    run_dir = next((tmp_path / "res").iterdir())
    text = (run_dir / "examples.jsonl").read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 1  # the failed line was truncated away
    monkeypatch.undo()
    resumes(models_dir, task_file, tmp_path)


def test_no_space_for_sweep_json(tmp_path, monkeypatch):
    from specbench.measure.run.sweep import SweepGrid
    from specbench.measure.run.sweep_run import run_sweep

    task = tmp_path / "task.jsonl"
    task.write_text('{"prompt": "the cat"}\n')
    grid = SweepGrid.from_specs(
        target="t",
        draft="prompt-lookup",
        gamma="1",
        temperature="0",
        task=str(task),
        limit=1,
        max_new_tokens=4,
        device="cpu",
    )
    full_while_writing(monkeypatch, ".sweep.json.tmp")
    with pytest.raises(SpecbenchError, match="sweep.json: no space left on the disk") as err:
        run_sweep(grid, tmp_path / "res", sweep_id="s", session=object())
    assert "\n" not in str(err.value) and temp_files(tmp_path) == []


@pytest.fixture()
def tiny_tmpfs(tmp_path):
    """A real 16 KiB tmpfs at tmp_path/disk (root only; skipped where mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)], check=True, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        pytest.skip("this machine does not allow mounting a tmpfs")
    yield disk
    subprocess.run(["umount", str(disk)], capture_output=True, timeout=10)


def test_a_real_full_disk_then_more_space(models_dir, task_file, tmp_path, tiny_tmpfs):
    args = list(run_args(models_dir, task_file, tiny_tmpfs))  # results under the tiny disk: tiny_tmpfs/res
    disk_full_error(CliRunner().invoke(app, args))
    assert temp_files(tiny_tmpfs) == []
    subprocess.run(["mount", "-o", "remount,size=1m", str(tiny_tmpfs)], check=True, capture_output=True, timeout=10)
    result = CliRunner().invoke(app, args + ["--json"])
    assert result.exit_code == 0, result.output
    run_dir = next((tiny_tmpfs / "res").iterdir())
    ids = [json.loads(line)["example_id"] for line in (run_dir / "examples.jsonl").read_text().splitlines()]
    assert len(ids) == 3 == len(set(ids)) and temp_files(tiny_tmpfs) == []

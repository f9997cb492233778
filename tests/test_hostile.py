"""Hostile or unlucky users (issue 30): commands aimed at the wrong folder, links planted in a results folder,
kills in the middle of a write. Each case must lose nothing already on disk and answer in one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError

RUN_MANIFEST = {"config": {"target": "t"}, "task": {"name": "toy"}, "created": "2026-01-01T00:00:00"}


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def fake_run_folder(root: Path) -> Path:
    """A finished benchmark run folder: what distill must not write into."""
    root.mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps(RUN_MANIFEST, indent=2) + "\n")
    (root / "examples.jsonl").write_text('{"example_id": "a"}\n{"example_id": "b"}\n')
    (root / "summary.json").write_text('{"n_examples": 2}\n')
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- 1. distill --out onto the wrong folder

DISTILL = ("distill", "--target", "no-such-model", "--preset", "small", "--max-session-steps", "1", "--device", "cpu")


def test_distill_refuses_a_benchmark_run_folder_and_leaves_it_as_it_was(tmp_path):
    run = fake_run_folder(tmp_path / "R" / "x")
    before = snapshot(run)
    line = one_line_error(invoke(*DISTILL, "--out", str(run)))
    assert "manifest.json that is not a distillation's" in line
    assert snapshot(run) == before and not (run / "work").exists()


def test_distill_refuses_a_folder_with_other_files(tmp_path):
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    line = one_line_error(invoke(*DISTILL, "--out", str(folder)))
    assert "holds no distillation" in line
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]


def test_distill_refuses_an_empty_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = one_line_error(invoke(*DISTILL, "--out", ""))
    assert "--out is empty" in line
    assert list(tmp_path.iterdir()) == []  # nothing written into the current folder


def test_a_refused_distill_leaves_no_empty_folders(tmp_path):
    out = tmp_path / "new" / "draft"
    one_line_error(invoke(*DISTILL, "--out", str(out), "--resume"))  # no checkpoint to resume
    one_line_error(invoke(*DISTILL, "--out", str(out)))  # the target does not exist
    assert not out.exists()


def test_distill_still_resumes_into_its_own_folder(tmp_path):
    """The check lets a distillation's own folder through: one with work/, or with a distill manifest."""
    from specbench.distill.pipeline import check_out_folder

    (tmp_path / "a" / "work").mkdir(parents=True)
    check_out_folder(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_text(json.dumps({"command": "specbench distill --target t --out b"}))
    check_out_folder(tmp_path / "b")
    check_out_folder(tmp_path / "c")  # not there yet
    (tmp_path / "d").mkdir()
    check_out_folder(tmp_path / "d")  # empty
    with pytest.raises(SpecbenchError, match="not a folder"):
        (tmp_path / "e").write_text("x")
        check_out_folder(tmp_path / "e")

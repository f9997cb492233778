"""The wheel a pip user gets carries what `specbench run` needs without a checkout, and pyproject says what it must.

Builds the wheel from a copy of the sources (so the checkout gets no build/ or egg-info and two test
runs cannot collide) and reads its file list: the built-in task YAMLs and the shipped distilled
draft's weights must be inside. The full install-and-run check is scripts/test_wheel.sh (`make test-wheel`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILTIN = sorted(p.name for p in (ROOT / "specbench" / "tasks" / "builtin").glob("*.yaml"))
DRAFT = ROOT / "specbench" / "models" / "distilled" / "smollm2-135m-distilled"


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> list[str]:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "specbench", src / "specbench", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "work")
    )
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = out.glob("specbench_sd-*.whl")  # the distribution is specbench-sd (pyproject [project] name)
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def test_the_wheel_carries_the_builtin_tasks(wheel_names):
    assert len(BUILTIN) >= 2 and "ding-de-en.yaml" in BUILTIN
    assert sorted(n.rsplit("/", 1)[1] for n in wheel_names if n.startswith("specbench/tasks/builtin/")) == BUILTIN


def test_the_wheel_carries_the_shipped_draft(wheel_names):
    inside = {
        n.rsplit("/", 1)[1] for n in wheel_names if n.startswith("specbench/models/distilled/smollm2-135m-distilled/")
    }
    assert {"model.safetensors", "config.json", "tokenizer.json", "manifest.json"} <= inside
    assert {p.name for p in DRAFT.iterdir() if p.is_file()} <= inside  # every file of the folder, nothing left out
    assert not any("/work/" in n for n in wheel_names)  # the trainer's scratch never ships


def test_the_wheel_holds_the_package_and_its_entry_point(wheel_names):
    assert "specbench/cli/__init__.py" in wheel_names and "specbench/models/presets.py" in wheel_names
    assert "specbench/measure/results/results.md" in wheel_names  # the results schema doc
    (entry_points,) = [n for n in wheel_names if n.endswith(".dist-info/entry_points.txt")]
    assert entry_points.startswith("specbench_sd-")  # our own name on the index: "specbench" is someone else's
    assert not any(n.startswith(("tests/", "bench/", "scripts/")) for n in wheel_names)


def test_pyproject_pins_what_setup_installs():
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = {d.split(">")[0].split("<")[0].split("=")[0].strip(): d for d in meta["dependencies"]}
    torch_pin = (ROOT / "scripts" / "setup.sh").read_text().split("TORCH_VERSION:-", 1)[1].split("}", 1)[0]
    spec = deps["torch"].removeprefix("torch")
    from packaging.specifiers import SpecifierSet

    assert torch_pin in SpecifierSet(spec), f"setup.sh installs torch {torch_pin}, pyproject declares {deps['torch']}"
    extras = meta["optional-dependencies"]
    assert any(d.startswith("hypothesis") for d in extras["test"])
    assert any(d.startswith("pyarrow") for d in extras["export"])
    assert isinstance(meta["license"], str)  # an SPDX expression, not the deprecated table

"""Input validation at the edge: one validator per value (ids, folders, temperature, γ), each a one-line
error with exit 1 through the CLI, and nothing written anywhere when an input is refused."""

from __future__ import annotations

import math

import pytest
from helpers import run_args, save_tiny
from typer.testing import CliRunner

import specbench.engines.torch.session as torch_session
from specbench.cli import app
from specbench.config import (
    MAX_GAMMA,
    RunConfig,
    SamplingConfig,
    check_gamma_budget,
    check_gamma_context,
    check_id,
    check_results_dir,
    check_temperature,
    parse_gamma,
)
from specbench.errors import SpecbenchError

BAD_IDS = ["../escaped", "/abs/path", "a/b", "", ".", "..", ".hidden", "a\\b", "a b", "x" * 256, "a\0b"]


@pytest.mark.parametrize("value", BAD_IDS)
def test_check_id_refuses_anything_but_one_folder_name(value):
    with pytest.raises(SpecbenchError, match="--run-id .* folder name") as err:
        check_id(value, "--run-id")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "value", ["run1", "sweep-ding-de-en-10cells-1a2b3c4d", "a.b_c-d", "_x", "x" * 255, "task-g3-t0.7"]
)
def test_check_id_accepts_folder_names(value):
    assert check_id(value, "--run-id") == value


@pytest.mark.parametrize("value", ["", "   ", "a\0b"])
def test_check_results_dir_refuses_empty_paths(value):
    with pytest.raises(SpecbenchError, match="--results-dir"):
        check_results_dir(value)


def test_check_results_dir_returns_a_path():
    assert str(check_results_dir("results")) == "results"


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -0.5])
def test_temperature_must_be_finite_and_non_negative(value):
    with pytest.raises(SpecbenchError, match="--temperature must be >= 0 and finite"):
        check_temperature(value)
    with pytest.raises(SpecbenchError, match="--temperature"):
        SamplingConfig(temperature=value).validate()


def test_gamma_is_bounded_by_config_budget_and_context():
    with pytest.raises(SpecbenchError, match=f"between 1 and {MAX_GAMMA}"):
        RunConfig("t", "d", "task", gamma=parse_gamma("1000000000")).validate()
    with pytest.raises(SpecbenchError, match="--gamma must be an integer"):
        parse_gamma("1e9")
    with pytest.raises(SpecbenchError, match="more than the 12 new tokens"):
        check_gamma_budget(parse_gamma(13), 12)
    check_gamma_budget(parse_gamma(12), 12)  # the last step drafts what is left: accepted
    check_gamma_budget(parse_gamma("adaptive"), 1)  # policies cap themselves at the budget
    with pytest.raises(SpecbenchError, match="context of 16"):
        check_gamma_context(16, 16)
    check_gamma_context(15, 16)
    check_gamma_context(129, None)  # a model without a known context


# --------------------------------------------------------------------------- through the CLI


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "target": save_tiny(root / "target", 0),
        "draft": save_tiny(root / "draft", 1),
        "short": save_tiny(root / "short", 0, max_positions=16),
    }


@pytest.fixture()
def task_file(tmp_path):
    path = tmp_path / "task.jsonl"
    path.write_text(
        '{"prompt": "the cat sat on the mat"}\n{"prompt": "the dog sat on the log"}\n'
        '{"prompt": "a small draft model proposes"}\n'
    )
    return str(path)


def tree(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def one_line_error(args, cwd=None, monkeypatch=None, code: int = 1) -> str:
    """Exit `code` (2: options refused before anything ran; 1: refused while running) and one error line."""
    if cwd is not None:
        monkeypatch.chdir(cwd)
    result = CliRunner().invoke(app, list(args))
    text = result.output.strip()
    assert result.exit_code == code, result.output
    assert "Traceback" not in text and len(text.splitlines()) == 1 and text.startswith("error:"), text
    return text


@pytest.mark.parametrize("run_id", ["../escaped", "/ABS", "a/b", "", "..", ".hidden"])
def test_bad_run_ids_are_refused_and_write_nothing(models_dir, task_file, tmp_path, monkeypatch, run_id):
    run_id = str(tmp_path / "abs-run") if run_id == "/ABS" else run_id
    before = tree(tmp_path)
    args = run_args(models_dir, task_file, tmp_path, "--run-id", run_id)
    text = one_line_error(args, tmp_path, monkeypatch, code=2)  # a bad option value (issue 41)
    assert "--run-id" in text and "folder name" in text
    assert tree(tmp_path) == before  # not even --results-dir: the id is checked first


@pytest.mark.parametrize("sweep_id", ["../escaped", "/ABS", "a/b", ""])
def test_bad_sweep_ids_are_refused_and_write_nothing(task_file, tmp_path, monkeypatch, sweep_id):
    sweep_id = str(tmp_path / "abs-sweep") if sweep_id == "/ABS" else sweep_id
    before = tree(tmp_path)
    result = CliRunner().invoke(
        app,
        [
            "sweep",
            "--target",
            "tiny",
            "--draft",
            "prompt-lookup",
            "--gamma",
            "1",
            "--task",
            task_file,
            "--limit",
            "2",
            "--max-new-tokens",
            "4",
            "--device",
            "cpu",
            "--results-dir",
            str(tmp_path / "res"),
            "--sweep-id",
            sweep_id,
        ],
    )
    assert result.exit_code == 2 and "Traceback" not in result.output  # a bad option value (issue 41)
    assert result.output.strip().splitlines()[-1].startswith("error: --sweep-id")
    assert tree(tmp_path) == before


def test_gamma_far_too_large_is_one_line(models_dir, task_file, tmp_path):
    text = one_line_error(run_args(models_dir, task_file, tmp_path, "--gamma", "1000000000"), code=2)
    assert f"between 1 and {MAX_GAMMA}" in text
    assert not (tmp_path / "res").exists()


def test_gamma_above_the_token_budget_is_refused_before_models_load(models_dir, task_file, tmp_path, monkeypatch):

    monkeypatch.setattr(
        torch_session, "TorchSession", lambda *a, **k: pytest.fail("models loaded before γ was checked")
    )
    text = one_line_error(run_args(models_dir, task_file, tmp_path, "--gamma", "13"))  # run_args: 12 new tokens
    assert "--gamma 13 is more than the 12 new tokens" in text
    assert not (tmp_path / "res").exists()


def test_gamma_beyond_the_target_context_is_refused(models_dir, task_file, tmp_path):
    text = one_line_error(
        [
            "run",
            "--target",
            models_dir["short"],
            "--draft",
            "prompt-lookup",
            "--task",
            task_file,
            "--limit",
            "1",
            "--gamma",
            "15",
            "--max-new-tokens",
            "15",
            "--device",
            "cpu",
            "--results-dir",
            str(tmp_path / "res"),
        ]
    )
    assert "context of 16" in text
    assert not any((tmp_path / "res").iterdir())  # --results-dir was created, no run folder in it


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_non_finite_temperature_is_one_line(models_dir, task_file, tmp_path, value):
    text = one_line_error(run_args(models_dir, task_file, tmp_path, "--temperature", value), code=2)
    assert "--temperature must be >= 0 and finite" in text
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_empty_results_dir_is_one_line_and_writes_nothing(models_dir, task_file, tmp_path, monkeypatch, command):
    args = [
        "--target",
        models_dir["target"],
        "--draft",
        "prompt-lookup",
        "--gamma",
        "1",
        "--task",
        task_file,
        "--limit",
        "1",
        "--max-new-tokens",
        "4",
        "--device",
        "cpu",
        "--results-dir",
        "",
    ]
    before = tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, [command, *args])
    assert result.exit_code == 2, result.output  # a bad option value, refused with the options (issue 41)
    assert result.output.strip().splitlines()[-1].startswith("error: --results-dir")
    assert "Traceback" not in result.output
    assert tree(tmp_path) == before  # not the current directory either

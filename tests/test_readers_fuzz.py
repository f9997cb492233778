"""Every reader of user or result files, fed random bytes, truncated JSON and JSON of the wrong shape.

Each case must end in a one-line SpecbenchError or a skip the reader lists (a note, or a warning the
report turns into one), never another exception. The generator is seeded (SEED), so a failure names
a reproducible case. CASES_PER_KIND cases of each of three kinds go to each of READERS readers
(9 × 3 × 40 = 1,080), and every top-level field of each JSON file is replaced, one at a time, by each
of BAD_VALUES (470 more): 1,550 cases. The issue's own wrong-shape line through `run` is in test_layout.
"""

from __future__ import annotations

import json
import random
import shutil
import warnings
from pathlib import Path

import pytest
import yaml

from specbench.config import LoadSpec, RunConfig
from specbench.errors import SpecbenchError
from specbench.measure.results import run_folder
from specbench.measure.results.records import load_examples, load_manifest, load_runs, read_summary, scan_examples
from specbench.measure.results.schema import RunFiles
from specbench.measure.results.tidy_table import export_frames
from specbench.measure.run import sweep, sweep_run
from specbench.measure.stats.metrics import summarize
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

SEED = 19
CASES_PER_KIND = 40
KINDS = ("random bytes", "truncated JSON", "wrong-shape JSON")
BAD_VALUES = (None, 5, "x", [], {})
READERS = 9
FIXTURE = Path(__file__).parent / "fixtures" / "results_v0_1"
OLD_RUN = FIXTURE / "task-draft-g3-t0-0caf17bc"
SCHEMA_WORDS = [
    "example_id",
    "baseline",
    "speculative",
    "n_tokens",
    "token_ids",
    "accept_lengths",
    "draft_lengths",
    "config",
    "task",
    "gamma",
    "ratio",
    "ms",
    "grid",
    "tasks",
    "n_examples",
    "speedup_ci95",
    "prompt",
]
counted: dict[str, int] = {}


# --------------------------------------------------------------------------- the generator


def random_json(rng: random.Random, depth: int = 0):
    """Any JSON value, biased towards the schema's own keys and awkward numbers."""
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 3, 2**31, 10**12, -(10**9)])
    if kind == 3:
        return rng.choice([0.0, -1.5, 1e308, 0.5, float("nan"), float("inf")])
    if kind == 4:
        return rng.choice(["", "x", "∂é", "\x00", "2", "adaptive"] + SCHEMA_WORDS)
    if kind == 5:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(SCHEMA_WORDS + ["other"]): random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def mutated(rng: random.Random, doc):
    """`doc` with one field somewhere inside it replaced by random JSON, or removed."""
    if not isinstance(doc, (dict, list)) or not doc or rng.random() < 0.2:
        return random_json(rng)
    doc = json.loads(json.dumps(doc))
    key = rng.choice(list(doc)) if isinstance(doc, dict) else rng.randrange(len(doc))
    if isinstance(doc, dict) and rng.random() < 0.25:
        del doc[key]
    else:
        doc[key] = mutated(rng, doc[key])
    return doc


def random_bytes(rng: random.Random) -> bytes:
    blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    return blob if rng.random() < 0.7 else b'{"example_id": "' + blob + b'"}\n'


def case(rng: random.Random, kind: str, valid: bytes, jsonl: bool) -> bytes:
    """One input of `kind`, built from a valid file's bytes."""
    if kind == "random bytes":
        return random_bytes(rng)
    if kind == "truncated JSON":
        return valid[: rng.randrange(1, len(valid))]
    if not jsonl:
        return json.dumps(mutated(rng, json.loads(valid))).encode()
    lines = valid.decode().splitlines()
    i = rng.randrange(len(lines))
    lines[i] = json.dumps(mutated(rng, json.loads(lines[i])))
    return ("\n".join(lines) + "\n").encode()


def each_case(name: str, valid: bytes, jsonl: bool):
    """(kind, index, bytes) for every case of one reader, counted; a JSON file also gets every top-level
    field replaced, one at a time, by each of BAD_VALUES (random mutation can miss a single field)."""
    rng = random.Random(f"{SEED}-{name}")
    for kind in KINDS:
        for i in range(CASES_PER_KIND):
            counted[name] = counted.get(name, 0) + 1
            yield kind, i, case(rng, kind, valid, jsonl)
    if not jsonl:
        doc = json.loads(valid)
        for i, (key, bad) in enumerate((k, v) for k in doc for v in BAD_VALUES):
            counted[name] += 1
            yield f"field {key} = {bad!r}", i, json.dumps({**doc, key: bad}).encode()


def one_line_or_ok(fn, where: str):
    """Call fn; a SpecbenchError must be one line; any other exception fails the test naming the case."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    except SpecbenchError as exc:
        assert "\n" not in str(exc), f"{where}: a multi-line error: {exc}"
        return exc
    except Exception as exc:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{where}: {type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- task files


def test_task_jsonl(tmp_path):
    valid = b"".join(json.dumps({"prompt": p, "reference": p}).encode() + b"\n" for p in ("a b", "c d", "e f"))
    path = tmp_path / "task.jsonl"
    for kind, i, data in each_case("task.jsonl", valid, jsonl=True):
        path.write_bytes(data)
        one_line_or_ok(lambda: select_examples(load_task(str(path)), 3, 0), f"task.jsonl {kind} #{i}")


def test_task_yaml(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a mutated source must never reach the network
    (tmp_path / "rows.jsonl").write_text('{"text": "a b"}\n{"text": "c d"}\n')
    task = {
        "name": "fz",
        "source": {"type": "jsonl", "path": "rows.jsonl"},
        "fields": {"t": "text"},
        "template": "{t}",
        "chat_template": False,
    }
    valid = json.dumps(task).encode()
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    assert len(select_examples(load_task(str(path)), 2, 0)) == 2  # the base case is a valid task
    for kind, i, data in each_case("task.yaml", valid, jsonl=False):
        if kind == "wrong-shape JSON" and i % 2:
            data = yaml.safe_dump(json.loads(data)).encode()  # the same shapes written as YAML
        path.write_bytes(data)
        one_line_or_ok(lambda: select_examples(load_task(str(path)), 3, 0), f"task.yaml {kind} #{i}")


# --------------------------------------------------------------------------- result files


def run_copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    return run


def test_examples_jsonl(tmp_path):
    """Every line is used or listed as skipped, and what is used can be summarized and exported."""
    run = run_copy(tmp_path)
    valid = (OLD_RUN / "examples.jsonl").read_bytes()
    for kind, i, data in each_case("examples.jsonl", valid, jsonl=True):
        where = f"examples.jsonl {kind} #{i}"
        (run / "examples.jsonl").write_bytes(data)
        rows, skipped = one_line_or_ok(lambda: scan_examples([run]), where)
        lines = [s for s in skipped if "examples.jsonl:" in s]
        left_out = any(s.endswith("the run is left out") for s in skipped)  # reader.read_run: the whole run
        assert left_out or len(rows) + len(lines) == sum(1 for line in data.split(b"\n") if line.strip()), where
        assert not (left_out and rows), where
        one_line_or_ok(lambda rows=rows: summarize(rows, 3, True, [1.0], 1.0), where)
        one_line_or_ok(lambda: load_examples(run), where)
        frame, notes = one_line_or_ok(lambda: export_frames([run], examples=True), where)
        assert len(frame) == len(rows) and notes == skipped, where


def test_summary_json(tmp_path):
    run = run_copy(tmp_path)
    valid = (OLD_RUN / "summary.json").read_bytes()
    for kind, i, data in each_case("summary.json", valid, jsonl=False):
        where = f"summary.json {kind} #{i}"
        (run / "summary.json").write_bytes(data)
        doc, problem = one_line_or_ok(lambda: read_summary(run / "summary.json"), where)
        assert (doc is None) != (problem is None), where
        one_line_or_ok(lambda: load_runs([run]), where)
        frame, notes = one_line_or_ok(lambda: export_frames([run], examples=False), where)
        assert len(frame) + len(notes) >= 1, f"{where}: neither exported nor listed as skipped"
        one_line_or_ok(lambda: sweep_run._cell_done(run, _config(), 3), where)


def _config():
    return RunConfig.from_dict(json.loads((OLD_RUN / "manifest.json").read_text())["config"])


def test_manifest_json(tmp_path):
    run = run_copy(tmp_path)
    valid = (OLD_RUN / "manifest.json").read_bytes()
    good = json.loads(valid)
    for kind, i, data in each_case("manifest.json", valid, jsonl=False):
        where = f"manifest.json {kind} #{i}"
        (run / "manifest.json").write_bytes(data)
        one_line_or_ok(lambda: load_manifest(run / "manifest.json", "use another --run-id"), where)
        old = one_line_or_ok(lambda: run_folder.read_manifest(RunFiles(run)), where)
        if isinstance(old, dict):
            one_line_or_ok(lambda old=old: run_folder.check_resumable(RunFiles(run), good, old), where)
        frame, notes = one_line_or_ok(lambda: export_frames([run], examples=False), where)
        # the summary still exports, or the run is left out because its records cannot be checked: and says so
        assert len(frame) == 1 or any("manifest.json" in n or "manifest plans" in n for n in notes), where


def sweep_setup(tmp_path: Path):
    grid = sweep.SweepGrid(
        load=LoadSpec("target", device="cpu"),
        drafts=("draft",),
        gammas=(1,),
        temperatures=(0.0,),
        tasks=("task.jsonl",),
        limit=2,
        max_new_tokens=8,
    )
    return grid, sweep_run.cell_ids(grid), {"task.jsonl": {"n_examples": 2, "examples_hash": "x"}}


def test_sweep_json(tmp_path):
    root = tmp_path / "sw"
    root.mkdir()
    grid, cells, tasks = sweep_setup(tmp_path)
    valid = json.dumps(sweep_run.write_sweep_file(root, "sw", grid, cells, tasks)).encode()
    for kind, i, data in each_case("sweep.json", valid, jsonl=False):
        where = f"sweep.json {kind} #{i}"
        (root / "sweep.json").write_bytes(data)
        one_line_or_ok(lambda: sweep_run.write_sweep_file(root, "sw", grid, cells, tasks), where)
        (root / "sweep.json").write_bytes(data)
        one_line_or_ok(lambda: export_frames([root], examples=False), where)


@pytest.mark.parametrize("name", ["noise_probes.jsonl", "baseline_probes.jsonl"])
def test_probe_files(tmp_path, name):
    run = run_copy(tmp_path)
    source = (
        OLD_RUN / "noise_probes.jsonl"
        if name == "noise_probes.jsonl"
        else FIXTURE / "old-sweep" / "task-draft-g2-t0" / "baseline_probes.jsonl"
    )
    valid = source.read_bytes()
    for kind, i, data in each_case(name, valid, jsonl=True):
        where = f"{name} {kind} #{i}"
        (run / name).write_bytes(data)
        probes = one_line_or_ok(lambda: run_folder.read_probes(run), where)
        drift = one_line_or_ok(lambda: run_folder.baseline_drift(RunFiles(run)), where)
        one_line_or_ok(
            lambda probes=probes, drift=drift: summarize(json.loads(valid_examples()), 3, True, probes, drift), where
        )


# --------------------------------------------------------------------------- hostile task files (issue 30)


def alias_bomb(levels: int) -> str:
    """A task whose name is `levels` nested lists of nine aliases of the level below: 9^levels strings once
    expanded (nine levels: 387 million, from under 500 bytes)."""
    nested = ",".join(f"&{chr(97 + i)} [{','.join([f'*{chr(96 + i)}' if i else 'x'] * 9)}]" for i in range(levels))
    return f"name: [{nested}]\nsource: {{type: jsonl, path: rows.jsonl}}\ntemplate: '{{t}}'\n"


def hostile_yaml(tmp_path: Path, **keys) -> Path:
    (tmp_path / "rows.jsonl").write_text('{"text": "a b"}\n{"text": "c d"}\n')
    task = {"source": {"type": "jsonl", "path": "rows.jsonl"}, "fields": {"t": "text"}, "template": "{t}", **keys}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    return path


def refused(fn, *words: str) -> str:
    """fn must raise a one-line SpecbenchError of at most 400 characters holding every word."""
    exc = one_line_or_ok(fn, "hostile task")
    assert isinstance(exc, SpecbenchError), f"accepted: {exc!r}"
    message = str(exc)
    assert len(message) <= 400 and all(w in message for w in words), message
    return message


@pytest.mark.parametrize("levels", [6, 9])
def test_a_yaml_alias_bomb_is_refused_in_one_short_line(tmp_path, levels):
    """Refused before any expansion (the old loader expanded nine levels into a MemoryError, six into a 2.6 MB
    message)."""
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(levels))
    assert len(path.read_bytes()) < 500
    refused(lambda: load_task(str(path)), "aliases", "not allowed")
    small = hostile_yaml(tmp_path)
    small.write_text(small.read_text().replace("template: '{t}'", "template: &x '{t}'\ndescription: *x"))
    refused(lambda: load_task(str(small)), "aliases")


def test_a_huge_value_is_shown_bounded(tmp_path):
    # each value's repr runs to hundreds of kilobytes; the message stays within refused()'s 400 characters
    path = hostile_yaml(tmp_path, name=list(range(20_000)), description="x" * 1_000_000)
    refused(lambda: load_task(str(path)), "'name' must be")
    path = hostile_yaml(tmp_path, max_new_tokens={"k" * 100_000: [1] * 10_000})
    refused(lambda: load_task(str(path)), "'max_new_tokens'")


@pytest.mark.parametrize("template", ["x {t:d}", "{t:>99999999999999999999}", "{t:>4000000000}", "{t!r}", "{t:{t}}"])
def test_template_format_specs_are_refused(tmp_path, template):
    path = hostile_yaml(tmp_path, template=template)
    refused(lambda: select_examples(load_task(str(path)), 2, 0), "format spec", "{t}")


def test_duplicate_example_ids_are_refused_naming_their_lines(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text('{"id": "a", "prompt": "one"}\n\n{"id": "b", "prompt": "two"}\n{"id": "a", "prompt": "three"}\n')
    refused(lambda: load_task(str(path)), "'a'", "line 1", "line 4", "twice")
    path.write_text('{"id": 1, "prompt": "one"}\n{"prompt": "two"}\n')  # row 2's id is its index: "1"
    refused(lambda: load_task(str(path)), "'1'", "line 1", "line 2")
    rows = tmp_path / "rows.jsonl"
    task = hostile_yaml(tmp_path)
    rows.write_text('{"id": "x", "text": "a b"}\n{"id": "x", "text": "c d"}\n')
    refused(lambda: select_examples(load_task(str(task)), 1, 0), "'x'", "line 1", "line 2")


def test_a_nan_prompt_is_refused(tmp_path):
    path = tmp_path / "nan.jsonl"
    path.write_text('{"prompt": NaN}\n{"prompt": "fine"}\n')
    refused(lambda: select_examples(load_task(str(path)), 2, 0), "nan", "not text")


@pytest.mark.parametrize(
    "data_files", [{"test": {"x": "rows.jsonl"}}, {"test": [["rows.jsonl"]]}, [["rows.jsonl"]], {"test": []}, {}]
)
def test_nested_hub_data_files_are_refused_before_datasets_sees_them(tmp_path, monkeypatch, data_files):
    """Issue 30 item 10: `datasets` raised a 226-line traceback on a split mapped to a mapping."""
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("the task reached datasets"))
    path = hostile_yaml(tmp_path, source={"type": "hub", "path": "json", "data_files": data_files})
    refused(lambda: select_examples(load_task(str(path)), 2, 0), "data_files", "e.g.")


def valid_examples() -> str:
    return "[" + ",".join((OLD_RUN / "examples.jsonl").read_text().splitlines()) + "]"


def test_the_case_count():
    """Runs last in this file: every reader above saw its share of cases (the total is stated in the report)."""
    if len(counted) < READERS:
        pytest.skip("run with the whole file to count the cases")
    random_cases = len(KINDS) * CASES_PER_KIND
    assert len(counted) == READERS and min(counted.values()) == random_cases
    print(f"\nreaders fuzz: {sum(counted.values())} cases: {counted}")

"""SPEED-Bench as tasks (tasks/speed_bench.py): its format read through the hub loader from a fixture of our own in
the card's format (and NVIDIA's prepared `messages` and parquet forms), the task names, the hub that cannot be
reached (exit 2), placeholders and malformed rows (one line each), and its categories in `report --by category`.
No test touches the network: datasets.load_dataset is spied on, or replaced where the hub would be asked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import save_tiny
from typer.testing import CliRunner

from specbench.cli import app, exit_code_of
from specbench.errors import SpecbenchError, UsageError
from specbench.measure.results.reader import RunRead
from specbench.report.leaderboard.method_table import OVERALL, category_order, method_table, spec_bench_category
from specbench.tasks import speed_bench
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

FIXTURE = Path(__file__).parent / "fixtures" / "speed_bench_qualitative.jsonl"
QUESTIONS = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No env copy, the specbench cache and datasets' Arrow cache inside the test's tmp dir."""
    import datasets

    monkeypatch.delenv(speed_bench.ENV_FILE, raising=False)
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")


@pytest.fixture
def calls(monkeypatch):
    """The calls that reach datasets.load_dataset (let through: a local builder reads the file)."""
    import datasets

    seen: list[tuple] = []
    real = datasets.load_dataset

    def spy(*args, **kwargs):
        seen.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    return seen


def task_file(tmp_path: Path, **source) -> str:
    """The shipped speed-bench task's fields over a source of our own."""
    path = tmp_path / "sp.yaml"
    src = json.dumps({"type": "speed-bench", **source})
    path.write_text(
        f"name: sp\nsource: {src}\nfields: {{prompt: prompt}}\ntemplate: '{{prompt}}'\nturns: turns\n"
        "metric: none\nmax_new_tokens: 4\n"
    )
    return str(path)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the format, through the hub loader


def test_the_fixture_reads_through_the_hub_loader_with_labelled_ids(calls, monkeypatch):
    monkeypatch.setenv(speed_bench.ENV_FILE, str(FIXTURE))
    spec = load_task("speed-bench")
    assert spec.source == {"type": "speed-bench", "config": "qualitative", "revision": speed_bench.REVISION}
    assert spec.metric is None
    rows = speed_bench.SpeedBenchSource.load_rows(spec.source)
    assert calls and calls[0][0] == ("json", None) and calls[0][1]["data_files"] == {"test": str(FIXTURE)}
    assert [r["id"] for r in rows] == [f"speed-bench:{q['category']}:{q['question_id']}" for q in QUESTIONS]
    assert [r["turns"] for r in rows] == [q["turns"] for q in QUESTIONS]
    assert rows[1]["prompt"] == QUESTIONS[1]["turns"][0] and rows[1]["sub_category"] == "sql"
    examples = select_examples(spec, 1, seed=0)  # --limit counts per category: one of each of the four
    assert sorted(e.id.rpartition(":")[0] for e in examples) == [
        "speed-bench:coding",
        "speed-bench:math",
        "speed-bench:multilingual",
        "speed-bench:writing",
    ]
    by_id = {f"speed-bench:{q['category']}:{q['question_id']}": q for q in QUESTIONS}
    for e in select_examples(spec, 2, seed=0):  # a later turn rides along with its question
        assert (e.prompt, list(e.turns)) == (by_id[e.id]["turns"][0], by_id[e.id]["turns"][1:])


def test_nvidias_prepared_messages_jsonl_and_parquet_give_the_same_examples(tmp_path, calls):
    import pandas as pd

    messages = [
        {
            **{k: v for k, v in q.items() if k != "turns"},
            "messages": [{"role": "user", "content": t} for t in q["turns"]],
        }
        for q in QUESTIONS
    ]
    prepared = write_jsonl(tmp_path / "qualitative.jsonl", messages)
    pd.DataFrame(QUESTIONS).to_parquet(tmp_path / "test.parquet")
    want = select_examples(load_task(task_file(tmp_path, path=str(FIXTURE))), 2, seed=3)
    assert select_examples(load_task(task_file(tmp_path, path=str(prepared))), 2, seed=3) == want
    assert select_examples(load_task(task_file(tmp_path, path="test.parquet")), 2, seed=3) == want
    assert [c[0][0] for c in calls] == ["json", "json", "parquet"]


def test_category_and_config_task_names(monkeypatch, tmp_path):
    monkeypatch.setenv(speed_bench.ENV_FILE, str(FIXTURE))
    math_task = load_task("speed-bench:math")
    assert math_task.source == {**load_task("speed-bench").source, "category": "math"}
    assert {e.id.rpartition(":")[0] for e in select_examples(math_task, 5, 0)} == {"speed-bench:math"}
    assert load_task("speed-bench:throughput_8k").source["config"] == "throughput_8k"
    tier = load_task("speed-bench:throughput_8k:mixed").source
    assert (tier["config"], tier["category"]) == ("throughput_8k", "mixed")
    for bad in ("speed-bench:poetry", "speed-bench:throughput_8k:coding", "speed-bench:"):
        with pytest.raises(SpecbenchError, match=r"unknown SPEED-Bench task .*use speed-bench:<domain> \(coding,"):
            load_task(bad)
    args = ["run", "--task", "speed-bench:poetry", "--target", save_tiny(tmp_path / "t", 0), "--draft", "prompt-lookup"]
    result = CliRunner().invoke(app, [*args, "--results-dir", str(tmp_path / "res")])
    assert result.exit_code == 2 and "unknown SPEED-Bench task" in result.output, result.output  # a misspelt name


def test_a_file_of_another_config_names_the_config_to_set(tmp_path):
    rows = [{**QUESTIONS[0], "category": "low_entropy"}]
    spec = load_task(task_file(tmp_path, path=str(write_jsonl(tmp_path / "t8k.jsonl", rows))))
    with pytest.raises(SpecbenchError, match=r"row 1: category 'low_entropy' is not one of SPEED-Bench qualitative's"):
        select_examples(spec, 1, 0)
    tiered = load_task(task_file(tmp_path, path=str(tmp_path / "t8k.jsonl"), config="throughput_8k"))
    assert [e.id for e in select_examples(tiered, 1, 0)] == [
        f"speed-bench:throughput_8k:low_entropy:{rows[0]['question_id']}"
    ]


# --------------------------------------------------------------------------- the hub, unreachable


def test_an_unreachable_hub_without_a_local_file_is_a_usage_error_naming_the_fix(monkeypatch):
    import datasets

    asked = []

    def offline(*args, **kwargs):
        asked.append((args, kwargs))
        raise ConnectionError("Couldn't reach 'nvidia/SPEED-Bench' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        UsageError,
        match=rf"cannot reach the Hugging Face hub for nvidia/SPEED-Bench .*set {speed_bench.ENV_FILE}=<file>",
    ) as err:
        select_examples(load_task("speed-bench:coding"), 1, 0)
    assert "\n" not in str(err.value) and "path: <file>" in str(err.value)
    assert asked[0][0] == ("nvidia/SPEED-Bench", "qualitative")
    assert asked[0][1]["revision"] == speed_bench.REVISION and asked[0][1]["split"] == "test"
    assert exit_code_of(lambda: select_examples(load_task("speed-bench"), 1, 0)) == 2  # the CLI's exit code


def test_the_command_line_exits_2_on_an_unreachable_hub(monkeypatch, tmp_path):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nvidia/SPEED-Bench' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    target = save_tiny(tmp_path / "t", 0)
    args = ["run", "--task", "speed-bench", "--target", target, "--draft", "prompt-lookup", "--limit", "1"]
    result = CliRunner().invoke(app, [*args, "--results-dir", str(tmp_path / "res")])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.strip().splitlines() if x.startswith("error:")]
    assert speed_bench.ENV_FILE in line


# --------------------------------------------------------------------------- placeholders and malformed rows


def test_placeholders_are_refused_naming_the_prepare_step_and_complete_categories(tmp_path):
    holed = [dict(q) for q in QUESTIONS]
    holed[2]["turns"] = [speed_bench.PLACEHOLDER + "\n\n{question}"]  # one math question not redistributed
    path = str(write_jsonl(tmp_path / "hub-copy.jsonl", holed))
    with pytest.raises(
        SpecbenchError, match=r"1 of the 8 questions are placeholders .*\(math 1\); build the full"
    ) as err:
        select_examples(load_task(task_file(tmp_path, path=path)), 1, 0)
    text = str(err.value)
    assert "\n" not in text and f"{speed_bench.ENV_FILE}=<its output>/qualitative.jsonl" in text
    assert "complete here: speed-bench:coding, speed-bench:multilingual, speed-bench:writing" in text
    coding = select_examples(load_task(task_file(tmp_path, path=path, category="coding")), 5, 0)
    assert len(coding) == 2  # a complete category of the same copy runs


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"category": None}, r"row 3: category None is not one of SPEED-Bench qualitative's \(coding, "),
        ({"turns": []}, r"row 3: question '2c3d4e5f60718293a4b5c6d7e8f90a1b' has no turns; give it 'turns'"),
        ({"turns": ["ok", " "]}, r"row 3: question '2c3d\w+' has an empty or non-text turn"),
        ({"question_id": "a:b"}, r"row 3: a question needs a question_id \(text without ':'\)"),
    ],
)
def test_a_malformed_row_is_one_line_naming_it(tmp_path, change, message):
    rows = [dict(q) for q in QUESTIONS]
    rows[2].update(change)
    spec = load_task(task_file(tmp_path, path=str(write_jsonl(tmp_path / "bad.jsonl", rows))))
    with pytest.raises(SpecbenchError, match=message) as err:
        select_examples(spec, 1, 0)
    assert "\n" not in str(err.value)


def test_a_row_of_another_type_names_its_row_and_a_line_datasets_cannot_read_is_one_line(tmp_path):
    rows = [dict(q) for q in QUESTIONS]
    rows[5]["turns"] = {"not": "a list"}  # mixed types: datasets keeps the column as JSON, our check names the row
    spec = load_task(task_file(tmp_path, path=str(write_jsonl(tmp_path / "mixed.jsonl", rows))))
    with pytest.raises(SpecbenchError, match=r"mixed.jsonl row 6: question '5f60\w+' has no turns") as err:
        select_examples(spec, 1, 0)
    assert "\n" not in str(err.value)
    broken = tmp_path / "bad.jsonl"
    broken.write_text(FIXTURE.read_text(encoding="utf-8") + '{"question_id": "x", "category": \n', encoding="utf-8")
    spec = load_task(task_file(tmp_path, path=str(broken)))
    with pytest.raises(
        SpecbenchError, match=r"bad.jsonl: not a table datasets can read .*each with question_id"
    ) as err:
        select_examples(spec, 1, 0)
    assert "\n" not in str(err.value)


def test_bad_source_keys_are_one_line(tmp_path):
    with pytest.raises(SpecbenchError, match=r"speed-bench source 'config' 'throughput_4k' is unknown; use one of"):
        load_task(task_file(tmp_path, config="throughput_4k"))
    with pytest.raises(SpecbenchError, match=r"'category' 'mixed' is not one of qualitative's: coding, "):
        load_task(task_file(tmp_path, category="mixed"))
    with pytest.raises(SpecbenchError, match=r"a SPEED-Bench copy must be a .jsonl, .json or .parquet file"):
        select_examples(load_task(task_file(tmp_path, path="q.csv")), 1, 0)
    with pytest.raises(SpecbenchError, match=r"SPEED-Bench file .*none.jsonl does not exist"):
        select_examples(load_task(task_file(tmp_path, path="none.jsonl")), 1, 0)


# --------------------------------------------------------------------------- categories in results


def record(example_id: str, ratio: float = 1.5) -> dict:
    engine = {"n_tokens": 30, "prefill_s": 0.1, "decode_s": 0.9, "target_calls": 29}
    spec = {**engine, "prefill_s": 0.1 / ratio, "decode_s": 0.9 / ratio, "target_calls": 9}
    return {"example_id": example_id, "baseline": engine, "speculative": spec}


def test_speed_bench_labels_are_categories_of_their_own_in_the_table():
    assert spec_bench_category("speed-bench:coding:0a1b") == "speed-bench:coding"
    assert spec_bench_category("speed-bench:throughput_8k:mixed:7") == "speed-bench:throughput_8k:mixed"
    assert spec_bench_category("coding:3") == "coding"  # Spec-Bench's own category of the same name
    assert spec_bench_category("speed-bench:poetry:1") is None and spec_bench_category("speed-bench:7") is None
    manifest = {"config": {"draft": "d", "gamma": 4}, "task": {"name": "speed-bench"}}
    speed = RunRead(
        Path("speed"), None, manifest, [record(f"speed-bench:{c}:{i}") for c in ("writing", "coding") for i in range(2)]
    )
    spec = RunRead(Path("spec"), None, {**manifest, "task": {"name": "spec-bench"}}, [record("coding:1", 3.0)])
    table = method_table([speed, spec])
    assert table.categories() == ["coding", OVERALL, "speed-bench:coding", "speed-bench:writing", "speed-bench overall"]
    rows = {r["category"]: r for r in table.rows}
    assert rows["speed-bench:coding"]["n"] == 2 and rows["coding"]["n"] == 1  # never merged across benchmarks
    assert rows["speed-bench overall"]["n"] == 4 and math.isclose(rows["speed-bench:coding"]["speedup"], 1.5)
    mixed = RunRead(Path("x"), None, manifest, [record("speed-bench:coding:1"), record("ex7")])
    assert method_table([mixed]).categories() == ["speed-bench"]  # an id without a label: the task, as before
    assert category_order(["aclsum", "speed-bench:throughput_1k overall", "speed-bench:throughput_1k:mixed"]) == [
        "speed-bench:throughput_1k:mixed",
        "speed-bench:throughput_1k overall",
        "aclsum",
    ]


def test_a_run_records_its_categories_and_report_by_category_draws_them(tmp_path):
    target = save_tiny(tmp_path / "t", 0)
    results = tmp_path / "res"
    args = ["run", "--task", task_file(tmp_path, path=str(FIXTURE)), "--target", target, "--draft", "prompt-lookup"]
    args += [
        "--limit",
        "1",
        "--max-new-tokens",
        "4",
        "--gamma",
        "2",
        "--dtype",
        "float32",
        "--results-dir",
        str(results),
    ]
    ran = CliRunner().invoke(app, args)
    assert ran.exit_code == 0, ran.output
    shown = CliRunner().invoke(app, ["report", str(results), "--by", "category", "--json"])
    assert shown.exit_code == 0, shown.output
    assert [r["category"] for r in json.loads(shown.stdout)["rows"]] == [
        "speed-bench:coding",
        "speed-bench:math",
        "speed-bench:multilingual",
        "speed-bench:writing",
        "speed-bench overall",
    ]

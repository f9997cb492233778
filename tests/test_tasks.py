"""Task specs, data sources and example selection: fast, offline, on files in tests/fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specbench.errors import SpecbenchError
from specbench.tasks import examples, offline
from specbench.tasks import sources as data
from specbench.tasks import specs as tasks
from specbench.tasks.examples import Example, examples_hash, render_for_model, select_examples
from specbench.tasks.specs import TaskSpec, load_task

FIXTURES = Path(__file__).parent / "fixtures"
SHIPPED = ["aclsum", "cnn-dailymail", "ding-de-en", "wmt14-de-en", "wmt14-en-de", "xsum"]  # with a reference metric
SPEED_ONLY = ["spec-bench", "speed-bench"]  # metric per category or none (test_spec_bench.py, test_speed_bench.py)


@pytest.fixture(autouse=True)
def isolated_caches(tmp_path, monkeypatch):
    """Keep the specbench cache and datasets' Arrow cache inside the test's tmp dir."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "specbench-cache"))
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")


def write_task(tmp_path: Path, **overrides) -> Path:
    """A valid JSONL-backed YAML task with `overrides` applied (a value of ... deletes the key)."""
    rows = [
        {"id": f"r{i}", "text": f"sentence number {i}", "meta": {"lang": "en", "gold": f"gold {i}"}} for i in range(20)
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {
        "name": "t",
        "description": "a test task",
        "source": {"type": "jsonl", "path": "rows.jsonl"},
        "fields": {"x": "text"},
        "template": "Say: {x}",
        "chat_template": False,
        "reference": "meta.gold",
        "metric": "bleu",
        "max_new_tokens": 16,
    }
    for key, value in overrides.items():
        if value is ...:
            task.pop(key, None)
        else:
            task[key] = value
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(task, allow_unicode=True))
    return path


# --------------------------------------------------------------------------- shipped tasks


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_tasks_validate(name):
    spec = load_task(name)
    assert isinstance(spec, TaskSpec)
    assert spec.name == name
    assert spec.metric in ("bleu", "rouge")
    assert spec.reference and spec.chat_template and spec.max_new_tokens >= 1


def test_shipped_task_set_is_exactly_the_files():
    assert sorted(p.stem for p in tasks.TASKS_DIR.glob("*.yaml")) == sorted(SHIPPED + SPEED_ONLY)


def test_wmt_tasks_read_nested_translation_fields():
    de_en, en_de = load_task("wmt14-de-en"), load_task("wmt14-en-de")
    assert de_en.source == {"type": "hub", "path": "wmt/wmt14", "config": "de-en", "split": "test"}
    assert list(de_en.fields.values()) == ["translation.de"] and de_en.reference == "translation.en"
    assert list(en_de.fields.values()) == ["translation.en"] and en_de.reference == "translation.de"


def test_list_tasks_rows():
    rows = {r["name"]: r for r in tasks.list_tasks()}
    assert sorted(rows) == sorted(SHIPPED + SPEED_ONLY)
    for r in rows.values():
        assert set(r) >= {"name", "source", "size", "available", "metric"}
    assert rows["wmt14-de-en"]["available"] is False and rows["wmt14-de-en"]["size"] is None
    assert rows["ding-de-en"]["available"] is False  # the test cache is empty
    assert rows["aclsum"] == {**rows["aclsum"], "available": True, "size": 100, "metric": "rouge"}


def test_unknown_task_name_lists_known_ones():
    with pytest.raises(SpecbenchError, match="unknown task 'nope'.*wmt14-de-en"):
        load_task("nope")


# --------------------------------------------------------------------------- YAML validation


def test_valid_yaml_task(tmp_path):
    spec = load_task(str(write_task(tmp_path)))
    assert spec.fields == {"x": "text"} and spec.metric == "bleu" and spec.max_new_tokens == 16
    assert spec.source["path"] == str(tmp_path / "rows.jsonl")  # resolved against the task file
    assert spec.path == str(tmp_path / "t.yaml")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"colour": "red"}, r"unknown key\(s\) colour; allowed keys: name, description, source"),
        ({"template": "Say: {x} and {y}"}, r"template variable \{y\} is not in fields \(x\)"),
        ({"fields": {"x": "text", "z": "text"}}, r"fields maps 'z' but the template never uses \{z\}"),
        ({"metric": "meteor"}, r"unknown metric 'meteor'; use one of bleu, rouge or none"),
        ({"reference": ...}, r"metric bleu needs a 'reference'"),
        ({"max_new_tokens": 0}, r"'max_new_tokens' must be an integer >= 1 \(got 0\)"),
        ({"max_new_tokens": "8"}, r"'max_new_tokens' must be an integer >= 1"),
        ({"max_new_tokens": True}, r"'max_new_tokens' must be an integer >= 1"),
        ({"max_examples": -1}, r"'max_examples' must be an integer >= 1"),
        ({"chat_template": "yes"}, r"'chat_template' must be true or false"),
        ({"template": ...}, r"missing required key\(s\) template"),
        ({"template": "Say: {}"}, r"placeholder \{\} must be a plain name"),
        ({"template": "Say: {x.y}", "fields": {"x": "text"}}, r"placeholder \{x.y\} must be a plain name"),
        ({"template": "Say: {x"}, r"not a valid format string"),
        ({"source": {"type": "ftp", "path": "x"}}, r"source type 'ftp' is unknown; use one of hub, jsonl, offline"),
        (
            {"source": {"type": "hub", "path": "wmt14", "subset": "de-en"}},
            r"unknown source key\(s\) subset for type hub; allowed: config, data_files, path, revision, split, type",
        ),
        ({"source": {"type": "hub"}}, r"a hub source needs 'path'"),
        (
            {"source": {"type": "offline", "name": "europarl"}},
            r"offline source 'europarl' is unknown; use one of ding-de-en, aclsum",
        ),
        (
            {"source": {"type": "offline", "name": "aclsum", "split": "dev"}},
            r"no split 'dev'; use one of test, val, train, all",
        ),
        ({"source": "rows.jsonl"}, r"'source' must be a mapping"),
    ],
)
def test_yaml_validation_errors(tmp_path, overrides, message):
    path = write_task(tmp_path, **overrides)
    with pytest.raises(SpecbenchError, match=message) as err:
        load_task(str(path))
    assert "\n" not in str(err.value)
    assert str(path) in str(err.value)


def test_yaml_syntax_error_and_non_mapping(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecbenchError, match="not valid YAML"):
        load_task(str(bad))
    bad.write_text("- just\n- a list\n")
    with pytest.raises(SpecbenchError, match="must be a mapping"):
        load_task(str(bad))
    with pytest.raises(SpecbenchError, match="does not exist"):
        load_task(str(tmp_path / "missing.yaml"))


def test_metric_none_needs_no_reference(tmp_path):
    spec = load_task(str(write_task(tmp_path, metric="none", reference=...)))
    assert spec.metric is None and spec.reference is None
    assert all(e.reference is None for e in select_examples(spec, 3, 0))


def test_mapped_field_missing_in_data_names_it_and_the_available_ones(tmp_path):
    spec = load_task(str(write_task(tmp_path, fields={"x": "txt"})))
    with pytest.raises(
        SpecbenchError, match=r"data field 'txt' is missing; available fields: id, text, meta.lang, meta.gold"
    ):
        select_examples(spec, 2, 0)
    spec = load_task(str(write_task(tmp_path, reference="meta.golden")))
    with pytest.raises(SpecbenchError, match=r"data field 'meta.golden' is missing"):
        select_examples(spec, 2, 0)


def test_non_text_field_is_refused(tmp_path):
    spec = load_task(str(write_task(tmp_path, fields={"x": "meta"})))
    with pytest.raises(SpecbenchError, match=r"field 'meta' of example r\d+ is a dict, not text"):
        select_examples(spec, 2, 0)


# --------------------------------------------------------------------------- nested fields


def test_get_field_nested_and_exact_dotted_key():
    row = {"translation": {"de": "Hallo", "en": "Hello"}, "a.b": "exact", "a": {"b": "nested"}}
    assert examples.get_field(row, "translation.de") == "Hallo"
    assert examples.get_field(row, "a.b") == "exact"
    assert examples.flat_fields(row) == ["translation.de", "translation.en", "a.b", "a.b"]
    with pytest.raises(
        SpecbenchError, match=r"'translation.fr' is missing; available fields: translation.de, translation.en"
    ):
        examples.get_field(row, "translation.fr")


def test_nested_fields_fill_template_and_reference(tmp_path):
    spec = load_task(str(write_task(tmp_path, fields={"x": "meta.lang"}, template="[{x}]")))
    ex = select_examples(spec, 1, 0)[0]
    assert ex.prompt == "[en]" and ex.reference == f"gold {ex.id[1:]}"


# --------------------------------------------------------------------------- selection and hashing


def test_selection_is_seeded_deterministic_and_prefix_stable(tmp_path):
    spec = load_task(str(write_task(tmp_path)))
    a, b = select_examples(spec, 5, seed=0), select_examples(spec, 5, seed=0)
    assert a == b and len(a) == 5 and len({e.id for e in a}) == 5
    assert [e.id for e in select_examples(spec, 10, seed=0)][:5] == [e.id for e in a]
    assert [e.id for e in select_examples(spec, 5, seed=1)] != [e.id for e in a]
    # the order is sha256(seed:index), not Python's RNG: pinned so a change cannot go unnoticed
    assert [e.id for e in a] == PINNED_SEED0_IDS
    assert a[0] == Example(id=a[0].id, prompt=f"Say: sentence number {a[0].id[1:]}", reference=f"gold {a[0].id[1:]}")


PINNED_SEED0_IDS = ["r15", "r18", "r7", "r4", "r9"]  # first 5 of range(20) sorted by sha256(b"0:<i>")


def test_limit_is_capped_by_size_and_max_examples(tmp_path):
    assert len(select_examples(load_task(str(write_task(tmp_path))), 100, 0)) == 20
    capped = load_task(str(write_task(tmp_path, max_examples=3)))
    assert len(select_examples(capped, 100, 0)) == 3
    with pytest.raises(SpecbenchError, match="limit must be an integer >= 1"):
        select_examples(capped, 0, 0)


def test_examples_hash_is_stable_and_content_sensitive():
    exs = [Example("1", "Übersetze: Hallo", "Hello"), Example("2", "Say hi", None)]
    h = examples_hash(exs)
    assert h == examples_hash(list(exs)) and len(h) == 64
    assert h == PINNED_HASH
    assert examples_hash(exs[::-1]) != h
    assert examples_hash([Example("1", "Übersetze: Hallo", "Hello."), exs[1]]) != h
    assert examples_hash([Example("1", "Übersetze: Hallo ", "Hello"), exs[1]]) != h
    assert examples_hash([Example("3", "Übersetze: Hallo", "Hello"), exs[1]]) != h


# sha256 of the compact JSON [[id, prompt, reference], ...]
PINNED_HASH = "c2527b0ad4f84f3e4686d7332d896c753f72bffca6d60ede3849c68582666255"


def test_empty_field_or_prompt_is_an_error(tmp_path):
    (tmp_path / "rows.jsonl").write_text(json.dumps({"text": "  ", "g": "x"}) + "\n")
    task = {"source": {"type": "jsonl", "path": "rows.jsonl"}, "fields": {"x": "text"}, "template": "{x}"}
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(task))
    with pytest.raises(SpecbenchError, match="field 'text' of example 0 is empty"):
        select_examples(load_task(str(tmp_path / "e.yaml")), 1, 0)


# --------------------------------------------------------------------------- JSONL prompt files


def test_jsonl_prompt_file_task():
    spec = load_task(str(FIXTURES / "prompts.jsonl"))
    assert (spec.name, spec.template, spec.metric, spec.max_new_tokens, spec.reference) == (
        "prompts",
        "{prompt}",
        None,
        64,
        "reference",
    )
    exs = select_examples(spec, 10, 0)
    assert len(exs) == 4
    by_id = {e.id: e for e in exs}
    assert by_id["2"] == Example("2", "What is the capital of France?", "Paris")


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"prompt": "a"}', '{"text": "b"}'], r"line 2 has no 'prompt' key \(keys: text\)"),
        (['{"prompt": "a", "reference": "x"}', '{"prompt": "b"}'], r"line 2 has no 'reference' while others do"),
        (['{"prompt": "a"}', '{"prompt": '], r":2: not valid JSON"),
        (['["prompt"]'], r":1: expected a JSON object, got list"),
        ([], r"no prompts"),
    ],
)
def test_jsonl_prompt_file_errors(tmp_path, lines, message):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecbenchError, match=message):
        load_task(str(path))


def test_jsonl_empty_prompt_and_missing_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": ""}\n')
    with pytest.raises(SpecbenchError, match="field 'prompt' of example 1 is empty"):
        select_examples(load_task(str(path)), 2, 0)
    with pytest.raises(SpecbenchError, match="does not exist"):
        load_task(str(tmp_path / "absent.jsonl"))


def test_jsonl_without_references(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "one"}\n\n{"prompt": "two", "id": "ignored-not-used"}\n')
    spec = load_task(str(path))
    assert spec.reference is None and spec.metric is None
    assert sorted((e.prompt, e.reference) for e in select_examples(spec, 5, 3)) == [("one", None), ("two", None)]


# --------------------------------------------------------------------------- hub loader on local files


@pytest.fixture
def spy_load_dataset(monkeypatch):
    """Record the calls that reach datasets.load_dataset (and let them through)."""
    import datasets

    calls = []
    real = datasets.load_dataset

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    return calls


def test_wmt14_shaped_local_file_through_the_hub_loader(spy_load_dataset):
    spec = load_task(str(FIXTURES / "wmt14_local.yaml"))
    assert spec.source["type"] == "hub"
    exs = select_examples(spec, 4, seed=0)
    assert spy_load_dataset and spy_load_dataset[0][0] == ("json", None)
    assert spy_load_dataset[0][1]["split"] == "test"
    assert len(exs) == 4
    rows = [json.loads(line)["translation"] for line in (FIXTURES / "wmt14_de_en_test.jsonl").read_text().splitlines()]
    for ex in exs:
        row = rows[int(ex.id)]  # no 'id' column: the row index is the id
        assert ex.prompt == f"Translate into English: {row['de']}" and ex.reference == row["en"]
    assert examples_hash(exs) == examples_hash(select_examples(spec, 4, seed=0))


def test_cnn_dailymail_shaped_json_and_parquet_through_the_hub_loader(tmp_path, spy_load_dataset):
    spec = load_task(str(FIXTURES / "cnn_local.yaml"))
    exs = select_examples(spec, 3, seed=7)
    rows = {r["id"]: r for r in json.loads((FIXTURES / "cnn_dailymail_test.json").read_text())}
    assert len(exs) == 3
    for ex in exs:  # the 'id' column is used as the example id
        assert ex.prompt.endswith(rows[ex.id]["article"]) and ex.prompt.startswith("Summarize")
        assert ex.reference == rows[ex.id]["highlights"]
    assert spec.metric == "rouge" and spec.chat_template is True and spec.max_new_tokens == 64

    import pandas as pd

    pd.DataFrame(list(rows.values())).to_parquet(tmp_path / "test-00000.parquet")
    parquet_task = yaml.safe_load((FIXTURES / "cnn_local.yaml").read_text())
    parquet_task["source"] = {"type": "hub", "path": "parquet", "data_files": {"test": "test-00000.parquet"}}
    (tmp_path / "cnn_parquet.yaml").write_text(yaml.safe_dump(parquet_task))
    assert select_examples(load_task(str(tmp_path / "cnn_parquet.yaml")), 3, seed=7) == exs
    assert [c[0][0] for c in spy_load_dataset] == ["json", "parquet"]


def test_hub_unreachable_becomes_one_line_error(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'wmt/wmt14' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        SpecbenchError,
        match=r"cannot reach the Hugging Face hub for dataset wmt/wmt14 \(de-en\).*"
        r"use an offline task: ding-de-en, aclsum",
    ) as err:
        select_examples(load_task("wmt14-de-en"), 2, 0)
    assert "\n" not in str(err.value)


def test_hub_loader_bad_split_and_missing_file(tmp_path):
    with pytest.raises(SpecbenchError, match=r"dataset json: Unknown split \"validation\""):
        data.load_hub("json", split="validation", data_files=str(FIXTURES / "wmt14_de_en_test.jsonl"))
    with pytest.raises(SpecbenchError, match=r"dataset json not found"):
        data.load_hub("json", split="train", data_files=str(tmp_path / "none.jsonl"))


def hub_task(tmp_path: Path, data_files) -> Path:
    """A hub-type task over two local JSON-lines files (a.jsonl: a0..a2, b.jsonl: b0..b2) with this data_files."""
    for name in ("a", "b"):
        rows = [{"id": f"{name}{i}", "text": f"row {name} {i}"} for i in range(3)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {"source": {"type": "hub", "path": "json", "data_files": data_files}, "fields": {"x": "text"}}
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump({**task, "template": "{x}"}))
    return path


@pytest.mark.parametrize(
    "data_files",
    [{"test": ["a.jsonl", "b.jsonl"]}, [{"split": "test", "path": ["a.jsonl", "b.jsonl"]}]],
    ids=["split-to-list", "list-of-split-entries"],
)
def test_hub_data_files_of_a_split_may_list_several_files(tmp_path, spy_load_dataset, data_files):
    spec = load_task(str(hub_task(tmp_path, data_files)))
    assert spec.source["data_files"] == {"test": [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]}
    assert sorted(e.id for e in select_examples(spec, 10, 0)) == ["a0", "a1", "a2", "b0", "b1", "b2"]


@pytest.mark.parametrize(
    ("data_files", "message"),
    [
        ({"test": {"x": "a.jsonl"}}, r"maps split 'test' to a mapping; nest no deeper"),
        ({"test": [["a.jsonl", "b.jsonl"]]}, r"maps split 'test' to a list holding a list; nest no deeper"),
        ({"test": []}, r"maps split 'test' to an empty list"),
        ([["a.jsonl"]], r"'data_files' is a list holding a list; give a path, a list of paths, or a mapping"),
        ({}, r"'data_files' is an empty mapping"),
        ([{"split": "test", "files": "a.jsonl"}], r"needs exactly 'split' and 'path'"),
        ([{"split": "test", "path": "a.jsonl"}, {"split": "test", "path": "b.jsonl"}], r"each split once"),
    ],
)
def test_nested_hub_data_files_are_one_line_before_any_download(tmp_path, spy_load_dataset, data_files, message):
    with pytest.raises(SpecbenchError, match=message) as err:
        load_task(str(hub_task(tmp_path, data_files)))
    assert "\n" not in str(err.value) and "e.g. " in str(err.value)  # names the fix
    assert spy_load_dataset == []  # refused while the task is read, before datasets saw it


# --------------------------------------------------------------------------- offline sources


EXPECTED_DING = [
    {"id": "L4.2", "de": "Der Zug hat heute zehn Minuten Verspätung.", "en": "The train is ten minutes late today."},
    {
        "id": "L5.1",
        "de": "Es regnet schon den ganzen Tag ohne Pause.",
        "en": "It has been raining all day without a break.",
    },
    {"id": "L5.2", "de": "Bei Regen bleiben wir lieber zu Hause.", "en": "When it rains we prefer to stay at home."},
    {"id": "L6.1", "de": "Mach bitte das Fenster zu, es ist kalt.", "en": "Please close the window, it is cold."},
    {"id": "L10.1", "de": "Die Katze schläft auf dem Sofa.", "en": "The cat is asleep on the sofa."},
    {
        "id": "L12.1",
        "de": "Sie schrieb ihm einen langen Brief aus Italien.",
        "en": "She wrote him a long letter from Italy.",
    },
]


def test_parse_ding_keeps_clean_sentence_pairs():
    lines = (FIXTURES / "ding_sample.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    # dropped: headwords, "/" alternatives, sth./etw. placeholders, < 5 or > 30 words, a repeated German
    # sentence, and a line whose ' | ' sub-entries do not pair up
    assert offline.parse_ding(lines) == EXPECTED_DING


def test_ding_cache_build_and_task(tmp_path):
    assert data.cache_dir() == tmp_path / "specbench-cache"
    spec = load_task("ding-de-en")
    with pytest.raises(SpecbenchError, match=r"ding-de-en is not fetched yet .*run `specbench data fetch`"):
        select_examples(spec, 2, 0)
    n = offline.build_ding_jsonl(FIXTURES / "ding_sample.txt", offline.ding_path())
    assert n == 6 and sorted(p.name for p in data.data_dir().iterdir()) == ["ding-de-en.jsonl"]  # no temp file left
    exs = select_examples(spec, 10, 0)
    assert len(exs) == 6
    pairs = {p["id"]: p for p in EXPECTED_DING}
    for ex in exs:
        assert ex.prompt.endswith("\n\n" + pairs[ex.id]["de"]) and ex.reference == pairs[ex.id]["en"]
    assert {r["name"]: r for r in tasks.list_tasks()}["ding-de-en"]["size"] == 6


def test_fetch_offline_data_reports_each_source(monkeypatch):
    def no_apt(dest=None):
        raise SpecbenchError("ding-de-en needs apt-get (a Debian/Ubuntu system)")

    monkeypatch.setattr(offline, "fetch_ding", no_apt)
    printed = []
    messages = offline.fetch_offline_data(console_print=printed.append)
    assert messages == printed and len(messages) == 2
    assert messages[0].startswith("ding-de-en: unavailable: ding-de-en needs apt-get")
    assert messages[1] == "aclsum: ready from the installed package (train 100, val 50, test 100)"

    monkeypatch.setattr(
        offline,
        "fetch_ding",
        lambda dest=None: offline.build_ding_jsonl(FIXTURES / "ding_sample.txt", dest or offline.ding_path()),
    )
    assert offline.fetch_offline_data(console_print=lambda m: None)[0].startswith(
        "ding-de-en: 6 sentence pairs written"
    )
    assert offline.fetch_offline_data(console_print=lambda m: None)[0].startswith("ding-de-en: already fetched (6 ")


def test_aclsum_task():
    spec = load_task("aclsum")
    exs = select_examples(spec, 5, 0)
    assert len(exs) == 5
    for ex in exs:
        abstract = ex.prompt.split("\n\n", 1)[1]
        assert len(abstract.split()) > 20 and " ," not in abstract and " ." not in abstract
        assert ex.reference and ex.reference.count(". ") >= 1  # approach + outcome: two sentences
    assert len(offline.load_aclsum("all")) == 250


def test_aclsum_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(offline.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SpecbenchError, match=r"pip install --no-deps aclsum"):
        select_examples(load_task("aclsum"), 1, 0)


def test_detokenize():
    assert (
        offline.detokenize("a user 's \" big \" model ( MT ) , that is n't bad / good .")
        == "a user's \"big\" model (MT), that isn't bad/good."
    )


# --------------------------------------------------------------------------- chat template


class FakeTokenizer:
    def __init__(self, chat_template):
        self.chat_template = chat_template
        self.calls = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        self.calls.append((messages, add_generation_prompt, tokenize))
        return f"<user>{messages[0]['content']}</user><assistant>"


def test_render_for_model_applies_chat_template_only_when_both_want_it(tmp_path):
    with_chat = load_task(str(write_task(tmp_path, chat_template=True)))
    without = load_task(str(write_task(tmp_path, chat_template=False)))
    tok = FakeTokenizer("{{ anything }}")
    assert render_for_model(with_chat, "Hi", tok) == "<user>Hi</user><assistant>"
    assert tok.calls == [([{"role": "user", "content": "Hi"}], True, False)]
    assert render_for_model(without, "Hi", tok) == "Hi"
    assert render_for_model(with_chat, "Hi", FakeTokenizer(None)) == "Hi"


def test_render_for_model_with_a_real_tokenizer(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    spec = load_task(str(write_task(tmp_path, chat_template=True)))
    assert render_for_model(spec, "Übersetze das.", tok) == "<|user|>Übersetze das.\n<|assistant|>"


# ---- source kinds: a registry of classes (Spec-Bench registers itself like any kind) -------------------


def test_source_kinds_are_registered_classes_and_sources_imports_none_of_them(monkeypatch, tmp_path):
    import ast
    import inspect

    from specbench.tasks import spec_bench

    assert list(data.SOURCES) == ["hub", "jsonl", "offline", "spec-bench", "speed-bench"]
    assert data.SOURCES["spec-bench"] is spec_bench.SpecBenchSource
    imported = {
        node.module
        for node in ast.walk(ast.parse(inspect.getsource(data)))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not any(m.startswith("specbench.tasks") for m in imported)  # no cycle back through a kind

    class Echo(data.Source):  # a kind added from outside goes through the same generic functions
        kind = "echo"
        keys = frozenset({"type", "text"})

        @classmethod
        def load_rows(cls, source: dict) -> list[dict]:
            return [{"prompt": source["text"]}]

    monkeypatch.setitem(data.SOURCES, "echo", Echo)
    source = data.validate_source({"type": "echo", "text": "hi"}, "t.yaml")
    assert data.load_rows(source) == [{"prompt": "hi"}]
    with pytest.raises(SpecbenchError, match="unknown source key\\(s\\) path for type echo"):
        data.validate_source({"type": "echo", "path": "x"}, "t.yaml")
    monkeypatch.delitem(data.SOURCES, "echo")
    with pytest.raises(
        SpecbenchError, match="source type 'echo' is unknown; use one of hub, jsonl, offline, spec-bench, speed-bench"
    ):
        data.validate_source({"type": "echo", "text": "hi"}, "t.yaml")

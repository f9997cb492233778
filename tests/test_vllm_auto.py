"""`--gamma auto` on `--engine vllm`, the manifest's record of the speculative engine, and the client's per-request
timeout (issue 39), without vLLM: a stand-in client answers as the worker does (engines loaded by key, generate
answers with vLLM's per-step counts), the calibrated curve is fixed, and a stand-in worker process hangs; then one
`--gamma auto` run through the real worker (conftest's vllm_session), skipped in one line without .venv-vllm."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest
from helpers import CORPUS, save_tiny

from specbench.config import LoadSpec, RunConfig
from specbench.engines.vllm import client as client_mod
from specbench.engines.vllm.client import VllmClient, request_timeout
from specbench.engines.vllm.session import result_from
from specbench.errors import SpecbenchError
from specbench.measure.auto.calibration import Calibration

MAX_NEW = 12


def fake_answer(key: str, max_new: int) -> dict:
    """A generate answer: plain emits one token a step; a speculative engine (key: its method's JSON) cycles a step
    without a proposal and two verify steps that draft γ and accept the first two positions (never the third)."""
    tokens, accepted, drafted, step = 1, [], [], 0
    while tokens < max_new:
        if key != "plain" and step % 3:
            g = json.loads(key)["num_speculative_tokens"]
            accepted.append(min(g, 2))
            drafted.append(g)
            tokens += min(g, 2) + 1
        else:
            tokens += 1
        step += 1
    tokens = min(tokens, max_new)
    answer: dict = {
        "token_ids": [5] * tokens,
        "finish_reason": "length",
        "arrivals": [[0.01 * (i + 1), i + 1] for i in range(tokens)],
    }
    if key != "plain":
        answer["per_step"] = {"accepted": accepted, "drafted": drafted, "histogram": [], "num_draft_tokens": 0}
    return answer


class FakeClient:
    """VllmClient's interface, answering as worker.py does (settings by key, generate with per-step counts)."""

    gpu = False

    def __init__(self):
        self.env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
        self.calls: list[tuple[str, dict]] = []

    def request(self, op: str, status: str | None = None, **fields) -> dict:
        self.calls.append((op, fields))
        if op == "info":
            return {"vllm": "0.32.0", "cpu": "a CPU", "cores": 2, "env": {}}
        if op == "load":
            method = fields["method"]
            return {
                "key": fields["key"],
                "speculative_config": None if method is None else {"method": method["name"]} | method,
                "enforce_eager": fields["enforce_eager"],
                "dtype": fields["dtype"],
                "block_size": 16,
                "prefix_caching": True,
                "max_model_len": 256,
                "load_s": 0.0,
            }
        if op == "pass":
            return {"seconds": 0.001, "cached_tokens": 0}
        if op == "generate":
            return fake_answer(fields["key"], fields["max_new_tokens"])
        raise AssertionError(f"unexpected op {op}")

    def close(self) -> None:
        return None

    def loads(self) -> list[int | None]:
        """num_speculative_tokens of each engine loaded, in order (None: plain)."""
        return [f["method"] and f["method"]["num_speculative_tokens"] for op, f in self.calls if op == "load"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm_auto")
    target = save_tiny(root / "tiny", 0)
    task = root / "task.jsonl"
    task.write_text("".join(json.dumps({"prompt": f"{CORPUS[i % 3]} {i}"}) + "\n" for i in range(10)))
    return str(target), str(task)


def curve(slope: float):
    """session_curve's stand-in: t(k) = 10 ms · (1 + slope · (k − 1)), whatever the session."""

    def measured(session, prompts, k_max, max_new_tokens, trees=False):
        ms = {k: 10.0 * (1 + slope * (k - 1)) for k in range(1, k_max + 1)}
        return Calibration("float32", "cpu", 0, ms, {k: 0.0 for k in ms}, 1)

    return measured


def prepare(tiny, tmp_path, monkeypatch, gamma: str, slope: float):
    from specbench.engines.vllm.session import VllmSession
    from specbench.measure.run import planning

    monkeypatch.setattr(planning, "session_curve", curve(slope))
    target, task = tiny
    client = FakeClient()
    session = VllmSession(LoadSpec(target, device="cpu", dtype="float32"), client=client)  # type: ignore[arg-type]
    config = RunConfig(
        load=session.load, engine="vllm", task=task, draft="prompt-lookup", gamma=gamma, limit=2,
        max_new_tokens=MAX_NEW,
    )  # fmt: skip
    plan = planning.prepare_run(config, tmp_path / "res", session=session)
    assert plan.lock is not None
    plan.lock.close()
    return plan, client


@pytest.mark.parametrize(("slope", "best"), [(0.3, 2), (0.0, None)])
def test_gamma_auto_on_vllm_pilots_vllms_method_at_gamma_max_and_prices_it_with_its_calibrated_curve(
    tiny, tmp_path, monkeypatch, slope, best
):
    """The pilot accepts positions 1 and 2 and never 3: with passes that cost 30 % more per token γ 2 wins; with
    flat passes (negative control) every deeper position is free and a longer γ wins. Either way the pilot ran vLLM's
    method at γ_max on untimed examples and the timed arm loads the chosen γ, which the manifest records."""
    plan, client = prepare(tiny, tmp_path, monkeypatch, "auto", slope)
    chosen = plan.config.gamma.fixed
    assert chosen is not None and (chosen == best if best is not None else chosen > 2)
    assert client.loads() == ([None, 8, chosen] if chosen != 8 else [None, 8])  # plain, the pilot's γ_max, the choice
    choice, manifest = plan.choice, plan.manifest
    assert choice is not None and choice.gamma.fixed == chosen
    pilot = choice.pilots["prompt-lookup"]
    assert len(pilot.examples) == 6 and not set(pilot.examples) & set(manifest["task"]["example_ids"])
    assert pilot.alpha == pytest.approx(2 / 3) and pilot.steps == 6 * 3
    # 3 verify steps and 2 steps without a proposal per example (12 tokens): vLLM's ngram offered 8 or nothing
    assert pilot.lookup_law == pytest.approx({0: 0.4, 8: 0.6})
    a = pilot.alpha_by_position
    assert a is not None and len(a) == 3 and a[0] == a[1] > 0.9 > 0.1 > a[2]
    reasons = "\n".join(choice.reasons)
    assert f"γ {chosen} (the fewest predicted ms per token" in reasons
    assert "pilot: 6 untimed examples (none of the timed ones), decoded by --engine vllm's own method" in reasons
    assert "predicted (held out)" in reasons and choice.prediction is not None
    assert choice.prediction["kind"] == "held_out" and choice.prediction["n_pilot"] == 6
    assert manifest["auto"]["gamma"] == chosen
    spec = manifest["engine"]["speculative"]
    assert spec["speculative_config"]["num_speculative_tokens"] == chosen
    assert spec["speculative_config"]["method"] == "ngram"
    assert spec["mode"] == "eager (enforce_eager)" and spec["kv_space_gib"] == "1"


def test_a_fixed_gamma_run_records_its_speculative_engine_in_the_manifest(tiny, tmp_path, monkeypatch):
    plan, client = prepare(tiny, tmp_path, monkeypatch, "3", 0.3)
    assert plan.choice is None and client.loads() == [None, 3]  # loaded before the manifest, not in a timed decode
    written = json.loads(plan.files.manifest.read_text())
    assert written["engine"]["speculative"]["speculative_config"]["num_speculative_tokens"] == 3
    assert [e["key"] for e in written["engine"]["engines"]][0] == "plain"


def test_a_pilot_of_timed_examples_is_not_called_held_out():
    from specbench.measure.auto.choose import AutoChoice, Candidate, PilotResult
    from specbench.measure.auto.engine_pilot import describe
    from specbench.run_specs import parse_gamma

    def choice():
        pilot = PilotResult("prompt-lookup", 0.5, 10, {0: 0.5, 4: 0.5}, False, ["a", "b"], [0.6, 0.5])
        cal = Calibration("float32", "cpu", 0, {1: 1.0}, {1: 0.0}, 1)
        return AutoChoice(
            {"gamma": "auto"}, "float32", "prompt-lookup", parse_gamma("2"), 2, ["γ 2 (…)"], {"float32": cal}, {},
            {"prompt-lookup": pilot}, [Candidate("prompt-lookup", "float32", 2, 1.2, 1.0)],
        )  # fmt: skip

    config = RunConfig(load=LoadSpec("smollm2-135m"), engine="vllm", task="aclsum", draft="prompt-lookup", gamma="auto")
    apart, overlap = choice(), choice()
    describe(apart, config, ["c", "d"])
    describe(overlap, config, ["b", "c"])
    assert apart.prediction is not None and "(none of the timed ones)" in apart.reasons[1]
    assert "offered nothing on 50% of the steps" in apart.reasons[1]
    assert overlap.prediction is None and "nothing here is held out" in overlap.reasons[1]
    assert not any("predicted (held out)" in r for r in overlap.reasons)


def test_the_engine_pilots_held_out_prediction_has_an_interval_from_the_pilot_examples_spread():
    """The vLLM pilot's held-out prediction carries the torch engine's kind of interval: the spread of what each pilot
    example's own acceptance predicts (between example sets) and the pricing error. Negative control: pilot examples
    of one acceptance have no spread, so the interval is the pricing error's alone; one example has no interval."""
    from specbench.measure.auto.choose import AutoChoice, Candidate, PilotResult
    from specbench.measure.auto.engine_pilot import describe
    from specbench.measure.auto.prediction import MODEL_LOG_SD
    from specbench.run_specs import parse_gamma

    config = RunConfig(load=LoadSpec("smollm2-135m"), engine="vllm", task="aclsum", draft="prompt-lookup", gamma="auto")
    cal = Calibration("float32", "cpu", 0, {1: 1.0, 2: 1.05, 3: 1.1}, {1: 0.0, 2: 0.0, 3: 0.0}, 1)
    law = {0: 0.2, 2: 0.8}

    def described(alphas: list[float]) -> tuple[dict, str, AutoChoice]:
        ids = [f"p{i}" for i in range(len(alphas))]
        per = [PilotResult("prompt-lookup", a, 10, law, False, [i], [a, a]) for a, i in zip(alphas, ids)]
        pilot = PilotResult("prompt-lookup", 0.5, 10 * len(alphas), law, False, ids, [0.5, 0.5], per)
        choice = AutoChoice(
            {"gamma": "auto"}, "float32", "prompt-lookup", parse_gamma("2"), 2, ["γ 2 (…)"], {"float32": cal}, {},
            {"prompt-lookup": pilot}, [Candidate("prompt-lookup", "float32", 2, 1.3, 1.0)],
        )  # fmt: skip
        describe(choice, config, ["t1", "t2", "t3", "t4"])
        assert choice.prediction is not None
        return choice.prediction, choice.reasons[-1], choice

    same, _, _ = described([0.5] * 6)
    spread, line, choice = described([0.1, 0.3, 0.5, 0.6, 0.8, 0.9])
    one, one_line, _ = described([0.5])
    pricing = math.exp(1.959964 * MODEL_LOG_SD)
    assert same["sampling_log_sd"] < 1e-12 and same["n_pilot"] == 6  # the negative control: pricing error alone
    assert (same["low"], same["high"]) == pytest.approx((1.3 / pricing, 1.3 * pricing), rel=1e-4)
    assert spread["sampling_log_sd"] > 0.05 and spread["low"] < same["low"] < 1.3 < same["high"] < spread["high"]
    assert line.startswith("predicted (held out) 1.30× [") and "differs between example sets" in line
    assert math.isnan(one["low"]) and "(no interval)" in one_line and "fewer than 2 pilot examples" in one_line
    written = choice.to_dict()
    assert "per_example" not in written["pilots"]["prompt-lookup"]  # used before timing only, not in the manifest
    assert AutoChoice.from_dict(written).pilots["prompt-lookup"].per_example is None


def test_steps_without_a_proposal_are_counted_from_the_tokens():
    """vLLM reports verify steps only: 1 prefill token + (1 + 1) + (2 + 1) from two verify steps leaves 3 of 9 tokens
    to steps without a proposal; a plain answer has no proposals at all."""
    answer = {
        "token_ids": list(range(9)),
        "finish_reason": "length",
        "arrivals": [[0.01 * i, i] for i in range(1, 10)],
        "per_step": {"accepted": [1, 2], "drafted": [4, 4], "histogram": [], "num_draft_tokens": 8},
    }
    assert result_from(answer).proposal_lengths == [4, 4, 0, 0, 0]
    cut = answer | {"token_ids": list(range(5))}  # the budget cut the last verify step: never a negative count
    assert result_from(cut).proposal_lengths == [4, 4]
    assert result_from({k: v for k, v in answer.items() if k != "per_step"}).proposal_lengths == []


# --------------------------------------------------------------------------- the client's per-request timeout

HANGS = """
import json, subprocess, sys, time
for line in sys.stdin:
    r = json.loads(line)
    if r["op"] == "hang":  # a stuck vLLM: a child of its own (an engine core) and no answer
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(child.pid, file=sys.stderr, flush=True)
        time.sleep(600)
    if r["op"] == "slow":
        time.sleep(r["s"])
    print(json.dumps({"id": r["id"], "ok": True, "result": {"pid": 0}}), flush=True)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie waiting for its reaper is gone too
    except OSError:
        return False


def test_a_worker_that_stops_answering_is_killed_with_its_children_and_the_error_says_how_to_raise_the_limit(
    monkeypatch,
):
    monkeypatch.delenv(client_mod.TIMEOUT_ENV, raising=False)
    client = VllmClient(command=[sys.executable, "-c", HANGS], on_status=lambda msg: None, timeout_s=2)
    try:
        assert client.request("slow", s=0.2)["pid"] == 0  # control: an answer in time is an answer
        t0 = time.monotonic()
        with pytest.raises(SpecbenchError) as err:
            client.request("hang")
        assert time.monotonic() - t0 < 15
        message = str(err.value)
        assert "\n" not in message and "vLLM hang gave no answer in 2 s" in message
        assert f"{client_mod.TIMEOUT_ENV}=<seconds>" in message and str(client.log_path) in message
        assert client.proc.poll() is not None
        child = int(client.log_path.read_text().split()[0])
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child)  # the worker's process group went with it
        with pytest.raises(SpecbenchError, match="exited"):
            client.request("slow", s=0)
    finally:
        client.close()
    assert client.log_path.exists()  # kept for the error that named it
    client.log_path.unlink()


def test_the_timeout_scales_with_the_request_and_the_env_var_replaces_it(monkeypatch):
    monkeypatch.delenv(client_mod.TIMEOUT_ENV, raising=False)
    generate = request_timeout("generate", {"max_new_tokens": 64, "prompt_ids": [1] * 100})
    assert generate == client_mod.BASE_TIMEOUT_S + 64 * client_mod.PER_TOKEN_S + 100 * client_mod.PER_PROMPT_TOKEN_S
    batch = request_timeout("generate_batch", {"max_new_tokens": 64, "requests": [{"prompt_ids": [1] * 100}] * 4})
    assert batch > generate and request_timeout("load", {"method": None}) == client_mod.LOAD_TIMEOUT_S
    monkeypatch.setenv(client_mod.TIMEOUT_ENV, "7.5")
    assert request_timeout("generate", {"max_new_tokens": 64}) == 7.5 == request_timeout("load", {})
    monkeypatch.setenv(client_mod.TIMEOUT_ENV, "0")
    assert request_timeout("generate", {"max_new_tokens": 64}) is None
    monkeypatch.setenv(client_mod.TIMEOUT_ENV, "soon")
    with pytest.raises(SpecbenchError, match=f"{client_mod.TIMEOUT_ENV}='soon' is not a number"):
        request_timeout("generate", {})


def test_the_env_var_times_out_a_request_without_a_code_change(monkeypatch):
    monkeypatch.setenv(client_mod.TIMEOUT_ENV, "1")
    client = VllmClient(command=[sys.executable, "-c", HANGS], on_status=lambda msg: None)
    try:
        with pytest.raises(SpecbenchError, match="gave no answer in 1 s"):
            client.request("slow", s=60)
    finally:
        client.close()
        client.log_path.unlink(missing_ok=True)


# --------------------------------------------------------------------------- end to end in .venv-vllm

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: run `make setup-vllm`")


@needs_vllm
def test_gamma_auto_through_the_real_worker_pilots_vllms_ngram_and_times_the_gamma_it_chose(vllm_session, tmp_path):
    """`--gamma auto` end to end (conftest's vLLM worker on the tiny random Llama): the pilot runs vLLM's ngram at
    γ_max on untimed examples, its acceptance comes from vLLM's per-step counts, the choice is priced with vLLM's
    calibrated t(k)/t(1), and the timed arm runs the chosen γ, which the manifest's speculative engine records."""
    from specbench.measure.run import measure, prepare_run

    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps({"prompt": f"{CORPUS[i % 3]} {CORPUS[i % 3]}"}) + "\n" for i in range(8)))
    config = RunConfig(
        load=vllm_session.load, engine="vllm", task=str(task), draft="prompt-lookup", gamma="auto", gamma_max=3,
        limit=2, max_new_tokens=8,
    )  # fmt: skip
    plan = prepare_run(config, tmp_path / "res", session=vllm_session)
    outcome = measure(plan)
    chosen, choice = plan.config.gamma.fixed, plan.choice
    assert chosen is not None and 1 <= chosen <= 3 and choice is not None
    pilot = choice.pilots["prompt-lookup"]
    assert pilot.examples and not set(pilot.examples) & set(plan.manifest["task"]["example_ids"])
    assert pilot.lookup_law is not None and math.isclose(sum(pilot.lookup_law.values()), 1.0)
    assert bool(pilot.alpha_by_position) == (pilot.steps > 0)  # vLLM's verify steps, position by position
    loaded = [json.loads(k) for k in vllm_session.engines if k != "plain"]
    assert any(m["name"] == "ngram" and m["num_speculative_tokens"] == 3 for m in loaded)  # the pilot, at γ_max
    spec = plan.manifest["engine"]["speculative"]
    assert spec["speculative_config"]["method"] == "ngram"
    assert spec["speculative_config"]["num_speculative_tokens"] == chosen and spec["enforce_eager"] is True
    s = outcome.summary
    assert s["n_examples"] == 2 and s["auto"]["reasons"] == choice.reasons
    assert any(r.startswith("pilot: ") and "(none of the timed ones)" in r for r in choice.reasons)
    best = [c for c in choice.candidates if c.gamma == chosen][0]
    assert s["auto_predicted_speedup"] == pytest.approx(best.speedup)

"""`--engine vllm` greedy divergences classified on vLLM's own logits (issue 39, item 4): the worker's prompt_logprobs
op (engines/vllm/scores.py) against a stand-in LLM, the session's side of it, and the classification
(measure/stats/own_logits.py) on fake answers with the torch engine's margin gate. No vLLM needed; the end-to-end
check on the real worker is in test_vllm.py (it shares that module's worker)."""

from __future__ import annotations

import ast
import io
import json
import sys
import types
from pathlib import Path

import pytest
import torch

from specbench.config import LoadSpec
from specbench.engines.vllm import scores, worker
from specbench.errors import SpecbenchError
from specbench.measure.stats.margin_gate import FLOOR_CAP_ULPS, identity_line, spacing
from specbench.measure.stats.own_logits import METHOD, explain_greedy, score_request

PROMPT = [1, 2, 3]
BASE = [10, 11, 12, 13]
SPEC = [10, 11, 14, 15]  # leaves the baseline at d = 2: 14 where the baseline has 12
D = 2
Z = 20.0  # the logits' scale: one bf16 spacing at 20 is 0.125
ONE = spacing(Z, torch.bfloat16)


def answer(gap_ulps: float, *, flip_ulps: float | None = None, b_in_first: bool = True, mode: str = "raw_logits"):
    """A fake answer to score_request(PROMPT, BASE, SPEC, D): every row's top-1 is the baseline's token, 3 spacings
    ahead of the next (no flip), but row D, where the emitted token 14 sits `gap_ulps` spacings below the baseline's 12
    (among the top k, or only in the second pass's row), and row 1 flipped by `flip_ulps` spacings when given."""
    rows = []
    for j, token in enumerate(BASE):
        top = [[token, Z], [99, Z - 3 * ONE]]
        if j == 1 and flip_ulps is not None:
            top = [[98, Z], [token, Z - flip_ulps * ONE]]
        if j == D and b_in_first:
            top = [[token, Z], [14, Z - gap_ulps * ONE], [99, Z - 40 * ONE]]
        rows.append({"token": token, "top": top})
    second = {"token": 14, "top": [[12, Z], [99, Z - ONE], [14, Z - gap_ulps * ONE]]}
    return {"mode": mode, "rows": [rows, [second]]}


def classify(given: dict, dtype=torch.bfloat16) -> tuple[dict, list]:
    """explain_greedy on `given` through a recording scorer; the torch replay must not run."""
    asked: list = []

    def scorer(sequences, positions):
        asked.append((sequences, positions))
        return given

    def no_torch():
        raise AssertionError("the torch replay ran although vLLM answered")

    numerics = explain_greedy(scorer, no_torch, PROMPT, {"token_ids": BASE}, {"token_ids": SPEC}, D, dtype)
    return numerics, asked


def record(numerics: dict) -> dict:
    return {"identical": False, "numerics": numerics}


def test_a_near_tie_on_vllms_logits_is_numerics_and_a_wide_gap_is_unexplained():
    """The gate of the torch engine on vLLM's own logits: 1 spacing apart (within rounding) → numerics; 16 spacings
    apart → unexplained, the negative control through the same path."""
    near, asked = classify(answer(1.0))
    assert asked == [([PROMPT + BASE, PROMPT + BASE[:D] + [14]], [[3, 4, 5, 6], [3 + D]])]
    div = near["divergence"]
    assert near["replays"] == "vllm" and div["method"] == METHOD and div["gap_rows"] == "one pass"
    assert (div["baseline_token"], div["speculative_token"]) == (12, 14)
    assert div["gap"] == pytest.approx(ONE) and div["gap_ulps"] == pytest.approx(1.0)
    assert near["floor_flips"] == 0 and near["floor_positions"] == len(BASE) - 1
    summary = identity_line([record(near)])
    assert (summary["divergences_numerics"], summary["divergences_unexplained"]) == (1, 0), summary
    # the line names what classified it: vLLM's own logits, not a replay of the verify-shaped pass
    line = summary["identity_line"]
    assert "on the engine's own logits" in line and "flips by itself" not in line
    wide, _ = classify(answer(16.0))
    summary = identity_line([record(wide)])
    assert (summary["divergences_numerics"], summary["divergences_unexplained"]) == (0, 1), summary
    assert "wider than 2 spacings" in summary["identity_line"]


def test_the_spacing_is_the_runs_dtype_at_the_logit_so_fp32_admits_no_bf16_sized_gap():
    """The same 1-bf16-spacing gap (0.125 at |z| = 20) is 2^16 float32 spacings: numerics in bf16, not in fp32."""
    fp32, _ = classify(answer(1.0), dtype=torch.float32)
    assert fp32["divergence"]["gap_ulps"] == pytest.approx(2.0**16)
    assert identity_line([record(fp32)])["divergences_unexplained"] == 1


def test_vllms_own_floor_widens_the_gate_up_to_its_cap_and_no_further():
    """A flip of the prompt pass against the baseline's tokens at 5 spacings admits a divergence at 5; a flip at
    16 widens the gate to FLOOR_CAP_ULPS only, so a divergence at 16 stays unexplained."""
    seen, _ = classify(answer(5.0, flip_ulps=5.0))
    assert seen["floor_flips"] == 1 and seen["floor_flip_ulps"] == [pytest.approx(5.0)]
    assert identity_line([record(seen)])["divergences_numerics"] == 1
    alone, _ = classify(answer(5.0))
    assert identity_line([record(alone)])["divergences_unexplained"] == 1  # without the floor: beyond 2 spacings
    capped, _ = classify(answer(16.0, flip_ulps=16.0))
    assert FLOOR_CAP_ULPS < 16 and identity_line([record(capped)])["divergences_unexplained"] == 1


def test_a_token_outside_the_first_rows_top_k_is_read_from_the_second_pass():
    numerics, _ = classify(answer(1.0, b_in_first=False))
    div = numerics["divergence"]
    assert div["gap_rows"] == "one pass (+ b)" and div["gap_ulps"] == pytest.approx(1.0)


def test_where_vllm_cannot_answer_the_torch_replay_runs_and_the_record_says_why():
    """Scores that are logprobs (no logit magnitude for the spacing) or a failing worker: the torch replay, named."""
    ran = []

    def torch_replay():
        ran.append(1)
        return {"floor_positions": 3, "floor_flips": 0, "divergence": None, "seconds": 0.0}

    def failing(sequences, positions):
        raise SpecbenchError("vLLM prompt_logprobs failed: boom")

    logprobs = answer(1.0, mode="raw_logprobs")
    out = explain_greedy(lambda s, p: logprobs, torch_replay, PROMPT, {"token_ids": BASE}, {"token_ids": SPEC}, D, None)
    assert ran and out["replays"].startswith("torch (vLLM could not answer") and "raw_logprobs" in out["replays"]
    out = explain_greedy(failing, torch_replay, PROMPT, {"token_ids": BASE}, {"token_ids": SPEC}, D, torch.bfloat16)
    assert len(ran) == 2 and "boom" in out["replays"]
    out = explain_greedy(None, torch_replay, PROMPT, {"token_ids": BASE}, {"token_ids": SPEC}, D, torch.bfloat16)
    assert len(ran) == 3 and "replays" not in out  # an engine without prompt scores (torch): its record as before


def test_identical_outputs_ask_for_the_baseline_alone_and_record_no_divergence():
    assert score_request(PROMPT, BASE, BASE, None) == ([PROMPT + BASE], [[3, 4, 5, 6]])
    given = answer(1.0)
    given["rows"] = given["rows"][:1]
    numerics = explain_greedy(lambda s, p: given, None, PROMPT, {"token_ids": BASE}, {"token_ids": BASE}, None, None)  # type: ignore[arg-type]
    assert numerics["divergence"] is None and numerics["replays"] == "vllm"


# --------------------------------------------------------------------------- the worker's op, with a stand-in LLM


class StandInLLM:
    """vLLM's LLM as scores.run calls it: each position i ≥ 1 of a prompt scores token t as −|t − 2·i| (ties: lower
    id first), top k plus the prompt's own token, as vLLM's prompt_logprobs does."""

    def __init__(self):
        self.params: list = []
        self.llm_engine = types.SimpleNamespace(
            vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(logprobs_mode="raw_logits"))
        )

    def generate(self, prompts, params, use_tqdm=True):
        self.params.append(params)
        (prompt,) = prompts
        ids = prompt["prompt_token_ids"]
        rows: list = [None]
        for i in range(1, len(ids)):
            ranked = sorted(range(20), key=lambda t, i=i: (abs(t - 2 * i), t))[: params.prompt_logprobs]
            rows.append({t: types.SimpleNamespace(logprob=-float(abs(t - 2 * i))) for t in {*ranked, ids[i]}})
        return [types.SimpleNamespace(prompt_logprobs=rows)]


@pytest.fixture()
def stand_in(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)  # type: ignore[attr-defined]
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda **kw: kw  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    llm = StandInLLM()
    w = worker.Worker()
    w.engines["plain"] = (llm, {"speculative_config": None})
    return w, llm


def test_the_op_returns_the_top_k_and_the_sequences_token_best_first_one_request_each(stand_in):
    w, llm = stand_in
    got = scores.run(w, {"key": "plain", "sequences": [[0, 2, 19], [5, 6]], "positions": [[1, 2], [1]], "k": 2})
    assert got["mode"] == "raw_logits" and len(llm.params) == 2  # one request per sequence
    assert llm.params[0].prompt_logprobs == 2 and llm.params[0].max_tokens == 1 and llm.params[0].temperature == 0.0
    first, second = got["rows"][0]
    assert first == {"token": 2, "top": [[2, -0.0], [1, -1.0]]}  # the top 2 (1 and 3 tie: the stand-in ranks 1 first)
    assert second["token"] == 19 and second["top"][:2] == [[4, -0.0], [3, -1.0]] and second["top"][-1] == [19, -15.0]
    assert got["rows"][1] == [{"token": 6, "top": [[2, -0.0], [1, -1.0], [6, -4.0]]}]
    with pytest.raises(ValueError, match="positions must lie in"):
        scores.run(w, {"key": "plain", "sequences": [[0, 2]], "positions": [[0]], "k": 2})


def test_the_protocol_routes_prompt_logprobs_to_scores_py():
    """Through serve: the op reaches scores.run (run by its path), whose one-line error names the missing engine."""
    out = io.StringIO()
    request = {"op": "prompt_logprobs", "id": 7, "key": "plain", "sequences": [[1, 2]], "positions": [[1]], "k": 2}
    worker.serve(io.StringIO(json.dumps(request) + "\n"), out)
    (line,) = out.getvalue().splitlines()
    got = json.loads(line)
    assert got["id"] == 7 and not got["ok"] and "no engine loaded under 'plain'" in got["error"]


def test_scores_py_imports_nothing_from_specbench():
    tree = ast.parse(Path(scores.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert {n.split(".")[0] for n in names} <= {"__future__", "importlib"}


# --------------------------------------------------------------------------- the session's side


class StubClient:
    gpu, env = False, {"VLLM_CPU_KVCACHE_SPACE": "1"}

    def __init__(self):
        self.sent: list = []

    def request(self, op, status=None, **fields):
        self.sent.append((op, fields))
        return {"key": fields.get("key"), "block_size": 16} if op.startswith("load") else {"mode": "raw_logits"}


def test_the_plain_engine_loads_with_raw_logits_and_prompt_scores_ask_it():
    """Only the plain engine (the one prompt_scores asks) is loaded with logprobs_mode raw_logits."""
    from specbench.engines.vllm.session import PLAIN, SCORES_TOP_K, VllmSession

    session = VllmSession.__new__(VllmSession)  # no worker: a stub client records what is sent
    session.load, session.folder, session.client = LoadSpec("tiny", device="cpu", dtype="bfloat16"), "/m", StubClient()
    session.engines = {}
    session.load_engine(PLAIN, None)
    session.load_engine("spec", {"name": "ngram", "num_speculative_tokens": 3})
    (_, plain), (_, spec) = session.client.sent
    assert plain["logprobs_mode"] == "raw_logits" and spec["logprobs_mode"] is None
    session.prompt_scores([[1, 2, 3]], [[1, 2]])
    op, fields = session.client.sent[-1]
    assert op == "prompt_logprobs" and fields["key"] == PLAIN and fields["k"] == SCORES_TOP_K >= 2
    assert fields["sequences"] == [[1, 2, 3]] and fields["positions"] == [[1, 2]]

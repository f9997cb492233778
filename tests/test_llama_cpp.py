"""llama.cpp as specbench's backend (engines/llama_cpp/backend.py) on a tiny random GGUF written here.

What must hold: a k-token pass gives the logits of k one-token passes (the verify pass is a batch with
logits for every position); rollback leaves the cache as if the rejected tokens were never fed;
specbench's plain decoding on llama.cpp equals llama-cpp-python's own greedy generate token for token;
speculative decoding is greedy-identical to plain decoding, or each divergence sits at a near tie that
the replay in one-token passes shows (quantized kernels round differently by batch size). Skipped with
one line where llama-cpp-python is not built (`make setup-llama-cpp`); CI builds it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import llama_replay
import pytest
import torch
from tiny_gguf import EOS_ID, VOCAB, write_tiny_gguf

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft
from specbench.decoding.speculative import decode_speculative
from specbench.engines.llama_cpp import backend as lc
from specbench.errors import SpecbenchError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import llama_peers  # noqa: E402  (bench/: llama-cpp-python's own decoders)

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not built (make setup-llama-cpp)"
)
GREEDY = SamplingConfig(temperature=0.0)
EOS = frozenset({EOS_ID})
PROMPT = [1] + [3 + b for b in b"the cat sat on the mat. the cat sat on the"]
NEAR_TIE = 0.05  # logit margin under which a divergence is rounding (Q8_0 activations: ~1e-2 relative)


@pytest.fixture(scope="module", params=["F32", "Q8_0"])
def gguf_path(request, tmp_path_factory):
    return str(write_tiny_gguf(tmp_path_factory.mktemp("gguf") / f"tiny-{request.param}.gguf", quant=request.param))


@pytest.fixture(scope="module")
def lm(gguf_path):
    return lc.LlamaCppModel(gguf_path, n_ctx=512, threads=1)


def test_missing_build_is_one_line_naming_the_setup(monkeypatch):
    def absent(name, *a, **k):
        raise ImportError("No module named 'llama_cpp'", name="llama_cpp")

    monkeypatch.setattr(lc.importlib, "import_module", absent)
    with pytest.raises(SpecbenchError) as err:
        lc.import_llama_cpp()
    msg = str(err.value)
    assert "make setup-llama-cpp" in msg and "\n" not in msg


@needs_llama
def test_missing_gguf_is_one_line(tmp_path):
    with pytest.raises(SpecbenchError, match="GGUF file not found"):
        lc.LlamaCppModel(str(tmp_path / "absent.gguf"), n_ctx=64, threads=1)


@needs_llama
def test_k_token_pass_gives_every_position_and_matches_one_token_passes(lm):
    lm.start(capacity=len(PROMPT) + 4)
    last = lm.forward(PROMPT)
    assert last.shape == (VOCAB,) and lm.length == len(PROMPT)
    new = [70, 71, 72]
    batch = lm.forward(new, all_logits=True)  # [3, V]
    assert batch.shape == (3, VOCAB) and lm.length == len(PROMPT) + 3
    lm.truncate(len(PROMPT))
    singles = torch.stack([lm.forward([t]) for t in new])
    # F32: identical up to summation order; Q8_0: activations are quantized per batch, still within 1 %
    assert torch.allclose(batch, singles, rtol=0.02, atol=0.02 * float(singles.abs().max()))
    assert (batch.argmax(-1) == singles.argmax(-1)).float().mean() >= 2 / 3


@needs_llama
def test_rollback_forgets_the_rejected_tokens(lm):
    lm.start(capacity=64)
    lm.forward(PROMPT)
    lm.forward([80, 81, 82, 83], all_logits=True)
    lm.truncate(len(PROMPT) + 1)  # keep 80, reject 81..83
    assert lm.length == len(PROMPT) + 1
    after = lm.forward([90])
    lm.start(capacity=64)
    lm.forward(PROMPT)
    lm.forward([80])
    fresh = lm.forward([90])
    assert torch.equal(after, fresh)


@needs_llama
def test_context_overflow_is_one_line(lm):
    with pytest.raises(SpecbenchError, match="context of 512 tokens overflowed"):
        lm.start(capacity=10_000)


@needs_llama
def test_the_context_starts_small_and_grows_to_what_a_run_reserves(gguf_path):
    lm = lc.LlamaCppModel(gguf_path, n_ctx=2048, threads=1)
    assert lm.backend.n_ctx == lc.FIRST_CTX and lm.backend.limit == 2048
    lm.start(capacity=len(PROMPT) + 4)
    before = lm.forward(PROMPT)
    assert lm.backend.reserve(700) and lm.backend.n_ctx == 768 and lm.length == 0  # grown in CTX_STEP steps
    assert not lm.backend.reserve(300)  # never shrinks: calibration and probes between examples reload nothing
    lm.start(capacity=len(PROMPT) + 4)
    assert torch.equal(lm.forward(PROMPT), before)  # the same weights and kernels after the reload
    with pytest.raises(SpecbenchError, match="context of 2048 tokens overflowed"):
        lm.start(capacity=2049)
    lm.close()


@needs_llama
def test_plain_decoding_equals_llama_cpp_generate(lm, gguf_path):
    ours = decode_autoregressive(
        lm, PROMPT, max_new_tokens=40, sampling=GREEDY, generator=None, eos_ids=frozenset()
    ).token_ids
    peer = lc.load_llama(gguf_path, 512, 1)
    theirs = llama_peers.peer_generate(peer, PROMPT, max_new_tokens=40, eos_ids=frozenset()).token_ids
    assert len(ours) == 40 and ours == theirs


@needs_llama
def test_speculative_is_greedy_identical_or_each_divergence_is_a_near_tie(lm):
    draft = PromptLookupDraft(VOCAB, torch.device("cpu"))
    prompts = [PROMPT, PROMPT[:20], [1] + [3 + b for b in b"abc abd abc abd abc"]]
    explained = 0
    for prompt in prompts:
        for gamma in (2, 4):
            plain = decode_autoregressive(
                lm, prompt, max_new_tokens=48, sampling=GREEDY, generator=None, eos_ids=EOS
            ).token_ids
            res = decode_speculative(
                lm, draft, prompt, gamma=gamma, max_new_tokens=48, sampling=GREEDY, generator=None, eos_ids=EOS
            )
            assert res.drafted > 0 and max(res.pass_lengths) > 1  # verify passes of several tokens did run
            div = llama_replay.classify(lm, prompt, plain, res.token_ids)
            if div is None:
                assert res.token_ids == plain
            else:  # a divergence is only acceptable where the plain target's own choice was a near tie
                assert div.margin < NEAR_TIE, div
                explained += 1
    assert explained <= len(prompts)  # rounding, not a broken loop: most pairs agree outright


@needs_llama
def test_classifier_flags_a_real_divergence(lm):
    """Negative control: a wrong token where the target was sure must come out unexplained (large margin)."""
    plain = decode_autoregressive(lm, PROMPT, max_new_tokens=16, sampling=GREEDY, generator=None, eos_ids=EOS).token_ids
    wrong = list(plain)
    wrong[5] = (plain[5] + 1) % VOCAB
    div = llama_replay.classify(lm, PROMPT, plain, wrong)
    assert div is not None and div.index == 5 and div.margin >= NEAR_TIE


@needs_llama
def test_sampling_runs_on_llama_logits_and_is_reproducible(lm):
    draft = PromptLookupDraft(VOCAB, torch.device("cpu"))
    hot = SamplingConfig(temperature=1.0)

    def once(seed):
        g = torch.Generator().manual_seed(seed)
        return decode_speculative(
            lm, draft, PROMPT, gamma=3, max_new_tokens=24, sampling=hot, generator=g, eos_ids=frozenset()
        ).token_ids

    a, b, c = once(1), once(1), once(2)
    assert a == b and a != c and all(0 <= t < VOCAB for t in a)


@needs_llama
def test_peer_prompt_lookup_counts_its_passes(gguf_path):
    draft = llama_peers.prompt_lookup_peer(gamma=4)
    peer = lc.load_llama(gguf_path, 512, 1, draft_model=draft)
    res = llama_peers.peer_generate(peer, PROMPT, max_new_tokens=30, eos_ids=frozenset(), draft=draft)
    assert len(res.token_ids) == 30 and res.target_calls >= 1 and res.drafted >= res.accepted >= 0
    assert res.target_calls < 30  # prompt lookup on a repeating prompt saves passes


@needs_llama
def test_run_engine_llama_cpp_end_to_end(tmp_path, monkeypatch):
    """`specbench run --engine llama-cpp` on the tiny GGUF: records, the engine entry, greedy identity, a resume."""
    import json

    from typer.testing import CliRunner

    from specbench.cli import app

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))  # the tokenizer's conversion stays in the test
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", quant="Q8_0")
    task = tmp_path / "task.jsonl"
    lines = ["the cat sat on the mat and the cat sat on the", "abc abd abc abd abc abd"]
    task.write_text("".join(json.dumps({"prompt": p, "reference": p}) + "\n" for p in lines))
    args = ["run", "--engine", "llama-cpp", "--threads", "1", "--target", str(gguf), "--task", str(task)]
    args += ["--draft", "prompt-lookup", "--gamma", "3", "--limit", "2", "--max-new-tokens", "16"]
    args += ["--results-dir", str(tmp_path / "res"), "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "res").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["engine"]["engine"] == "llama-cpp" and manifest["engine"]["threads"] == 1
    assert manifest["engine"]["engine_version"] == lc.engine_version()
    assert manifest["calibration"]["extra"]["backend"] == "llama-cpp"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["engine"] == "llama-cpp" and summary["threads"] == 1 and summary["n_examples"] == 2
    rows = [json.loads(x) for x in (run / "examples.jsonl").read_text().splitlines()]
    for row in rows:  # identical, or a divergence the replay in llama.cpp's pass shapes explains
        assert row["identical"] or row["numerics"]["divergence"]["kind"] == "numerics", row["numerics"]
    assert sum(r["speculative"]["drafted"] for r in rows) > 0
    again = CliRunner().invoke(app, args, catch_exceptions=False)  # resumes: nothing left to measure
    assert again.exit_code == 0 and len((run / "examples.jsonl").read_text().splitlines()) == 2


@needs_llama
def test_sweep_takes_the_engine_as_an_axis(tmp_path, monkeypatch):
    """`specbench sweep --engine llama-cpp,specbench`: one cell per engine, each with its own baseline file, the
    llama.cpp cell on llama.cpp (summary), the torch cell on torch; a one-engine grid keeps its old cell ids."""
    import json

    from typer.testing import CliRunner

    from specbench.cli import app
    from specbench.measure.run.sweep import SweepGrid
    from specbench.measure.run.sweep_run import cell_ids

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gguf = str(write_tiny_gguf(tmp_path / "tiny.gguf", quant="F32"))
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps({"prompt": "the cat sat on the mat and the cat sat", "reference": "x"}) + "\n")
    args = ["sweep", "--engine", "llama-cpp,specbench", "--threads", "1", "--target", gguf, "--task", str(task)]
    args += ["--draft", "prompt-lookup", "--gamma", "2", "--limit", "1", "--max-new-tokens", "12", "--device", "cpu"]
    args += ["--results-dir", str(tmp_path / "res"), "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    cells = {c["cell_id"]: c["summary"] for c in json.loads(result.stdout[result.stdout.index("[") :])}
    assert sorted(s["engine"] for s in cells.values()) == ["llama-cpp", "specbench"]
    for cell_id, s in cells.items():
        assert cell_id.endswith("-e" + s["engine"]) and s["n_examples"] == 1
        assert (s["threads"] == 1) == (s["engine"] == "llama-cpp")
    (root,) = (tmp_path / "res").iterdir()
    assert not (root / "baselines").exists()  # each cell timed its own baseline, on its own engine
    shared = dict(target=gguf, draft="prompt-lookup", gamma="2", temperature="0", task=str(task), limit=1)
    one = SweepGrid.from_specs(**shared, max_new_tokens=12)
    assert [c for c, _ in cell_ids(one)] == [c.removesuffix("-especbench") for c in cells if "specbench" in c]


def test_report_setup_names_the_engine_and_its_version():
    from specbench.report.environment import engine_text

    info = {"engine": "llama-cpp", "engine_version": "0.3.36", "threads": 2, "model_desc": "llama 256M Q4_1"}
    assert engine_text(info) == "llama-cpp (llama-cpp-python 0.3.36, 2 threads, llama 256M Q4_1)"
    assert engine_text(None) is None and engine_text({}) is None  # torch runs: no engine line


def test_run_without_the_build_is_one_line_naming_the_setup(tmp_path, monkeypatch):
    """`specbench run --engine llama-cpp` where llama_cpp cannot be imported: exit 1, one line, no traceback."""
    import json

    from typer.testing import CliRunner

    from specbench.cli import app

    real = lc.importlib.import_module

    def no_llama(name, *a, **k):
        if name == "llama_cpp":
            raise ImportError("No module named 'llama_cpp'", name="llama_cpp")
        return real(name, *a, **k)

    monkeypatch.setattr(lc.importlib, "import_module", no_llama)
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps({"prompt": "the cat sat", "reference": "x"}) + "\n")
    args = ["run", "--engine", "llama-cpp", "--target", str(gguf), "--task", str(task), "--limit", "1"]
    result = CliRunner().invoke(app, [*args, "--draft", "prompt-lookup", "--results-dir", str(tmp_path / "res")])
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == 1 and "make setup-llama-cpp" in lines[-1] and "Traceback" not in result.output
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").iterdir())  # nothing written


def test_quantized_ggufs_are_gated_in_their_own_precision_not_float32s():
    """llama.cpp returns float32 logits, but a quantized GGUF dots its weights with 8-bit activation blocks: the
    margin gate measures gaps in bfloat16 spacings there (F32/F16/BF16 files in their own). A gap of 0.069 at a
    logit of 15 (a divergence the Q4_1 run recorded, and its floor flipped gaps up to 0.46) is ~1 spacing: rounding's
    reach; in float32 spacings it read 72,000 and was called a bug. A gap of 1.5 (what a misplaced logit row gives)
    stays beyond the gate's 8-spacing cap (the control)."""
    from specbench.engines.llama_cpp.backend import logit_precision
    from specbench.measure.stats.margin_gate import FLOOR_CAP_ULPS, ROUNDING_ULPS, in_spacings

    assert logit_precision({"general.file_type": "3"}) == torch.bfloat16  # Q4_1
    assert logit_precision({}) == torch.bfloat16
    assert logit_precision({"general.file_type": "0"}) == torch.float32
    assert logit_precision({"general.file_type": "1"}) == torch.float16
    q = logit_precision({"general.file_type": "3"})
    assert in_spacings(0.069, 15.0, q) <= ROUNDING_ULPS < in_spacings(0.069, 15.0, torch.float32)
    assert in_spacings(1.5, 15.0, q) > FLOOR_CAP_ULPS


@needs_llama
def test_the_model_reads_its_logit_precision_from_the_files_type(lm):
    """The wiring of the gate's unit: the F32 file gaps in float32 spacings, the Q8_0 file in bfloat16's."""
    assert lm.logit_precision == (torch.float32 if lm.path.endswith("F32.gguf") else torch.bfloat16)


def test_amx_cpus_load_without_llama_cpps_extra_buffers(tmp_path):
    """llama.cpp's AMX buffer crashes the first decode on an AMX CPU (seen on this project's Xeon), so load_llama
    turns the extra buffer types off there, and only there: the binding's default parameters are patched while a
    model loads and restored after (control: without AMX they are left alone)."""
    import types

    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu sse2 avx512f amx_bf16 amx_int8 amx_tile\n")
    assert lc.cpu_has_amx(str(info))
    info.write_text("processor : 0\nflags : fpu sse2 avx512f avx512_bf16\n")
    assert not lc.cpu_has_amx(str(info)) and not lc.cpu_has_amx(str(tmp_path / "missing"))

    def defaults():
        return types.SimpleNamespace(use_extra_bufts=True)

    inner = types.SimpleNamespace(llama_model_default_params=defaults)
    binding = types.SimpleNamespace(llama=types.SimpleNamespace(llama_cpp=inner))
    with lc.without_extra_buffers(binding, True):
        assert inner.llama_model_default_params().use_extra_bufts is False
    assert inner.llama_model_default_params is defaults
    with lc.without_extra_buffers(binding, False):
        assert inner.llama_model_default_params().use_extra_bufts is True

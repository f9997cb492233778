"""`specbench verify --bit-exact` and the claims' bit-exact identity row (issue 44 item 4, issue 40 item 3).

What must hold, on the bf16-sensitive tiny pair of tests/test_bit_exact.py (a target and a noisy copy as the draft):
1. The forced comparison past the first divergence (decoding/forced.py) under the mode: clean, every position of every
   prompt is compared and none diverges (the negative control: without the mode, bf16 forced runs diverge); with a
   planted bug (evidence/planted.py: late verified logits, a bias on the verified rows, a flip within one spacing of a
   tie) its divergences are exactly the positions the plant changed, each unexplained.
2. verify's greedy-identity check in the mode (evidence/bit_exact_identity.py) passes clean with run --bit-exact's
   line "bit-exact mode: N/N identical", and fails under each plant on every example the plant touches, at the first
   touched position, every divergence unexplained (no margin gate).
3. The command: `verify --bit-exact` prints the line and writes checks.json to its own folder; an engine whose
   capabilities lack bit_exact (vLLM) is refused in one line, exit 2.
4. The claims table: one identity row per mode, saying which; a bit-exact run holds only at N/N and never enters a
   speed claim.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict

import pytest
import torch
from helpers import CORPUS, make_run, noisy_pair, save_tiny

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.forced import decode_forced
from specbench.decoding.speculative import decode_speculative
from specbench.evidence import planted as plants
from specbench.evidence.bit_exact_identity import bit_exact_checks
from specbench.measure.stats.metric_units import first_divergence
from specbench.measure.stats.past_divergence import explain_forced_bit_exact, past_divergence_counts

GREEDY = SamplingConfig()
EOS = frozenset([2])
GAMMA = 4
MAX_NEW = 32
PROMPTS = [[5 + 7 * i + j * (i + 3) % 400 for j in range(12)] for i in range(12)][:6]  # test_bit_exact's first 6
PLANTS = {
    "late": lambda: plants.late_verified_logits(every=3),
    "biased": lambda: plants.biased_verified_rows(token=3),
    "near-tie": lambda: plants.near_tie_flips(),  # a flip within one spacing of a tie: the margin gate's blind zone
}


@pytest.fixture(scope="module")
def bf16():
    """(target, draft, the baseline's tokens per prompt) in bf16."""
    target, draft = noisy_pair(torch.bfloat16)
    refs = [
        decode_autoregressive(
            CachedModel(target), p, max_new_tokens=MAX_NEW, sampling=GREEDY, generator=None, eos_ids=EOS
        ).token_ids
        for p in PROMPTS
    ]
    return target, draft, refs


def forced(target, draft, prompt, ref, stepwise: bool):
    return decode_forced(
        CachedModel(target), ModelDraft(draft, "d"), prompt, ref, gamma=GAMMA, max_new_tokens=MAX_NEW, stepwise=stepwise
    )


def check(target, draft):
    (found,) = bit_exact_checks(
        target, lambda: ModelDraft(draft, "d"), PROMPTS, gammas=(GAMMA,), max_new_tokens=MAX_NEW, eos_ids=EOS
    )
    return found


# ---- 1: the forced comparison in bit-exact mode ---------------------------------------------------------------------


def test_forced_runs_are_exact_with_the_mode_and_not_without(bf16):
    """Clean bf16: with one-token passes the forced run verifies the baseline's token at every position of every
    prompt; the negative control, the same loop with normal passes, diverges somewhere (numerics)."""
    target, draft, refs = bf16
    without = 0
    for prompt, ref in zip(PROMPTS, refs):
        run = forced(target, draft, prompt, ref, stepwise=True)
        assert run.verified == ref and run.divergences == [], prompt
        assert max(run.pass_lengths) == GAMMA + 1  # full γ steps ran (the pass record keeps the verify pass's size)
        without += len(forced(target, draft, prompt, ref, stepwise=False).divergences)
    assert without >= 1, "normal passes never diverged: this pair cannot show what the mode fixes"


@pytest.mark.parametrize("plant", list(PLANTS))
def test_forced_divergences_are_exactly_the_planted_positions_and_unexplained(plant, bf16):
    """Under each plant, per prompt: the forced run's divergences are exactly the positions where a planted step
    emitted another token than the clean verdict (PlantedSteps.changed, within the reference), and every one is
    unexplained after the (absent) gate; the plant changed some position overall."""
    target, draft, refs = bf16
    changed = 0
    with PLANTS[plant]() as seen:
        for prompt, ref in zip(PROMPTS, refs):
            seen.reset()
            run = forced(target, draft, prompt, ref, stepwise=True)
            want = seen.changed_before(len(ref))
            assert run.divergences == want, (prompt, run.divergences, seen.changed)
            found = explain_forced_bit_exact(target, prompt, ref, asdict(run))
            counts = past_divergence_counts(found, None, None)
            assert counts == {
                "positions": len(ref),
                "divergences": len(want),
                "explained": 0,
                "unexplained": len(want),
            }
            assert all(d["method"] == "bit-exact" and d["class"] == "unexplained" for d in found["divergences"])
            changed += len(want)
    assert changed >= 3, changed


# ---- 2: verify's check ----------------------------------------------------------------------------------------------


def test_bit_exact_check_passes_clean(bf16):
    target, draft, refs = bf16
    found = check(target, draft)
    d = found.detail
    assert found.passed and found.verdict == "pass", d
    assert d["mode"] == "bit-exact" and d["identity_line"] == f"bit-exact mode: {len(PROMPTS)}/{len(PROMPTS)} identical"
    assert d["divergences"] == [] and d["numerics"] == 0 and d["numerics_gap_limit_ulps"] is None  # no gate
    past = d["past_divergence"]
    assert past["positions"] == sum(len(r) for r in refs) and past["divergences"] == 0


@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_bugs_fail_the_check_on_every_example_they_touch(plant, bf16):
    """The negative control through the same check: the touched examples (a first pass over the prompts under a fresh
    plant, as the check's free runs meet them) are exactly the diverged ones, each at its first touched position and
    unexplained; the check fails and its line counts them."""
    target, draft, refs = bf16
    touched = {}
    with PLANTS[plant]() as seen:
        for i, prompt in enumerate(PROMPTS):
            seen.reset()
            spec = decode_speculative(
                CachedModel(target),
                ModelDraft(draft, "d"),
                prompt,
                gamma=GAMMA,
                max_new_tokens=MAX_NEW,
                sampling=GREEDY,
                generator=None,
                eos_ids=EOS,
                stepwise=True,
            )
            assert first_divergence(refs[i], spec.token_ids) == seen.first_changed()
            if seen.first_changed() is not None:
                touched[i] = seen.first_changed()
    assert len(touched) >= 3, touched  # each plant touched 6/6 in test_bit_exact's run
    with PLANTS[plant]():
        found = check(target, draft)
    d = found.detail
    assert not found.passed and found.verdict == "fail"
    assert {x["prompt"]: x["position"] for x in d["divergences"]} == touched
    assert all(x["class"] == "unexplained" and x["kind"] == "unexplained" for x in d["divergences"])
    assert d["unexplained"] == len(touched) and d["numerics"] == 0
    n = len(PROMPTS)
    assert d["identity_line"].startswith(f"bit-exact mode: {n - len(touched)}/{n} identical; {len(touched)} diverged")
    past = d["past_divergence"]
    assert past["unexplained"] == past["divergences"] >= 1 and past["explained"] == 0


# ---- 3: the command -------------------------------------------------------------------------------------------------


def test_cli_verify_bit_exact_prints_the_line_and_writes_its_own_folder(tmp_path):
    from typer.testing import CliRunner

    from specbench.cli import app

    target, draft = save_tiny(tmp_path / "target", 0), save_tiny(tmp_path / "draft", 1)
    task = tmp_path / "task.jsonl"
    task.write_text("\n".join(json.dumps({"prompt": p, "reference": p}) for p in CORPUS[:3]) + "\n")
    args = ["verify", "--target", target, "--draft", draft, "--task", str(task), "--limit", "3", "--temperature", "0"]
    args += ["--gamma", "3", "--dtype", "bfloat16", "--step-samples", "0", "--control-samples", "0", "--device", "cpu"]
    result = CliRunner().invoke(app, [*args, "--results-dir", str(tmp_path / "v"), "--bit-exact"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "greedy/γ=3/identity: bit-exact mode: 3/3 identical" in said, said
    assert "(bit-exact mode: every pass a one-token step)" in said
    (folder,) = (tmp_path / "v").iterdir()
    assert folder.name.endswith("-bitexact")
    doc = json.loads((folder / "checks.json").read_text())
    assert doc["bit_exact"] is True and doc["passed"]
    identity = [c for c in doc["checks"] if c["kind"] == "identity"]
    assert [c["name"] for c in identity] == ["greedy/γ=3/identity"]  # no HF generate row in the mode
    assert identity[0]["detail"]["mode"] == "bit-exact"


def test_verify_bit_exact_is_refused_on_an_engine_without_the_capability():
    from typer.testing import CliRunner

    from specbench.cli import app

    args = ["verify", "--target", "t", "--draft", "prompt-lookup", "--engine", "vllm", "--temperature", "0"]
    result = CliRunner().invoke(app, [*args, "--bit-exact"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and "--bit-exact" in lines[0] and "drop it" in lines[0], lines[0]


# ---- 4: the claims table --------------------------------------------------------------------------------------------


def bit_exact(run, diverged: int = 0):
    """Mark a make_run folder as a --bit-exact run (its manifest's config), with `diverged` examples diverging at
    position 3 under the mode (their records, then the summary from them)."""
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["bit_exact"] = True
    (run / "manifest.json").write_text(json.dumps(manifest))
    records = [json.loads(line) for line in (run / "examples.jsonl").read_text().splitlines()]
    for r in records:
        r["numerics"] = {
            "mode": "bit-exact",
            "floor_positions": 0,
            "floor_flips": 0,
            "seconds": 0.0,
            "divergence": None,
        }
    for r in records[:diverged]:
        r["speculative"]["token_ids"][3] += 100
        r["identical"], r["first_divergence"] = False, 3
        r["numerics"]["divergence"] = {"position": 3, "kind": "unexplained", "method": "bit-exact"}
    rewrite(run, records)


def rewrite(run, records: list[dict]) -> None:
    """A run folder's examples.jsonl replaced by `records`, and its summary derived from them (greedy)."""
    from specbench.measure.stats.metric_units import json_safe
    from specbench.measure.stats.metrics import summarize

    (run / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = json.loads((run / "summary.json").read_text())
    summary.update(summarize(records, summary["gamma"], True))
    (run / "summary.json").write_text(json.dumps(json_safe(summary)))


def identity_rows(root):
    from specbench.report.claims import claims
    from specbench.report.collect import collect

    return [c for c in claims(collect([root])) if c.claim.startswith("Output identical")]


def test_claims_give_each_mode_its_own_identity_row(tmp_path):
    make_run(tmp_path, "normal", temperature=0.0)
    bit_exact(make_run(tmp_path, "exact", temperature=0.0, draft="exact-draft", speedup=9.0))
    normal, exact = identity_rows(tmp_path)
    assert normal.claim == "Output identical to standard decoding (T = 0, normal verify passes)"
    assert exact.claim == "Output identical to standard decoding (T = 0, bit-exact mode)"
    assert exact.verdict.startswith("holds: ") and "3/3 examples identical over 1 --bit-exact run(s)" in exact.numbers


def test_a_diverged_bit_exact_run_fails_its_row_and_is_no_speed_measurement(tmp_path):
    """One diverged example of three fails the bit-exact row (no numerics allowance); the negative control: the same
    folder without the mark is a normal run: its row says so, and the speed claim reads it."""
    from specbench.report.claims import claims
    from specbench.report.collect import collect

    run = make_run(tmp_path, "exact", temperature=0.0, draft="exact-draft", speedup=9.0)
    bit_exact(run, diverged=1)
    (row,) = identity_rows(tmp_path)
    assert row.claim.endswith("bit-exact mode)") and row.verdict.startswith("does not hold: 1 divergence(s)"), row
    speed = claims(collect([tmp_path]))[0]
    assert "exact-draft" not in speed.numbers and speed.verdict.startswith("not tested here"), speed
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["config"]["bit_exact"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    records = [json.loads(line) for line in (run / "examples.jsonl").read_text().splitlines()]
    for r in records:
        r["numerics"] = None
    rewrite(run, records)
    (row,) = identity_rows(tmp_path)
    assert row.claim.endswith("normal verify passes)"), row
    assert "exact-draft" in claims(collect([tmp_path]))[0].numbers  # a normal run is a speed measurement


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not built")
def test_cli_verify_bit_exact_on_llama_cpp(tmp_path, monkeypatch):
    """The same check on llama.cpp's kernels (the tiny F32 GGUF, prompt lookup at γ 2 and 4): bit-exact identity on
    every prompt and past every first divergence."""
    from tiny_gguf import write_tiny_gguf
    from typer.testing import CliRunner

    from specbench.cli import app

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gguf = str(write_tiny_gguf(tmp_path / "tiny-F32.gguf", quant="F32"))
    task = tmp_path / "task.jsonl"
    rows = ["the cat sat on the mat and the cat sat on the", "abc abd abc abd abc"]
    task.write_text("".join(json.dumps({"prompt": p, "reference": "x"}) + "\n" for p in rows))
    args = ["verify", "--engine", "llama-cpp", "--threads", "1", "--target", gguf, "--task", str(task), "--limit", "2"]
    args += ["--draft", "prompt-lookup", "--gamma", "2,4", "--temperature", "0", "--step-samples", "0"]
    args += ["--control-samples", "0", "--results-dir", str(tmp_path / "res"), "--bit-exact", "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "res").iterdir()
    assert folder.name.endswith("-bitexact-llama-cpp")
    checks = {c["name"]: c for c in json.loads((folder / "checks.json").read_text())["checks"]}
    for g in (2, 4):
        d = checks[f"greedy/γ={g}/identity"]["detail"]
        assert d["identity_line"] == "bit-exact mode: 2/2 identical" and d["past_divergence"]["positions"] > 0

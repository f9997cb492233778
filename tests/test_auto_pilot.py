"""The T = 0 replay pilot (measure/auto/pilot.py) reproduces decode_speculative step by step, and the prediction's
pieces (measure/auto/prediction.py) are what they claim: a held-out geometric mean with a prediction interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import VOCAB, sharpen, tiny_llama

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.hybrid import HybridDraft
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft
from specbench.decoding.speculative import decode_speculative
from specbench.measure.auto import pilot as pl
from specbench.measure.auto import prediction as pr

GREEDY = SamplingConfig()
CPU = torch.device("cpu")
EOS = frozenset([2])


def trace_for(target, draft_model, prompt, max_new):
    res = decode_autoregressive(
        CachedModel(target), prompt, max_new_tokens=max_new, sampling=GREEDY, generator=None, eos_ids=EOS
    )
    trace = pl.Trace("x", prompt, list(res.token_ids), max_new, 1.0, 1.0)
    if draft_model is not None:
        trace.guesses["m"], _ = pl.teacher_forced_guesses(CachedModel(draft_model), prompt, trace.output)
    return trace


def drafts(draft_model):
    return {
        "lookup": lambda: PromptLookupDraft(VOCAB, CPU),
        "model": lambda: ModelDraft(draft_model, "m"),
        "hybrid": lambda: HybridDraft(PromptLookupDraft(VOCAB, CPU), ModelDraft(draft_model, "m"), "lookup+m"),
    }


@pytest.mark.parametrize("kind", ["lookup", "model", "hybrid"])
@pytest.mark.parametrize("max_new", [7, 40])
def test_replay_matches_the_real_decode_step_by_step(kind, max_new):
    # target and draft share most weights (a draft close to the target accepts often) so that acceptance varies;
    # prompts repeat a motif so that lookup finds matches. 3 prompts × γ 1..6; any mismatch fails.
    target = sharpen(tiny_llama(0), 4.0)
    draft_model = sharpen(tiny_llama(0), 4.0)
    with torch.no_grad():
        for p in draft_model.model.layers[-1].parameters():
            p.add_(0.02 * torch.randn_like(p))
    seen_partial = False
    for prompt in ([5, 17, 99, 3, 5, 17, 99, 3, 250], [9, 8, 7, 9, 8, 7, 9, 8], [31, 7, 64, 12, 400, 31, 7]):
        trace = trace_for(target, draft_model, prompt, max_new)
        for gamma in range(1, 7):
            proposer = drafts(draft_model)[kind]()
            real = decode_speculative(
                CachedModel(target),
                proposer,
                prompt,
                gamma=gamma,
                max_new_tokens=max_new,
                sampling=GREEDY,
                generator=None,
                eos_ids=EOS,
            )
            lookup = pl.draft_parts(proposer)[0]
            steps = pl.replay(trace, gamma, lookup, trace.guesses["m"] if kind != "lookup" else None)
            assert real.token_ids == trace.output
            assert [s.offered + 1 for s in steps] == real.pass_lengths, (kind, gamma, prompt)
            assert [s.accepted for s in steps if s.offered] == real.accept_lengths
            assert sum(s.model_calls for s in steps) == real.draft_calls
            assert pl.alpha_counts(steps) == (real.accepted, real.trials)
            seen_partial |= 0 < real.accepted < real.drafted
    # at 40 tokens the check saw steps that were partly rejected, not only all-or-nothing ones
    assert seen_partial or max_new < 10


def test_replay_with_wrong_guesses_is_caught():
    # negative control: guesses shifted by one position must not reproduce the real decode
    target, draft_model = sharpen(tiny_llama(0), 4.0), sharpen(tiny_llama(0), 4.0)
    prompt = [5, 17, 99, 3, 250, 31]
    trace = trace_for(target, draft_model, prompt, 30)
    real = decode_speculative(
        CachedModel(target),
        ModelDraft(draft_model, "m"),
        prompt,
        gamma=4,
        max_new_tokens=30,
        sampling=GREEDY,
        generator=None,
        eos_ids=EOS,
    )
    shifted = [-1, -1] + trace.guesses["m"][1:-1]
    steps = pl.replay(trace, 4, None, shifted)
    assert [s.accepted for s in steps if s.offered] != real.accept_lengths


def test_alpha_se_shrinks_with_examples_and_pilot_stops_on_it():
    rng = np.random.default_rng(1)

    def counts(n):  # per-example α spread like the (0.37–0.95)
        out = []
        for _ in range(n):
            a = rng.uniform(0.4, 0.95)
            t = int(rng.integers(10, 40))
            out.append((int(rng.binomial(t, a)), t))
        return out

    six = counts(6)
    small, large = pl.alpha_se(six), pl.alpha_se(six * 10)  # the same examples, 10× as many: ~√10 = 3.2× less
    assert 2.5 < small / large < 4.0
    assert pl.alpha_se([(10, 20)] * 8) == 0.0  # every example alike: no error
    assert pl.alpha_se([(3, 5)]) == math.inf
    assert not pl.pilot_done({"a": 0.01}, ["a"], pl.PILOT_MIN - 1)
    assert pl.pilot_done({"a": 0.01}, ["a"], pl.PILOT_MIN)
    assert not pl.pilot_done({"a": 0.01, "b": 0.04}, ["a", "b"], pl.PILOT_MIN)
    assert pl.pilot_done({"a": 0.9}, ["a"], pl.PILOT_CAP)


def test_replayed_prediction_is_the_cost_models_interval_around_the_timed_examples():
    p = pr.replayed_prediction([0.1, 0.3, 0.5, float("nan")])
    assert p.speedup == pytest.approx(math.exp(0.3)) and p.n_examples == 3
    assert p.high / p.speedup == pytest.approx(math.exp(1.959964 * pr.MODEL_LOG_SD), rel=1e-5)
    assert p.speedup / p.low == pytest.approx(p.high / p.speedup)
    # the examples are the timed ones, not a sample of them: the interval does not shrink or grow with their number
    # or their spread (a sampling interval would: control)
    q = pr.replayed_prediction([0.3] * 40 + [0.2, 0.4])
    assert q.high / q.speedup == pytest.approx(p.high / p.speedup)
    sampling_half = 1.96 * np.std([0.1, 0.3, 0.5], ddof=1) / math.sqrt(3)
    assert abs(math.log(p.high / p.speedup) - sampling_half) > 0.05
    assert math.isnan(pr.replayed_prediction([]).speedup) and pr.replayed_prediction([]).n_examples == 0


def test_example_times_prices_prefill_steps_and_draft_costs():
    trace = pl.Trace("x", [1, 2, 3], [4, 5, 6, 7, 8], 10, prefill_ms=50.0, step_ms=20.0, draft_prefill_ms={"m": 5.0})
    costs = pr.LoopCosts("float32", 20.0, 50.0, {1: 20.0, 2: 24.0, 3: 28.0}, {"m": 4.0}, {}, {"m": 1.0})
    steps = [pl.Step(2, 2, 2), pl.Step(2, 2, 1)]  # 3 + 2 = 4 tokens after the first
    base, spec = pr.example_times(trace, steps, "m", costs, 1.0)
    assert base == 50 + 4 * 20
    assert spec == pytest.approx(50 + 5 + 2 * (2 * 4 + 28 + 1))
    base2, spec2 = pr.example_times(trace, steps, "m", costs, 2.0)  # a dtype twice as slow: both sides double
    assert (base2, spec2) == pytest.approx((2 * base, 2 * spec))


def test_ratio_to_prediction():
    assert pr.ratio_to_prediction(1.5, 1.2) == pytest.approx(1.25)
    assert pr.ratio_to_prediction(None, 1.2) is None
    assert pr.ratio_to_prediction(float("nan"), 1.2) is None


def two_costs() -> pr.LoopCosts:
    return pr.LoopCosts("float32", 20.0, 50.0, {k: 20.0 + 2 * (k - 1) for k in range(1, 6)}, {"m": 2.0})


def synthetic_traces(shares: list[float], seed: int, n: int = 30) -> list[pl.Trace]:
    """One example per share: a model draft "m" whose guess is the target's token with that probability; every
    example has the same prompt, length, prefill and plain step, so only acceptance differs between them."""
    rng = np.random.default_rng(seed)
    traces = []
    for i, share in enumerate(shares):
        out = list(range(10, 10 + n))
        guesses = [-1] + [tok if rng.random() < share else -2 for tok in out[1:]]
        traces.append(pl.Trace(f"e{i}", [1, 2, 3], out, 40, 50.0, 20.0, {"m": guesses}, {"m": 5.0}))
    return traces


def two_numbers(pilot: list[pl.Trace], timed: list[pl.Trace]) -> tuple[pr.Prediction, pr.Prediction]:
    from specbench.measure.auto import auto_pilot
    from specbench.measure.auto.choose import Candidate

    costs = {"float32": two_costs()}
    sets = [(auto_pilot.Replays({"m": None}, 4), traces) for traces in (pilot, timed)]
    return auto_pilot.predict(sets[0], sets[1], Candidate("m", "float32", 3, 0.0, 0.0), costs, {"float32": 1.0})


def test_the_held_out_prediction_follows_the_pilots_acceptance_not_the_timed_examples():
    """Issue 40: the pilot accepts 90 % of drafted tokens, the timed examples 10 % (and the reverse). The held-out
    number must be what the pilot's acceptance gives on the timed examples' shapes (here the pilot's own replayed
    figure, the shapes being alike), far from the check, which follows the timed examples' own acceptance; a
    held-out number that used the timed examples' acceptance would land on the check and fail."""
    good, poor = synthetic_traces([0.9] * 12, 1), synthetic_traces([0.1] * 6, 2)
    for pilot, timed in ((good, poor), (poor, good)):
        held_out, check = two_numbers(pilot, timed)
        pilot_own = two_numbers(pilot, pilot)[1].speedup  # the pilot's acceptance on examples shaped as the timed
        assert (held_out.kind, check.kind) == (pr.HELD_OUT, pr.CHECK)
        assert held_out.n_pilot == len(pilot) and held_out.n_examples == check.n_examples == len(timed)
        assert held_out.speedup == pytest.approx(pilot_own, rel=1e-9)
        assert check.speedup == pytest.approx(two_numbers(timed, timed)[1].speedup)
        assert abs(math.log(held_out.speedup / check.speedup)) > 0.3  # the sets differ sharply: so do the numbers
        assert held_out.line().startswith("predicted (held out) ") and check.line().startswith("cost-model check")
    # the check's interval is the pricing error alone; the held-out one holds at least that much
    assert check.high / check.speedup == pytest.approx(math.exp(1.959964 * pr.MODEL_LOG_SD), rel=1e-5)
    assert held_out.high / held_out.speedup >= check.high / check.speedup


def test_the_held_out_interval_widens_with_fewer_pilot_examples_and_more_spread():
    spread = [0.3, 0.9, 0.5, 0.7] * 4  # per-example acceptance between example sets, as in the issue (0.37–0.95)
    timed = synthetic_traces([0.6] * 8, 3)
    widths = {}
    for n in (4, 8, 16):
        held_out, _ = two_numbers(synthetic_traces(spread[:n], 4), timed)
        widths[n] = math.log(held_out.high / held_out.low)
        assert held_out.low < held_out.speedup < held_out.high and held_out.n_pilot == n
    assert widths[4] > widths[8] > widths[16]
    # control: pilot examples that all accept alike leave only the pricing error, whatever their number
    shapes = [pr.example_shape(t, "m", two_costs(), 1.0) for t in timed]
    alike = [pr.held_out_prediction([0.6] * n, shapes) for n in (3, 30)]
    pricing = 2 * 1.959964 * pr.MODEL_LOG_SD
    assert [math.log(p.high / p.low) for p in alike] == pytest.approx([pricing, pricing], rel=1e-5)
    assert pr.held_out_prediction([0.4, 0.8], shapes).high > alike[0].high  # spread widens it
    one = pr.held_out_prediction([0.6], shapes)  # one pilot example: no spread to estimate, no interval
    assert math.isfinite(one.speedup) and math.isnan(one.low) and "(no interval)" in one.line()


def test_verify_prices_follow_the_bare_curves_line_not_its_single_points():
    """A bf16-like curve, flat with one noisy point per side (t(1) high by 55 %, t(3) high by 40 %, the spreads seen
    on this VM): priced at the step within a few per cent for every k, monotone; a linear curve t(k) = k · t(1) keeps
    its shape (step · k: the control that a real slope comes through); a falling line is noise (priced flat);
    llama.cpp's measured curve keeps its jump from one token to two."""
    step = 30.0
    noisy = {1: 31.0, 2: 20.0, 3: 28.0, 4: 20.5, 5: 20.4, 6: 20.6, 7: 21.0, 8: 20.8, 9: 21.2}
    prices = pr.verify_prices(step, noisy)
    assert prices[1] == pytest.approx(step)
    assert all(step <= prices[k] <= 1.1 * step for k in noisy)
    assert [prices[k] for k in sorted(prices)] == sorted(prices.values())
    linear = {k: 12.0 * k for k in range(1, 10)}
    assert pr.verify_prices(step, linear) == pytest.approx({k: step * k for k in range(1, 10)})
    falling = {k: 30.0 - k for k in range(1, 10)}
    assert pr.verify_prices(step, falling) == pytest.approx({k: step for k in range(1, 10)})
    knee = {1: 10.2, 2: 18.5, 3: 23.7, 4: 26.8, 5: 33.7, 6: 37.1, 7: 41.0, 8: 43.6, 9: 47.2}  # llama.cpp Q4_1, measured
    knee_prices = pr.verify_prices(step, knee)
    assert knee_prices[1] == step and 1.7 * step < knee_prices[2] < 2.2 * step  # the 1 → 2 jump stays (measured 1.81)
    assert 4.2 * step < knee_prices[9] < 4.9 * step
    assert pr.verify_prices(step, {1: 20.0, 2: 22.0}) == pytest.approx({1: 30.0, 2: 33.0})  # too few points to fit
    steep = {1: 10.0, 2: 5.0, 3: 20.0, 4: 35.0}  # its line crosses 0 before k = 1: priced against t(1), not flat
    assert pr.verify_prices(step, steep) == pytest.approx({1: 30.0, 2: 30.0, 3: 60.0, 4: 105.0})


def test_repriced_reads_the_verify_shape_from_the_rounds_medians():
    """The rounds' per-k medians go through verify_prices (one outlier round moves nothing); no rounds: unchanged."""
    costs = pr.LoopCosts("bfloat16", 30.0, 100.0, {k: 30.0 for k in range(1, 6)})
    assert pr.repriced(costs, []) is costs
    steady = {k: 20.0 + 2.0 * k for k in range(1, 6)}  # each extra token +2 ms on a 22 ms pass
    outlier = {k: 90.0 - 10.0 * k for k in range(1, 6)}  # one disturbed round, falling: read past by the medians
    new = pr.repriced(costs, [steady, steady, outlier])
    assert new.verify_rounds == 3 and new.step_ms == costs.step_ms and new.verify_bare_ms == steady  # the medians, kept
    assert new.verify_ms == pytest.approx(pr.verify_prices(30.0, steady))
    assert new.verify_ms[5] == pytest.approx(30.0 * 30.0 / 22.0)  # the shape: t(5)/t(1) = 30/22
    assert pr.LoopCosts.from_dict(new.to_dict()) == new


def test_auto_control_times_the_runner_up_on_the_same_examples():
    from specbench.config import LoadSpec, RunConfig
    from specbench.measure.auto.choose import AutoChoice
    from specbench.measure.auto.control import control_config, control_line

    config = RunConfig(LoadSpec("t", dtype="auto"), draft="auto", task="ding-de-en", gamma="auto", limit=20)
    choice = AutoChoice({}, "bfloat16", "lookup+distilled", 4, 4, [], {}, {}, {})
    assert control_config(config, choice) is None  # no runner-up: nothing to time
    choice.runner_up = {"draft": "prompt-lookup", "dtype": "float32", "gamma": 3, "speedup": 1.2}
    control = control_config(config, choice)
    assert (control.draft.text, control.load.dtype, control.gamma.fixed) == ("prompt-lookup", "float32", 3)
    assert (control.task, control.limit, control.seed) == (config.task, config.limit, config.seed)  # same examples
    line = control_line(
        {"speedup_geomean": 1.5, "speedup_geomean_ci95": [1.3, 1.7]},
        {"speedup_geomean": 1.25, "speedup_geomean_ci95": [1.1, 1.4]},
        choice.runner_up,
    )
    assert "runner-up prompt-lookup γ 3 float32 predicted 1.20×, measured 1.25× [1.10, 1.40]" in line
    assert line.endswith("choice ÷ runner-up 1.20×")


def test_run_auto_at_t0_predicts_before_timing_and_reports_the_ratio(tmp_path):
    # a tiny target/draft pair and a 14-example task: 3 timed, the next 11 piloted by replay (none of the timed);
    # the run prints both numbers before timing, each named for what it is (issue 40), and the summary and manifest
    # carry both with measured ÷ each and the untimed replay's seconds
    import json

    from helpers import auto_run_args
    from typer.testing import CliRunner

    from specbench.cli import app

    args = auto_run_args(tmp_path, examples=14, limit=3, max_new=12, gamma_max=3)
    draft = args[args.index("--draft") + 1]
    result = CliRunner().invoke(app, args + ["--auto-control"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert "auto: control: runner-up" not in result.stderr  # one draft
    lines = [x for x in result.stderr.splitlines() if x.startswith("auto: ")]
    held_out = next(x for x in lines if x.startswith("auto: predicted (held out) "))
    check = next(x for x in lines if x.startswith("auto: cost-model check (known acceptance) "))
    assert lines.index(held_out) + 1 == lines.index(check)  # both before timing, side by side
    assert "for the 3 timed examples: the acceptance of the 11 pilot examples (none of the timed ones)" in held_out
    assert "the choice above was made on the pilot's acceptance" in held_out
    assert "on the same 3 examples, decoded once untimed (" in check and "not used by the choice" in check
    numbers = (("auto_predicted", "auto_prediction_ratio", held_out), ("auto_check", "auto_check_ratio", check))
    for key, ratio, line in numbers:
        value, (low, high) = summary[f"{key}_speedup"], summary[f"{key}_interval"]
        assert low <= value <= high and f"{value:.2f}× [{low:.2f}, {high:.2f}]" in line  # the number printed
        assert summary[ratio] == pytest.approx(summary["speedup_geomean"] / value)
    assert summary["auto_predicted_n_pilot"] == 11 and summary["auto_replay_s"] > 0
    # predicted below 1× (unrelated random models): flagged in the summary and said before timing; timed anyway
    low, high = summary["auto_predicted_interval"]
    assert summary["auto_predicts_slower"] is (summary["auto_predicted_speedup"] < 1)
    said = "auto: no speculative configuration is predicted faster than plain decoding" in result.stderr
    assert said is (high < 1) and (summary["n_examples"] == 3)
    run_dir = next((tmp_path / "r").iterdir())
    auto = json.loads((run_dir / "manifest.json").read_text())["auto"]
    timed = {json.loads(x)["example_id"] for x in (run_dir / "examples.jsonl").read_text().splitlines()}
    piloted = set(auto["pilots"][draft]["examples"])
    assert len(piloted) == 11 and not piloted & timed  # disjoint from the timed examples
    assert auto["loop_costs"]["float32"]["step_ms"] > 0
    assert auto["loop_costs"]["float32"]["verify_rounds"] == 3  # one round of bare passes per replayed example
    kept = {int(k): v for k, v in auto["loop_costs"]["float32"]["verify_bare_ms"].items()}
    costs = pr.LoopCosts.from_dict(auto["loop_costs"]["float32"])
    assert costs.verify_ms == pytest.approx(pr.verify_prices(costs.step_ms, kept))  # re-priced from what it kept
    assert "its shape from 3 pass rounds beside the replay)" in check
    assert (auto["prediction"]["kind"], auto["prediction"]["n_pilot"], auto["prediction"]["n_examples"]) == (
        "held_out",
        11,
        3,
    )
    assert (auto["check"]["kind"], auto["check"]["n_examples"]) == ("check", 3)
    assert auto["check"]["replay_s"] == pytest.approx(summary["auto_replay_s"])
    assert f"the best of {len(auto['candidates'])} candidates on the examples that chose it" in result.stderr


def test_run_auto_at_t_above_0_pilots_by_replay_along_the_sample(tmp_path):
    # T > 0 takes the replay pilot too (issue 31 item 1): the sampled output's laws, every draft scored along it;
    # the reasons say so, the prediction is made on the timed examples, and the pilot's α is a probability-weighted
    # count
    import json

    from helpers import CORPUS, save_tiny
    from typer.testing import CliRunner

    from specbench.cli import app

    target = save_tiny(tmp_path / "t", 0)
    task = tmp_path / "task.jsonl"
    prompts = [f"{CORPUS[i % len(CORPUS)]} {i}" for i in range(12)]
    task.write_text("".join(json.dumps({"prompt": p, "reference": p}) + "\n" for p in prompts))
    args = ["run", "--target", target, "--draft", target, "--task", str(task), "--limit", "2", "--max-new-tokens"]
    args += ["10", "--device", "cpu", "--gamma", "auto", "--gamma-max", "3", "--temperature", "0.7", "--json"]
    result = CliRunner().invoke(app, args + ["--results-dir", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "replayed along the target's sampled output (T 0.7" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["auto_predicted_speedup"] > 0 and summary["auto_check_speedup"] > 0
    assert summary["auto_predicts_slower"] in (True, False)
    assert "along their own sampled output (T 0.7" in result.stderr  # the check replays the timed samples
    auto = json.loads((next((tmp_path / "r").iterdir()) / "manifest.json").read_text())["auto"]
    pilot = auto["pilots"][target]
    assert len(pilot["examples"]) == 10 and auto["prediction"]["n_examples"] == auto["check"]["n_examples"] == 2
    assert pilot["alpha"] > 0.9  # the draft is the target itself: Σ min(p, q) = 1 at every position (numerics aside)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_a_hybrid_shares_its_model_drafts_teacher_forced_pass(monkeypatch, temperature):
    # the pilot's costliest part after the plain decode: one teacher-forced pass per draft *network*, not per
    # candidate (distilled and lookup+distilled are one network); the shared result is the one a pass would give
    import dataclasses
    from types import SimpleNamespace

    from helpers import FakeSession

    from specbench.config import RunConfig
    from specbench.measure.auto import auto_pilot
    from specbench.run_specs import parse_draft

    session = FakeSession()
    model = session.drafts["tiny-draft"]
    session.drafts["lookup+tiny-draft"] = HybridDraft(session.drafts["prompt-lookup"], model, "lookup+tiny-draft")
    config = dataclasses.replace(
        RunConfig("tiny-target", draft="tiny-draft", task="x"), sampling=SamplingConfig(temperature=temperature)
    )
    drafts = [parse_draft(d) for d in ("tiny-draft", "lookup+tiny-draft", "prompt-lookup")]
    item = SimpleNamespace(example=SimpleNamespace(id="e0"), prompt_ids=[5, 17, 99, 3, 5, 17, 99])
    name = "teacher_forced_guesses" if temperature == 0 else "teacher_forced_laws"
    calls = []
    real = getattr(pl, name)
    monkeypatch.setattr(pl, name, lambda *a: calls.append(a[0]) or real(*a))
    trace = auto_pilot.trace_example(session, item, config, 12, drafts, [], 4)
    assert calls.count(model.lm) == 1  # one pass of the draft network for both candidates
    if temperature == 0:
        assert trace.guesses["tiny-draft"] == trace.guesses["lookup+tiny-draft"]
        assert trace.guesses["tiny-draft"] == real(model.lm, item.prompt_ids, trace.output)[0]
    else:
        assert trace.sampled and trace.beta["tiny-draft"] == trace.beta["lookup+tiny-draft"]
        assert set(trace.found_p) == {"lookup+tiny-draft", "prompt-lookup"}


@pytest.mark.parametrize("temperature", ["0", "0.7"])
def test_auto_on_llama_cpp_says_when_plain_decoding_is_predicted_faster(tmp_path, monkeypatch, temperature):
    # issue 28's case (llama.cpp: predicted 0.83×, measured 0.67×): the replay pilot runs on llama.cpp's kernels
    # at both temperatures and the line before timing agrees with the printed interval; the run is still timed
    import json

    pytest.importorskip("llama_cpp", reason="the llama-cpp extra is not built (make setup-llama-cpp)")
    from tiny_gguf import write_tiny_gguf
    from typer.testing import CliRunner

    from specbench.cli import app

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", quant="Q8_0")
    task = tmp_path / "task.jsonl"
    lines = [f"the cat sat on the mat and the cat sat on the {i}" for i in range(12)]
    task.write_text("".join(json.dumps({"prompt": p, "reference": p}) + "\n" for p in lines))
    args = ["run", "--engine", "llama-cpp", "--threads", "1", "--target", str(gguf), "--task", str(task), "--json"]
    args += ["--draft", "prompt-lookup", "--gamma", "auto", "--gamma-max", "3", "--limit", "2", "--max-new-tokens"]
    args += ["16", "--temperature", temperature, "--results-dir", str(tmp_path / "res")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    low, high = summary["auto_predicted_interval"]
    assert summary["auto_predicts_slower"] is (summary["auto_predicted_speedup"] < 1) and summary["n_examples"] == 2
    said_no = "auto: no speculative configuration is predicted faster than plain decoding" in result.stderr
    said_may = "auto: the best speculative configuration may be slower than plain decoding" in result.stderr
    assert (said_no, said_may) == (high < 1, low < 1 <= high)
    assert ("sampled output (T 0.7" in result.stderr) is (temperature == "0.7")

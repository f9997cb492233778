"""auto's lines read as sentences a user can act on (issue 29 item 5): the chosen value first, then the hardware
fact and how much faster it is than the alternative, and γ's candidates as a small labelled table."""

from __future__ import annotations

from specbench.config import LoadSpec, RunConfig, parse_gamma
from specbench.measure.auto.calibration import Calibration
from specbench.measure.auto.choose import Candidate, PilotResult, explain
from specbench.run_specs import parse_draft


def calibration(dtype: str) -> Calibration:
    ms = {k: 10.0 * (1 + 0.1 * (k - 1)) for k in range(1, 10)}
    return Calibration(dtype, "cpu", 64, ms, {k: 0.0 for k in ms}, 3)


def pilot(draft: str, alpha: float) -> PilotResult:
    return PilotResult(draft, alpha, 10, None, False, ["0"])


def test_auto_lines_name_the_choice_then_why():
    config = RunConfig(LoadSpec("t", dtype="auto"), task="x", draft="auto", gamma=parse_gamma("auto"), gamma_max=3)
    bf = [Candidate("prompt-lookup", "bfloat16", g, s, 85.0 / s * 1.5) for g, s in ((1, 1.2), (2, 1.5), (3, 1.4))]
    ranked = sorted(
        [*bf, Candidate("unigram", "bfloat16", 2, 1.1, 95.0), Candidate("prompt-lookup", "float32", 2, 1.4, 181.4)],
        key=lambda c: c.ms_per_token,
    )
    best = ranked[0]
    assert (best.dtype, best.draft, best.gamma) == ("bfloat16", "prompt-lookup", 2)
    lines = explain(
        config,
        best,
        ranked,
        {"bfloat16": calibration("bfloat16"), "float32": calibration("float32")},
        {"prompt-lookup": pilot("prompt-lookup", 0.61), "unigram": pilot("unigram", 0.3)},
        "the CPU has avx512_bf16",
    )
    dtype_line, draft_line, gamma_line = lines
    assert dtype_line.startswith("bfloat16 (the CPU has avx512_bf16; ")
    assert f"{181.4 / best.ms_per_token:.2f}× faster per token than float32" in dtype_line
    head = f"draft prompt-lookup (the fewest predicted ms per token: {best.ms_per_token:.1f} at γ 2, "
    assert draft_line.startswith(head)
    assert "1.50×, pilot α 0.61; the others: unigram" in draft_line and "can rank otherwise" in draft_line
    head, *table = gamma_line.splitlines()
    assert head == "γ 2 (the fewest predicted ms per token for prompt-lookup in bfloat16):" and len(table) == 3
    assert table[0].split()[1:] == ["1", "2*", "3"] and table[1].split()[1:] == ["1.20×", "1.50×", "1.40×"]
    assert table[2].split()[-3:] == ["1.10", "1.20", "1.30"]  # t(γ+1)/t(1) of the calibration above
    assert "float32: float32" not in " ".join(lines)  # the old line repeated the dtype's name


def test_a_best_configuration_predicted_slower_is_said_before_timing():
    # llama.cpp's case (issue 28): every candidate below 1×; the line says so plainly, an interval straddling 1×
    # says "may be", an interval above 1× says nothing
    from specbench.measure.auto.choose import slower_warning

    below = slower_warning("prompt-lookup γ 4 float32", 0.83, 0.71, 0.97)
    assert below == (
        "no speculative configuration is predicted faster than plain decoding on this machine "
        "(best: prompt-lookup γ 4 float32 predicted 0.83× [0.71, 0.97]); timing it anyway"
    )
    straddles = slower_warning("prompt-lookup γ 4 float32", 0.93, 0.80, 1.08)
    assert straddles is not None and straddles.startswith("the best speculative configuration may be slower than")
    assert "may be slower" in (slower_warning("m γ 2 bfloat16", 1.05, 0.95, 1.16) or "")  # point above, low below
    assert slower_warning("m γ 2 bfloat16", 1.2, 1.05, 1.35) is None
    assert "predicted 0.83×, no interval" in (slower_warning("m γ 2 bfloat16", 0.83) or "")  # the old pilot's
    assert slower_warning("m γ 2 bfloat16", 1.01) is None
    assert slower_warning("m γ 2 bfloat16", float("nan"), float("nan"), float("nan")) is None


def test_choose_flags_and_says_when_every_candidate_is_slower():
    # a costly verify pass (t(k) = k · t(1)) and a poor draft: no (draft, γ) can beat plain decoding
    from specbench.measure.auto.choose import AutoChoice, choose

    config = RunConfig("t", task="x", draft="prompt-lookup", gamma=parse_gamma("auto"), gamma_max=3)

    def curve(slope):
        ms = {k: 10.0 * (1 + slope * (k - 1)) for k in range(1, 5)}
        return Calibration("float32", "cpu", 64, ms, {k: 0.0 for k in ms}, 3)

    def run(slope, alpha):
        return choose(
            config,
            dtypes=["float32"],
            drafts=[parse_draft("prompt-lookup")],
            calibrate_dtype=lambda dtype, drafts: (curve(slope), {}),
            pilot=lambda d: PilotResult(d.text, alpha, 40, {g: 1.0 if g == 3 else 0.0 for g in range(4)}, False, ["0"]),
        )

    slow = run(1.0, 0.05)
    assert slow.predicts_slower is True and slow.draft == "prompt-lookup"  # still the run's configuration
    assert slow.reasons[-1].startswith("no speculative configuration is predicted faster than plain decoding")
    assert slow.reasons[-1].endswith(f"predicted {slow.candidates[0].speedup:.2f}×, no interval); timing it anyway")
    assert AutoChoice.from_dict(slow.to_dict()).predicts_slower is True
    fast = run(0.1, 0.8)  # negative control: a cheap verify and a good draft → no such line
    assert fast.predicts_slower is False and not any("plain decoding on this machine" in r for r in fast.reasons)


def test_the_two_numbers_before_timing_are_named_for_what_they_are():
    """Issue 40: "predicted (held out)" (the pilot's acceptance on the timed prompts) and "cost-model check (known
    acceptance)" (the timed examples' own replay), each line saying what it is, and which one the choice used; the
    line after the table sets both beside the measurement; a summary from before issue 40 (one number, the check)
    is not shown as a prediction."""
    from specbench.cli.run import prediction_line
    from specbench.measure.auto import prediction as pr
    from specbench.measure.auto.prediction import auto_lines
    from specbench.measure.results.run_folder import auto_prediction_fields
    from specbench.measure.results.schema import Summary

    held_out = pr.Prediction(1.58, 1.31, 1.90, 20, kind=pr.HELD_OUT, n_pilot=24, sampling_log_sd=0.21)
    check = pr.Prediction(1.72, 1.56, 1.90, 20, kind=pr.CHECK, replay_s=41.5)
    costs = pr.LoopCosts("bfloat16", 37.6, 52.0, {1: 37.6, 4: 40.6})
    first, second = auto_lines(held_out, check, costs, 3, "greedy output")
    assert first.startswith(
        "predicted (held out) 1.58× [1.31, 1.90] for the 20 timed examples: the acceptance of the 24 pilot examples "
        "(none of the timed ones) applied to the timed examples' prompts and lengths"
    )
    assert "log sd 0.210 over pilot examples" in first and first.endswith("made on the pilot's acceptance too")
    assert second.startswith(
        "cost-model check (known acceptance) 1.72× [1.56, 1.90] on the same 20 examples, decoded once untimed "
        "(41.5 s) and replayed along their own greedy output"
    )
    assert "not used by the choice" in second and "a verify pass over 4 tokens 40.6 ms" in second
    swapped = auto_lines(check, held_out, costs, 3, "greedy output")  # control: the name follows the kind
    assert swapped[0].startswith("cost-model check") and swapped[1].startswith("predicted (held out)")

    manifest = {"auto": {"prediction": held_out.to_dict(), "check": check.to_dict(), "predicts_slower": False}}
    summary = Summary(speedup_geomean=1.65, **auto_prediction_fields(manifest, 1.65))
    assert (summary.auto_predicted_n_pilot, summary.auto_replay_s) == (24, 41.5)
    assert prediction_line(summary) == (
        "before timing (auto): predicted (held out) 1.58×, 95 % 1.31–1.90; cost-model check (known acceptance) "
        "1.72×, 95 % 1.56–1.90; measured 1.65×"
    )
    old = Summary(speedup_geomean=1.65, **auto_prediction_fields({"auto": {"prediction": check.to_dict()}}, 1.65))
    assert old.auto_predicted_speedup is None and old.auto_check_speedup == 1.72
    assert prediction_line(old) == (
        "before timing (auto): cost-model check (known acceptance) 1.72×, 95 % 1.56–1.90; measured 1.65×"
    )

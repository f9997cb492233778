"""`make bench`: our engines against Hugging Face's, side by side in one run on the same prompts.

Timing is measured here, never asserted in tests. Every comparison is a ratio of two engines
timed in the same process, interleaved prompt by prompt (so drift in machine load hits both),
after a warm-up of each. Figures and their goals:
  (a) our baseline tokens/s ÷ HF generate() greedy tokens/s        goal ≥ 1.0
  (b) our speculative tokens/s ÷ HF's same-draft tokens/s          goal ≥ 1.2
      (prompt lookup: HF `prompt_lookup_num_tokens=γ`, `max_matching_ngram_size=3`;
       a model draft: HF `assistant_model=` with constant `num_assistant_tokens=γ`)
  (c) measured decode speedup ÷ the cost model's prediction from the measured α, c, verify cost and
      proposal law for outputs of the measured lengths (predicted_metrics.predicted_decode)  goal ≥ 0.9.
      c and the verify cost come from the same run, so this tests what is left: the loop's own
      time (d) and the model's pass count (printed beside the measured one). Prefill is outside
      both sides; the end-to-end speedup over the endless-stream formula is printed under it,
      without a goal (its gap is prefill and the drafts lost past each EOS).
  (d) share of speculative decode time outside the draft and target passes            goal ≤ 5%
Our engines run under --backend (eager, static or compiled: decoding/backend.py), baseline and
speculative alike; HF runs its default (dynamic cache, eager), as users call it.
It runs over the installed package (`pip install -e .`), as every script in bench/ does.
Usage: python bench/bench.py [--target smollm2-135m] [--draft distilled] [--gamma 2]
       [--task ding-de-en] [--limit 6] [--max-new-tokens 64] [--repeats 4] [--backend eager]
       [--out results/bench]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from specbench.config import LoadSpec, RunConfig, SamplingConfig
from specbench.decoding.base import hf_assistant, model_caches, set_timer
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.speculative import decode_speculative
from specbench.decoding.timing import Clock
from specbench.engines.hf_assisted.generate import decode_hf
from specbench.engines.torch.session import TorchSession as Session
from specbench.errors import SpecbenchError
from specbench.files import atomic_write_json
from specbench.measure.results.provenance import environment_info
from specbench.measure.run.arms import Engines, engine_record, prepare_examples
from specbench.measure.stats.metric_units import json_safe
from specbench.measure.stats.metrics import summarize
from specbench.run_specs import parse_draft
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

HF_COUNTERPARTS = ("prompt-lookup", "model")  # draft kinds HF generate() has: prompt_lookup_num_tokens, assistant_model


def hf_generate(
    session: Session, prompt_ids: list[int], max_new: int, gamma: int, draft: str | None, min_confidence: float = 0.0
):
    """HF generate() greedy: plain (draft None), prompt lookup, or assisted by the draft model; → (tokens, seconds)."""
    t = session.target
    kind = parse_draft(draft).kind if draft is not None else None
    assistant = hf_assistant(session.proposer(parse_draft(draft))) if kind == "model" else None
    res = decode_hf(
        t.model,
        prompt_ids,
        max_new_tokens=max_new,
        sampling=SamplingConfig(),
        seed=0,
        eos_ids=t.eos_ids,
        assistant=assistant,
        prompt_lookup=kind == "prompt-lookup",
        gamma=gamma,
        min_confidence=min_confidence,
    )
    return res.token_ids, res.decode_s


def loop_overhead(
    session: Session, draft: str, gamma: int, prepared, max_new: int, min_confidence: float = 0.0
) -> float:
    """Share of speculative decode time spent outside model forwards (target and draft), profiled."""
    t = session.target
    proposer = session.proposer(parse_draft(draft), corpus=[p.prompt_ids for p in prepared])
    clock = Clock(t.device)
    inside, total = 0.0, 0.0
    for item in prepared:
        target = CachedModel(t.model, timer=clock, backend=session.target_backend)
        set_timer(proposer, clock)  # a fresh forward_times list on each of the draft's model caches
        res = decode_speculative(
            target,
            proposer,
            item.prompt_ids,
            gamma=gamma,
            max_new_tokens=max_new,
            sampling=SamplingConfig(),
            generator=None,
            eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id,
            min_confidence=min_confidence,
        )
        # the first forward of each model is its prompt prefill, outside the decode time
        inside += sum(forward_seconds(lm) for lm in [target, *model_caches(proposer)])
        total += res.decode_s
    set_timer(proposer, None)
    return 1.0 - inside / total


def forward_seconds(lm: CachedModel) -> float:
    """Seconds a profiled model spent in forwards after its prompt prefill (its first forward)."""
    return sum(lm.forward_times[1:])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--draft", default="distilled")
    ap.add_argument("--gamma", type=int, default=2)
    ap.add_argument("--task", default="ding-de-en")
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--backend", default="eager", help="eager, static or compiled (ours only)")
    ap.add_argument("--device-map", default=None, help="the target over several devices: auto, balanced or JSON")
    ap.add_argument("--max-memory", default=None, help="per-device caps for --device-map, e.g. 0=20GiB,1=20GiB")
    ap.add_argument(
        "--draft-confidence",
        type=float,
        default=0.0,
        help="model drafts stop early below this confidence, ours and HF's alike (0 = constant γ)",
    )
    ap.add_argument("--out", default="results/bench")
    args = ap.parse_args(argv)
    if parse_draft(args.draft).kind not in HF_COUNTERPARTS:
        raise SystemExit(f"HF has no counterpart of the draft {args.draft!r}; bench prompt-lookup or a model draft")
    return args


def interleaved_runs(args, session: Session, engines: Engines, prepared) -> tuple[dict, list[dict], int]:
    """Every prompt × repeat through the four engines → (token and second totals, first-repeat records, mismatches)."""
    max_new, tok = args.max_new_tokens, session.target.tokenizer
    totals = {"ours_base": [0, 0.0], "hf_base": [0, 0.0], "ours_spec": [0, 0.0], "hf_spec": [0, 0.0]}
    records, mismatches = [], 0
    for rep in range(args.repeats):
        for i, item in enumerate(prepared):
            # the four engines run back to back, in an order reversed every other prompt (ABBA), so
            # neither side systematically runs on a warmer cache or a quieter machine
            jobs = {
                "base": lambda item=item: engines.baseline(item.prompt_ids, 0, max_new),
                "hf": lambda item=item: hf_generate(session, item.prompt_ids, max_new, args.gamma, None),
                "spec": lambda item=item: engines.speculative(item.prompt_ids, 0, max_new),
                "hf_spec": lambda item=item: hf_generate(
                    session, item.prompt_ids, max_new, args.gamma, args.draft, args.draft_confidence
                ),
            }
            names = list(jobs) if (rep + i) % 2 == 0 else list(reversed(jobs))
            done = {name: jobs[name]() for name in names}
            base, (hf_tokens, hf_s), spec_res = done["base"], done["hf"], done["spec"]
            hf_spec_tokens, hf_spec_s = done["hf_spec"]
            n = len(base.token_ids)
            mismatches += (hf_tokens[:n] != base.token_ids) + (spec_res.token_ids != base.token_ids)
            for key, (count, secs) in {
                "ours_base": (n, base.prefill_s + base.decode_s),
                "hf_base": (len(hf_tokens), hf_s),
                "ours_spec": (len(spec_res.token_ids), spec_res.prefill_s + spec_res.decode_s),
                "hf_spec": (len(hf_spec_tokens), hf_spec_s),
            }.items():
                totals[key][0] += count
                totals[key][1] += secs
            if rep == 0:
                b, s = engine_record(base, tok), engine_record(spec_res, tok)
                records.append(
                    {
                        "baseline": b.__dict__,
                        "speculative": s.__dict__,
                        "identical": b.token_ids == s.token_ids,
                        "first_divergence": None,
                        "reference": None,
                        "example_id": item.example.id,
                    }
                )
        print(f"repeat {rep + 1}/{args.repeats} done", file=sys.stderr)
    return totals, records, mismatches


def print_report(
    args,
    session: Session,
    n_prompts: int,
    warm_up_s: float,
    tps: dict,
    summary: dict,
    mismatches: int,
    figures: list[tuple],
) -> None:
    stop = f" (early stop below {args.draft_confidence:g})" if args.draft_confidence else ""
    print(
        f"\n{args.target} + {args.draft}, γ={args.gamma}{stop}, task {args.task}, "
        f"{n_prompts} prompts × {args.repeats} repeats, "
        f"max_new_tokens {args.max_new_tokens}, greedy, {session.target.device}, backend {args.backend}, "
        f"torch threads {torch.get_num_threads()}; our warm-up {warm_up_s:.0f} s (untimed)"
    )
    print(
        f"tokens/s: ours baseline {tps['ours_base']:.1f} | HF generate {tps['hf_base']:.1f} | "
        f"ours speculative {tps['ours_spec']:.1f} | HF {args.draft} {tps['hf_spec']:.1f}"
    )
    print(
        f"α {summary['alpha']:.3f}, c {summary['c']:.4f}, verify cost {summary['verify_cost']:.3f}, "
        f"speedup {summary['speedup']:.3f} (decode only {summary['decode_speedup']:.3f}), predicted: decode, these "
        f"output lengths {summary['predicted_decode_speedup']:.3f}; endless stream (extended) "
        f"{summary['predicted_speedup_extended']:.3f}; target passes measured {summary['target_calls']}, predicted "
        f"{summary['predicted_target_calls']:.1f}"
    )
    print(f"token mismatches against our baseline (should be 0): {mismatches}")
    print(f"{'figure':58s} {'value':>8s}  goal     met")
    for name, value, goal in figures:
        if goal == "-":
            print(f"{name:58s} {value:8.3f}")
            continue
        op, bound = goal.split()
        met = value >= float(bound) if op == ">=" else value <= float(bound)
        print(f"{name:58s} {value:8.3f}  {goal:8s} {'yes' if met else 'NO'}")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    load = LoadSpec(
        args.target,
        device=args.device,
        dtype=args.dtype,
        backend=args.backend,
        device_map=args.device_map,
        max_memory=args.max_memory,
    )
    config = RunConfig(
        load=load,
        draft=args.draft,
        task=args.task,
        gamma=args.gamma,
        limit=args.limit,
        draft_confidence=args.draft_confidence,
    ).validate()
    session = Session(load)
    spec = load_task(args.task)
    prepared = prepare_examples(spec, select_examples(spec, args.limit, 0), session.target, args.max_new_tokens)
    engines = Engines(session, config, session.proposer(config.draft, corpus=[p.prompt_ids for p in prepared]))
    max_new = args.max_new_tokens

    # warm-up of every engine on the first prompt (under --backend compiled: every step shape compiles here)
    first = prepared[0].prompt_ids
    t_warm = time.perf_counter()
    engines.warm_up(first, max(len(p.prompt_ids) for p in prepared) + max_new)
    warm_up_s = time.perf_counter() - t_warm
    hf_generate(session, first, 8, args.gamma, None)
    hf_generate(session, first, 8, args.gamma, args.draft, args.draft_confidence)

    totals, records, mismatches = interleaved_runs(args, session, engines, prepared)
    tps = {k: c / s for k, (c, s) in totals.items()}
    summary = summarize(records, args.gamma, greedy=True)
    figures = [
        ("(a) our baseline ÷ HF generate() tokens/s", tps["ours_base"] / tps["hf_base"], ">= 1.0"),
        (f"(b) our speculative ÷ HF {args.draft} tokens/s", tps["ours_spec"] / tps["hf_spec"], ">= 1.2"),
        (
            "(c) measured ÷ predicted decode speedup (cost model)",
            summary["decode_speedup"] / summary["predicted_decode_speedup"],
            ">= 0.9",
        ),
        (
            "    the same, end to end ÷ endless-stream formula (no goal)",
            summary["speedup"] / summary["predicted_speedup_extended"],
            "-",
        ),
        (
            "(d) decode time outside model forwards (profiled pass)",
            loop_overhead(session, args.draft, args.gamma, prepared, max_new, args.draft_confidence),
            "<= 0.05",
        ),
    ]
    print_report(args, session, len(prepared), warm_up_s, tps, summary, mismatches, figures)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    atomic_write_json(
        path,
        json_safe(
            {
                "args": vars(args),
                "tokens_per_s": tps,
                "mismatches": mismatches,
                "warm_up_s": warm_up_s,
                "figures": [{"name": n, "value": v, "goal": g} for n, v, g in figures],
                "summary": summary,
                **environment_info(),
            }
        ),
    )
    print(f"written {path}")
    return {"tokens_per_s": tps, "figures": figures, "summary": summary, "path": str(path)}


if __name__ == "__main__":
    try:
        main()
    except SpecbenchError as exc:  # bad flags: one line and exit 1, as the CLI does
        raise SystemExit(f"error: {exc}") from None

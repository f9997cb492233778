"""A planted bug on the real default model: does the numerics classifier call it unexplained?

    python bench/planted_bug.py [--target smollm2-135m] [--draft prompt-lookup] [--task aclsum] [--dtype bfloat16]
                                [--limit 40] [--max-new-tokens 64] [--gamma 4] [--every 50]

Greedy, in bf16 (where the verify pass's kernel shapes flip near-ties, so clean divergences exist): every
example is decoded by the baseline, by the clean speculative engine and by the same engine with a bug planted
in the multi-token verification path (evidence/planted.py: the verified logits taken one position late for
one verification step in `--every`, counted across examples as in one run). Every divergence goes through
the classifier the runs use (measure/stats/numerics.py: explain_example per example, identity_line with the
margin gate over the run; the floor's flip margins, which depend on the baseline only, give the range). A
planted run's divergence is the bug's when it happens at or after the first bugged step of its example. It
prints

    clean: D divergences, U unexplained            (the goal: U = 0)
    planted: K divergences, K' unexplained         (the goal: K' >= 0.95 K)

and writes the counts and every classified divergence to --out (JSON, atomic), rewritten after every example so
that a run stopped early leaves its tally ("examples_done"). Nothing is timed here.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from specbench.config import LoadSpec, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.speculative import decode_speculative
from specbench.engines.torch.session import TorchSession as Session
from specbench.evidence.planted import caused, late_verified_logits
from specbench.files import atomic_write_text
from specbench.measure.run.arms import prepare_examples
from specbench.measure.stats.margin_gate import identity_line, ulp_limit
from specbench.measure.stats.metric_units import first_divergence
from specbench.measure.stats.numerics import explain_example
from specbench.run_specs import parse_draft
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

GREEDY = SamplingConfig(temperature=0.0)


def spec_record(res) -> dict:
    """What explain_example needs of a speculative run: its tokens and its pass record."""
    return {"token_ids": res.token_ids, "pass_lengths": res.pass_lengths, "accept_lengths": res.accept_lengths}


def classified(model, prompt, base, res, gamma, start) -> dict:
    """An example record's identity and `numerics` field, as the runner writes them."""
    d = first_divergence(base.token_ids, res.token_ids)
    numerics = explain_example(model, prompt, {"token_ids": base.token_ids}, spec_record(res), gamma, d, start)
    return {"identical": d is None, "first_divergence": d, "numerics": numerics}


def gaps(records: list[dict]) -> list[float]:
    """The logit gap, in spacings, at each record's divergence (sorted; None where it was not measured)."""
    out = [((r["numerics"] or {}).get("divergence") or {}).get("gap_ulps") for r in records if not r["identical"]]
    return sorted(out, key=lambda g: (g is None, g or 0.0))


def floor_only(records: list[dict]) -> list[dict]:
    """The clean run's records reduced to their floors (identical, no divergence): the margin range they give."""
    return [{"identical": True, "numerics": {**r["numerics"], "divergence": None}} for r in records]


def summarize(args, n_examples: int, clean: list[dict], planted: list[dict], steps: int, t0: float, load0) -> dict:
    """The bench's result over the examples done so far: both runs' identity lines (the planted run's over the
    divergences the bug caused, its floor the clean run's), the gate's limit and every gap."""
    clean_summary = identity_line(clean)
    ours = [r for r in planted if r["caused"]]
    planted_summary = identity_line(ours + floor_only(clean))
    k, k_unexplained = len(ours), planted_summary["divergences_unexplained"]
    clean_div = sum(not r["identical"] for r in clean)
    return {
        "target": args.target,
        "draft": args.draft,
        "task": args.task,
        "dtype": args.dtype,
        "examples": n_examples,
        "examples_done": len(clean),
        "max_new_tokens": args.max_new_tokens,
        "gamma": args.gamma,
        "every": args.every,
        "verification_steps": steps,
        "bugged_steps": sum(len(r["planted_at"]) for r in planted),
        "clean": {"divergences": clean_div, **clean_summary},
        "planted": {"divergences": k, "unexplained": k_unexplained, **planted_summary},
        "planted_share_unexplained": k_unexplained / k if k else None,
        "gate_limit_ulps": ulp_limit(u for r in clean for u in r["numerics"].get("floor_flip_ulps") or []),
        "clean_gap_ulps": gaps(clean),
        "planted_gap_ulps": gaps(ours),
        "seconds": time.perf_counter() - t0,
        "load_average_start": load0,
        "load_average_end": os.getloadavg(),
        "records": {"clean": clean, "planted": planted},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--draft", default="prompt-lookup")
    ap.add_argument("--task", default="aclsum")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--limit", type=int, default=40)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--every", type=int, default=50, help="plant the bug on one verification step in this many")
    ap.add_argument("--out", default="results/bench-planted-bug.json")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    load0 = os.getloadavg()
    session = Session(LoadSpec(args.target, device=args.device, dtype=args.dtype))
    spec = load_task(args.task)
    prompts = [
        p.prompt_ids
        for p in prepare_examples(spec, select_examples(spec, args.limit, 0), session.target, args.max_new_tokens)
    ]
    model, start = session.target.model, session.target.decoder_start_id
    common = dict(
        max_new_tokens=args.max_new_tokens,
        sampling=GREEDY,
        generator=None,
        eos_ids=session.target.eos_ids,
        decoder_start_id=start,
    )

    def speculative(prompt):
        draft = session.proposer(parse_draft(args.draft), prompts)
        return decode_speculative(CachedModel(model), draft, prompt, gamma=args.gamma, **common)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    clean: list[dict] = []
    planted: list[dict] = []
    steps = 0
    result: dict = {}
    for i, prompt in enumerate(prompts):
        base = decode_autoregressive(CachedModel(model), prompt, **common)
        clean.append({"example": i, **classified(model, prompt, base, speculative(prompt), args.gamma, start)})
        with late_verified_logits(every=args.every, offset=(-steps) % args.every) as plant:
            res = speculative(prompt)
        steps += plant.steps
        rec = {"example": i, "planted_at": plant.positions, **classified(model, prompt, base, res, args.gamma, start)}
        rec["caused"] = caused(rec["first_divergence"], plant.first())
        planted.append(rec)
        result = summarize(args, len(prompts), clean, planted, steps, t0, load0)
        # the tally so far, rewritten after every example: a run stopped early still leaves its counts
        atomic_write_text(out, json.dumps(result, indent=2, default=float) + "\n")
        print(
            f"example {i + 1}/{len(prompts)}: clean {clean[-1]['first_divergence']}, planted at {plant.positions} "
            f"-> {rec['first_divergence']}; so far clean {result['clean']['divergences']} divergences "
            f"{result['clean']['divergences_unexplained']} unexplained, planted {result['planted']['divergences']} "
            f"divergences {result['planted']['unexplained']} unexplained",
            flush=True,
        )

    clean_summary, k, k_unexplained = (
        result["clean"],
        result["planted"]["divergences"],
        result["planted"]["unexplained"],
    )
    print(
        f"clean: {result['clean']['divergences']} divergences, {clean_summary['divergences_unexplained']} unexplained"
    )
    print(f"planted: {k} divergences, {k_unexplained} unexplained")
    print(f"numerics margin range (the floor's flips): {clean_summary['numerics_margin_range']}")
    print(
        f"gate: logit gaps up to {result['gate_limit_ulps']:g} spacings are numerics; gaps in spacings, clean "
        f"{result['clean_gap_ulps']}, planted {result['planted_gap_ulps']}"
    )
    return result


if __name__ == "__main__":
    main()

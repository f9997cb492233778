"""--bit-exact on a real model: greedy identity, the planted-bug table, and what the mode costs.

    python bench/bit_exact.py [--target smollm2-135m] [--draft prompt-lookup] [--task aclsum] [--dtype bfloat16]
                              [--limit 10] [--max-new-tokens 48] [--gamma 4] [--every 50] [--cost-only]

Greedy. Every example is decoded by the baseline and by the speculative engine under --bit-exact (decoding/stepwise.py:
every verify pass as one-token passes), clean and with each planted bug of evidence/planted.py in turn:
  late      the verified logits one position late on one verification step in --every (counted across examples);
  biased    +10 on one token in every verified row (the example's most frequent baseline token: a likely runner-up);
  near-tie  where a verified row's top two logits are within one spacing of the logit dtype, the runner-up named.
An example is *touched* by a plant when a planted verdict emitted another token than the clean verdict would have
(PlantedSteps.changed, within the clean output: a step that accepts drafts past the end of sequence or the budget
may change tokens the loop cuts). Under the mode every touched example must diverge exactly at its first touched
position and every untouched one must stay identical; the clean run must be N/N identical. Then the cost: median ms
of a one-token step and of a (γ+1)-token pass after the first example's prompt (--cost-reps each), so a verify pass
costs γ+1 steps under the mode against one pass without it; run it on an idle machine (the load averages are written
beside it).
Writes --out (JSON, atomic) after every example; prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from pathlib import Path

import torch

from specbench.config import LoadSpec, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.speculative import decode_speculative
from specbench.decoding.stepwise import stepwise_forward
from specbench.engines.torch.session import TorchSession as Session
from specbench.evidence import planted as plants
from specbench.files import atomic_write_text
from specbench.measure.run.arms import prepare_examples
from specbench.measure.stats.metric_units import first_divergence
from specbench.run_specs import parse_draft
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

GREEDY = SamplingConfig(temperature=0.0)
PLANTS = ("late", "biased", "near-tie")


def plant_block(name: str, args, steps_so_far: int, base_tokens: list[int]):
    if name == "late":
        return plants.late_verified_logits(every=args.every, offset=(-steps_so_far) % args.every)
    if name == "biased":
        return plants.biased_verified_rows(token=Counter(base_tokens).most_common(1)[0][0])
    return plants.near_tie_flips()


def cost(lm: CachedModel, prompt: list[int], gamma: int, reps: int) -> dict:
    """Median ms of a one-token step, a normal (γ+1)-token pass and a stepwise one, each after the prompt."""
    ids = torch.tensor(prompt[-(gamma + 1) :])

    def timed(fn) -> float:
        out = []
        for _ in range(reps):
            lm.start()
            lm.forward(torch.tensor(prompt))
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(out)

    step = timed(lambda: lm.forward(ids[:1]))
    normal = timed(lambda: lm.forward(ids, all_logits=True))
    stepwise = timed(lambda: stepwise_forward(lm, ids))
    return {
        "one_token_step_ms": step,
        "normal_pass_ms": normal,
        "stepwise_pass_ms": stepwise,
        "normal_ms_per_token": normal / (gamma + 1),
        "stepwise_ms_per_token": stepwise / (gamma + 1),
        "stepwise_over_normal": stepwise / normal,
        "tokens_per_pass": gamma + 1,
        "reps": reps,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--draft", default="prompt-lookup")
    ap.add_argument("--task", default="aclsum")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--every", type=int, default=50, help="the late plant: one verification step in this many")
    ap.add_argument("--cost-reps", type=int, default=30)
    ap.add_argument("--cost-only", action="store_true", help="measure the cost only (no identity or plants)")
    ap.add_argument("--out", default="results/bench-bit-exact.json")
    args = ap.parse_args(argv)

    t0, load0 = time.perf_counter(), os.getloadavg()
    session = Session(LoadSpec(args.target, device="cpu", dtype=args.dtype))
    spec = load_task(args.task)
    prompts = [
        p.prompt_ids
        for p in prepare_examples(spec, select_examples(spec, args.limit, 0), session.target, args.max_new_tokens)
    ]
    model = session.target.model
    common = dict(max_new_tokens=args.max_new_tokens, sampling=GREEDY, generator=None, eos_ids=session.target.eos_ids)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result: dict = {k: getattr(args, k) for k in ("target", "draft", "task", "dtype", "gamma", "every")}
    result |= {"max_new_tokens": args.max_new_tokens, "examples": len(prompts), "load_average_start": load0}

    def speculative(prompt):
        draft = session.proposer(parse_draft(args.draft), prompts)
        return decode_speculative(CachedModel(model), draft, prompt, gamma=args.gamma, stepwise=True, **common)

    rows: list[dict] = []
    steps = 0
    for i, prompt in enumerate([] if args.cost_only else prompts):
        base = decode_autoregressive(CachedModel(model), prompt, **common).token_ids
        row: dict = {"example": i, "tokens": len(base)}
        row["clean_divergence"] = first_divergence(base, speculative(prompt).token_ids)
        for name in PLANTS:
            with plant_block(name, args, steps, base) as seen:
                res = speculative(prompt)
            if name == "late":
                steps += seen.steps
            touched = seen.first_changed(within=len(base))  # a change past the output's end is cut, never shown
            row[name] = {"touched_at": touched, "diverged_at": first_divergence(base, res.token_ids)}
        rows.append(row)
        result["rows"] = rows
        result["table"] = table(rows)
        atomic_write_text(out, json.dumps(result, indent=2) + "\n")
        print(f"example {i + 1}/{len(prompts)}: {json.dumps(row)}", flush=True)
    result["cost"] = cost(CachedModel(model), prompts[0], args.gamma, args.cost_reps)
    result |= {"seconds": time.perf_counter() - t0, "load_average_end": os.getloadavg()}
    atomic_write_text(out, json.dumps(result, indent=2) + "\n")
    for line in result.get("table", []):
        print(line)
    c = result["cost"]
    print(
        f"cost: one-token step {c['one_token_step_ms']:.2f} ms; a {c['tokens_per_pass']}-token verify pass "
        f"{c['normal_pass_ms']:.2f} ms normal, {c['stepwise_pass_ms']:.2f} ms stepwise "
        f"({c['stepwise_over_normal']:.2f}x; "
        f"{c['normal_ms_per_token']:.2f} vs {c['stepwise_ms_per_token']:.2f} ms per verified token); load average "
        f"{load0[0]:.2f} at the start, {result['load_average_end'][0]:.2f} at the end"
    )
    return result


def table(rows: list[dict]) -> list[str]:
    """The identity line and one line per plant: touched examples, how many diverged exactly there, and whether
    every untouched example stayed identical."""
    n = len(rows)
    clean = sum(r["clean_divergence"] is None for r in rows)
    lines = [f"clean: bit-exact mode: {clean}/{n} identical"]
    for name in PLANTS:
        touched = [r[name] for r in rows if r[name]["touched_at"] is not None]
        exact = sum(t["diverged_at"] == t["touched_at"] for t in touched)
        untouched_ok = all(r[name]["diverged_at"] is None for r in rows if r[name]["touched_at"] is None)
        lines.append(
            f"{name}: touched {len(touched)}/{n} examples, {exact}/{len(touched)} diverged at the touched position; "
            f"untouched examples {'all identical' if untouched_ok else 'NOT all identical'}"
        )
    return lines


if __name__ == "__main__":
    main()

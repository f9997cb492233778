"""Planted bugs of graded strength on the real default model: which ones does greedy identity catch, per example?

    python bench/planted_bug.py [--target smollm2-135m] [--draft prompt-lookup] [--task aclsum] [--dtype bfloat16]
                                [--limit 40] [--offset 0] [--max-new-tokens 64] [--gamma 4] [--every 50]
                                [--spacings 1,2,4,8,16,64] [--site verifier|model-call|both]
                                [--out results/bench-planted-bug.json]

Greedy, in bf16 (where the verify pass's kernel shapes flip near-ties, so clean divergences exist). Every example
is decoded by the baseline, then by the speculative engine teacher-forced along the baseline's output
(decoding/forced.py: the engine's own draft and verify passes with the baseline's tokens as the context), so every
position is verified after the baseline's prefix and compared, not only those before a first divergence. That is done
clean and once per planted bug (evidence/planted.py):

  shift        the verified logits one position late (late_verified_logits), on one verification step in --every,
               counted across examples as in one run;
  lower k      the verifier reads every row of such a step with its argmax token's logit lowered by k spacings of
               the logit dtype at that value (lowered_verified_argmax), for each k in --spacings;
  call k       (--site model-call or both) the same lowering inside the target's multi-token model call, on the rows
               predicting one sequence position in --every (lowered_multi_token_argmax). The floor, the forced run
               and the classifier's replays all run under it, as they would under a kernel bug: only the margin gate
               can catch it, so its rows measure the gate's blind zone.

Every divergence is classified as `specbench verify` does (past_divergence.explain_forced: a replay of the forced run's
passes, then the margin gate, past_divergence.past_divergence_counts, with the limit the run's numerics floor sets: the
clean floor, or for `call k` the floor under that bug). An example is *touched* by a plant when the plant changed a
verified token to one that is not the baseline's (verifier plants: a planted verdict emitted another token than the
clean verdict would have, PlantedSteps.changed; `call k`: at a keyed position the planted forced run verified
another token than the baseline's where the clean forced run verified the baseline's), and *caught* when a
divergence at a touched position is unexplained. It prints, per plant, the touched examples, the caught ones and the
per-example catch rate with its Clopper–Pearson 95 % interval (scipy.stats.binomtest(...).proportion_ci), `masked`
(touched examples whose clean free-running output had already left the baseline's before the first touched
position: a first-divergence check could not have caught them) and `false` (untouched examples with an unexplained
divergence); for the clean run the positions compared, divergences, explained and unexplained (the goal: 0). The
counts and every classified divergence go to --out (JSON, atomic), rewritten after every example; a rerun with the
same settings resumes after the examples --out holds. Nothing is timed.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path

from scipy.stats import binomtest

from specbench.config import LoadSpec, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.forced import decode_forced
from specbench.decoding.speculative import decode_speculative
from specbench.engines.torch.session import TorchSession as Session
from specbench.evidence.planted import late_verified_logits, lowered_multi_token_argmax, lowered_verified_argmax
from specbench.files import atomic_write_text
from specbench.measure.run.arms import prepare_examples
from specbench.measure.stats.margin_gate import ulp_limit
from specbench.measure.stats.metric_units import first_divergence
from specbench.measure.stats.numerics import explain_example
from specbench.measure.stats.past_divergence import explain_forced, past_divergence_counts
from specbench.run_specs import parse_draft
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

GREEDY = SamplingConfig(temperature=0.0)
SITES = ("verifier", "model-call", "both")
Plant = Callable[[int, int], AbstractContextManager]  # (every, offset) → the plant's context


def plants(spacings: list[float], site: str) -> dict[str, tuple[str, Plant]]:
    """The planted bugs by name, each with where it lives ("verifier" or "model-call")."""
    out: dict[str, tuple[str, Plant]] = {}
    if site in ("verifier", "both"):
        out["shift"] = ("verifier", lambda every, offset: late_verified_logits(every=every, offset=offset))
        for k in spacings:
            out[f"lower {k:g}"] = ("verifier", lambda e, o, k=k: lowered_verified_argmax(k, every=e, offset=o))
    if site in ("model-call", "both"):
        for k in spacings:
            out[f"call {k:g}"] = ("model-call", lambda e, o, k=k: lowered_multi_token_argmax(k, every=e, offset=o))
    return out


def interval(caught: int, touched: int) -> list[float] | None:
    """The Clopper–Pearson 95 % interval of the catch rate (None with nothing touched)."""
    if not touched:
        return None
    ci = binomtest(caught, touched).proportion_ci(confidence_level=0.95, method="exact")
    return [float(ci.low), float(ci.high)]


def caught(found: dict, limit: float) -> bool:
    """Whether a divergence at a position the plant touched is unexplained after the gate at `limit` spacings."""
    past_divergence_counts(found, None, limit)
    return any(d["class"] == "unexplained" and d["position"] in found["touched"] for d in found["divergences"])


def floor_limit(floors) -> float:
    """The gate's limit, in spacings, from the numerics floors of the examples done (margin_gate.ulp_limit)."""
    return ulp_limit(u for f in floors for u in f.get("floor_flip_ulps") or [])


def summarize(args, n_examples: int, rows: list[dict], names: list[str]) -> dict:
    """The table over the examples done so far: the gate's limit from the floors, then per plant the touched, caught
    and masked examples and the catch rate with its interval, and the clean run's counts."""
    limit = floor_limit(r["floor"] for r in rows)
    clean = [past_divergence_counts(r["clean"], None, limit) for r in rows]
    table = {}
    for name in names:
        runs = [r["plants"][name] for r in rows]
        own = floor_limit(p["floor"] for p in runs) if all(p.get("floor") for p in runs) else limit
        touched = [p for p in runs if p["touched"]]
        hit = [p for p in touched if caught(p, own)]
        table[name] = {
            "touched": len(touched),
            "caught": len(hit),
            "rate": len(hit) / len(touched) if touched else None,
            "ci95": interval(len(hit), len(touched)),
            "masked": sum(p["masked"] for p in touched),
            "untouched_flagged": sum(
                1 for p in runs if not p["touched"] and past_divergence_counts(p, None, own)["unexplained"]
            ),
            "gate_limit_ulps": own,
            "touched_gap_ulps": sorted(
                d["gap_ulps"] for p in touched for d in p["divergences"] if d["position"] in p["touched"]
            ),
        }
    totals = {k: sum(c[k] for c in clean) for k in ("positions", "divergences", "explained", "unexplained")}
    return {
        "target": args.target,
        "draft": args.draft,
        "task": args.task,
        "dtype": args.dtype,
        "examples": n_examples,
        "offset": args.offset,
        "examples_done": len(rows),
        "max_new_tokens": args.max_new_tokens,
        "gamma": args.gamma,
        "every": args.every,
        "gate_limit_ulps": limit,
        "clean": {**totals, "examples_with_unexplained": sum(c["unexplained"] > 0 for c in clean)},
        "plants": table,
        "load_average_end": os.getloadavg(),
        "records": rows,
    }


def print_table(result: dict) -> None:
    clean = result["clean"]
    print(
        f"clean: {result['examples_done']} examples, {clean['positions']} positions compared, {clean['divergences']} "
        f"divergences, {clean['explained']} explained, {clean['unexplained']} unexplained "
        f"(gate: gaps up to {result['gate_limit_ulps']:g} spacings are numerics)"
    )
    print(
        f"{'plant':<10} {'touched':>7} {'caught':>6} {'rate':>6}  {'95% CP':<10} {'masked':>6} {'false':>5} {'gate':>5}"
    )
    for name, row in result["plants"].items():
        rate = f"{row['rate']:.0%}" if row["rate"] is not None else "–"
        ci = f"{row['ci95'][0]:.0%}–{row['ci95'][1]:.0%}" if row["ci95"] else "–"
        print(
            f"{name:<10} {row['touched']:>7} {row['caught']:>6} {rate:>6}  {ci:<10} {row['masked']:>6} "
            f"{row['untouched_flagged']:>5} {row['gate_limit_ulps']:>5g}"
        )


RESUME_KEYS = ("target", "draft", "task", "dtype", "max_new_tokens", "gamma", "every", "offset")


def examples_after(spec, offset: int, limit: int) -> list:
    """`limit` examples of the task's seeded order after its first `offset` (a smaller limit's sample is a prefix of a
    larger one's, so examples 0..offset-1 are exactly what a run at --limit offset measured)."""
    return select_examples(spec, offset + limit, 0)[offset:]


def resumed(out: Path, args, names: list[str], n_examples: int) -> tuple[list[dict], dict[str, int]]:
    """The examples an interrupted run with the same settings and plants left in `out`, and each plant's count of
    verification steps so far (where its one-in-`every` falls next); nothing when `out` holds another run's."""
    try:
        before = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [], dict.fromkeys(names, 0)
    same = (
        all(before.get(k, 0 if k == "offset" else None) == getattr(args, k) for k in RESUME_KEYS)
        and before.get("examples") == n_examples
    )
    same = same and list(before.get("plants", {})) == names  # --limit changes the seeded sample: so must match
    if not same or set(before.get("plant_steps") or {}) != set(names):
        print(f"{out}: another run's results (settings differ, or written before resuming existed): starting afresh")
        return [], dict.fromkeys(names, 0)
    print(f"{out}: resuming after {len(before['records'])} examples")
    return before["records"], dict(before["plant_steps"])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--draft", default="prompt-lookup")
    ap.add_argument("--task", default="aclsum")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--limit", type=int, default=40)
    ap.add_argument(
        "--offset", type=int, default=0, help="skip this many examples of the task's seeded order (fresh examples)"
    )
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--every", type=int, default=50, help="one verification step (model-call: position) in this many")
    ap.add_argument(
        "--spacings", default="1,2,4,8,16,64", help="strengths of the lowered-argmax plants, comma-separated"
    )
    ap.add_argument("--site", default="verifier", choices=SITES, help="where the graded plants live")
    ap.add_argument("--out", default="results/bench-planted-bug.json")
    args = ap.parse_args(argv)
    try:
        spacings = [float(s) for s in args.spacings.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--spacings must be numbers separated by commas (got {args.spacings!r}); e.g. --spacings 1,2,4,8")
    if args.every < 1 or any(not k > 0 for k in spacings):
        ap.error("--every must be >= 1 and every --spacings value > 0; e.g. --every 50 --spacings 1,2,4,8,16,64")

    session = Session(LoadSpec(args.target, device=args.device, dtype=args.dtype))
    spec = load_task(args.task)
    prompts = [
        p.prompt_ids
        for p in prepare_examples(
            spec, examples_after(spec, args.offset, args.limit), session.target, args.max_new_tokens
        )
    ]
    model, start = session.target.model, session.target.decoder_start_id
    draft = parse_draft(args.draft)
    named = plants(spacings, args.site)

    def forced(prompt, reference) -> dict:
        run = decode_forced(
            CachedModel(model),
            session.proposer(draft, prompts),
            prompt,
            reference,
            gamma=args.gamma,
            decoder_start_id=start,
            max_new_tokens=args.max_new_tokens,
        )
        return asdict(run)

    def floor_of(prompt, ref) -> dict:
        return explain_example(model, prompt, {"token_ids": ref}, {"token_ids": ref}, args.gamma, None, start)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows, steps = resumed(out, args, list(named), len(prompts))
    result: dict = summarize(args, len(prompts), rows, list(named)) | {"plant_steps": steps} if rows else {}
    for i, prompt in enumerate(prompts):
        if i < len(rows):
            continue  # measured by an earlier, interrupted run of the same settings
        common = dict(max_new_tokens=args.max_new_tokens, sampling=GREEDY, generator=None, decoder_start_id=start)
        ref = decode_autoregressive(CachedModel(model), prompt, eos_ids=session.target.eos_ids, **common).token_ids
        free = decode_speculative(
            CachedModel(model),
            session.proposer(draft, prompts),
            prompt,
            gamma=args.gamma,
            eos_ids=session.target.eos_ids,
            **common,
        ).token_ids
        clean_first = first_divergence(ref, free)  # where a first-divergence check stops looking
        clean_run = forced(prompt, ref)
        row: dict = {"example": i, "floor": floor_of(prompt, ref), "clean_first_divergence": clean_first}
        row["clean"] = explain_forced(model, prompt, ref, clean_run, None, start)
        row["plants"] = {}
        for name, (site, plant) in named.items():
            floor = None
            if site == "verifier":
                with plant(args.every, (-steps[name]) % args.every) as seen:
                    run = forced(prompt, ref)
                steps[name] += seen.steps
                changed = seen.changed_before(len(ref))  # a planted verdict emitted another token than the clean one
                found = explain_forced(model, prompt, ref, run, None, start)
            else:  # everything that reads multi-token passes runs under the bug: the forced run, its replay, the floor
                with plant(args.every, 0):
                    run = forced(prompt, ref)
                    found = explain_forced(model, prompt, ref, run, None, start)
                    floor = floor_of(prompt, ref)
                keyed = [j for j in range(1, len(ref)) if (len(prompt) + j) % args.every == 0]  # decoder-only targets
                changed = [j for j in keyed if run["verified"][j] != clean_run["verified"][j]]
                changed = [j for j in changed if clean_run["verified"][j] == ref[j]]
            touched = [j for j in changed if run["verified"][j] != ref[j]]  # left the baseline
            row["plants"][name] = {
                **found,
                "touched": touched,
                "verdict_changed": changed,
                "masked": bool(touched) and clean_first is not None and clean_first < touched[0],
                "floor": floor,
            }
        rows.append(row)
        result = summarize(args, len(prompts), rows, list(named)) | {"plant_steps": steps}
        atomic_write_text(
            out, json.dumps(result, indent=2, default=float) + "\n"
        )  # a run stopped early keeps its tally
        print(
            f"example {i + 1}/{len(prompts)}: clean forced divergences {len(row['clean']['divergences'])}; touched: "
            + (", ".join(n for n, r in row["plants"].items() if r["touched"]) or "none"),
            flush=True,
        )
    print_table(result)
    return result


if __name__ == "__main__":
    main()

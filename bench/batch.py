"""Batches: our batched baseline against HF generate() on the same left-padded batch, and ragged vs
min-advance speculative decoding against the batched baseline, per batch size.

Timing is measured here, never asserted in tests. Greedy throughout, so every engine must emit
the batched baseline's tokens (mismatches are counted and printed; they should be 0).
  (a) per B: our batched baseline vs HF `generate()` on the same left-padded batch (attention
      mask, pad id, EOS ids alike): token-identical rows and the tokens/s ratio   goal ≥ 1.0 at B = 8
  (b) per B and draft: tokens/s of the batched baseline, ragged and min (total over the batch's
      useful tokens ÷ the batches' wall time), speedup over the batched baseline, acceptance
      (Σ accepted ÷ Σ drafted, pooled over rows), tokens per target pass, and the process's peak
      RSS after the row (ru_maxrss: a high-water mark, so it only grows down the table).
The examples, in the task's seeded order, are grouped into batches of B (the last one shorter);
a B larger than the examples is clamped to their number, with a note. Each engine is warmed up
on one batch first. Engines alternate order batch by batch (ABBA) so machine drift hits all.
Usage: python bench/batch.py [--target smollm2-135m] [--drafts prompt-lookup,distilled] [--gamma 3]
       [--task ding-de-en] [--limit 16] [--batch-sizes 1,2,4,8,16] [--max-new-tokens 64] [--out results/bench]
Quick check on a tiny model: python bench/batch.py --target <tiny dir> --drafts prompt-lookup --limit 2
       --batch-sizes 1,2 --max-new-tokens 8
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import torch

from specbench.config import LoadSpec, SamplingConfig
from specbench.decoding.autoregressive import clip_at_stop
from specbench.decoding.batched import decode_autoregressive_batch, decode_speculative_batch
from specbench.decoding.batched.cache import left_pad
from specbench.engines.torch.session import TorchSession as Session
from specbench.errors import SpecbenchError
from specbench.files import atomic_write_json
from specbench.measure.results.provenance import environment_info
from specbench.measure.run.arms import prepare_examples
from specbench.measure.stats.metric_units import json_safe
from specbench.run_specs import parse_draft
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

GREEDY = SamplingConfig()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--drafts", default="prompt-lookup,distilled", help="comma-separated --draft specs")
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--task", default="ding-de-en")
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("--batch-sizes", default="1,2,4,8,16")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", default="results/bench")
    args = ap.parse_args(argv)
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    if min(args.batch_sizes) < 1:
        raise SpecbenchError(f"batch sizes must be >= 1 (got {min(args.batch_sizes)})")
    return args


def peak_rss_mib() -> float:
    """The process's peak resident set so far, MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def batches(prompts: list[list[int]], size: int) -> list[list[list[int]]]:
    return [prompts[i : i + size] for i in range(0, len(prompts), size)]


def hf_batch(
    model, prompts: list[list[int]], max_new: int, eos_ids: frozenset[int], pad_id: int
) -> tuple[list[list[int]], float]:
    """HF generate() greedy on the left-padded batch → (each row's tokens cut at its EOS and budget, seconds)."""
    ids, valid = left_pad(prompts, pad_id, model.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=valid.long(),
            max_new_tokens=max_new,
            min_new_tokens=1,
            do_sample=False,
            eos_token_id=sorted(eos_ids),
            pad_token_id=pad_id,
        )
    secs = time.perf_counter() - t0
    return [clip_at_stop(row, eos_ids, max_new)[0] for row in out[:, ids.shape[1] :].tolist()], secs


def run_engine(name: str, session: Session, args, group: list[list[int]], pad_id: int) -> tuple[list, float]:
    """One batch through one engine → (per-row token lists or DecodeResults, wall seconds)."""
    t = session.target
    if name == "hf":
        return hf_batch(t.model, group, args.max_new_tokens, t.eos_ids, pad_id)
    t0 = time.perf_counter()
    if name == "base":
        res = decode_autoregressive_batch(
            t.model, group, max_new_tokens=args.max_new_tokens, sampling=GREEDY, eos_ids=t.eos_ids, pad_id=pad_id
        )
    else:
        draft, policy = name.split("|")
        res = decode_speculative_batch(
            t.model,
            session.proposer(parse_draft(draft)),
            group,
            gamma=args.gamma,
            policy=policy,
            max_new_tokens=args.max_new_tokens,
            sampling=GREEDY,
            eos_ids=t.eos_ids,
            pad_id=pad_id,
        )
    return res, time.perf_counter() - t0


def tokens_of(result) -> list[int]:
    return result if isinstance(result, list) else result.token_ids


def measure_size(session: Session, args, prompts: list[list[int]], size: int, engines: list[str], pad_id: int) -> dict:
    """Every batch of this size through every engine, interleaved → per-engine totals and mismatches vs base."""
    totals = {
        e: {"tokens": 0, "seconds": 0.0, "accepted": 0, "drafted": 0, "passes": 0, "mismatches": 0} for e in engines
    }
    for i, group in enumerate(batches(prompts, size)):
        order = engines if i % 2 == 0 else list(reversed(engines))
        done = {e: run_engine(e, session, args, group, pad_id) for e in order}
        base = [tokens_of(r) for r in done["base"][0]]
        for e, (res, secs) in done.items():
            tot = totals[e]
            tot["seconds"] += secs
            tot["tokens"] += sum(len(tokens_of(r)) for r in res)
            tot["mismatches"] += sum(tokens_of(r) != b for r, b in zip(res, base))
            if e not in ("hf", "base"):
                tot["accepted"] += sum(r.accepted for r in res)
                tot["drafted"] += sum(r.drafted for r in res)
                tot["passes"] += len(res[0].batch_pass_rows)
    for tot in totals.values():
        tot["tokens_per_s"] = tot["tokens"] / tot["seconds"] if tot["seconds"] else float("nan")
    totals["peak_rss_mib"] = peak_rss_mib()
    return totals


def print_size(size: int, totals: dict, drafts: list[str]) -> None:
    base, hf = totals["base"], totals["hf"]
    print(
        f"B={size:<3d} baseline {base['tokens_per_s']:7.1f} tok/s | HF generate {hf['tokens_per_s']:7.1f} tok/s | "
        f"ours ÷ HF {base['tokens_per_s'] / hf['tokens_per_s']:.3f} | rows differing from HF {hf['mismatches']} | "
        f"peak RSS {totals['peak_rss_mib']:.0f} MiB"
    )
    for draft in drafts:
        for policy in ("ragged", "min"):
            t = totals[f"{draft}|{policy}"]
            alpha = t["accepted"] / t["drafted"] if t["drafted"] else float("nan")
            per_pass = t["tokens"] / t["passes"] if t["passes"] else float("nan")
            print(
                f"      {draft:>22s} {policy:6s} {t['tokens_per_s']:7.1f} tok/s  speedup "
                f"{t['tokens_per_s'] / base['tokens_per_s']:.3f}  acceptance {alpha:.3f}  tokens/pass {per_pass:5.2f}  "
                f"mismatches {t['mismatches']}"
            )


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    session = Session(LoadSpec(args.target, device=args.device, dtype=args.dtype))
    spec = load_task(args.task)
    prompts = [
        p.prompt_ids
        for p in prepare_examples(spec, select_examples(spec, args.limit, 0), session.target, args.max_new_tokens)
    ]
    tok = session.target.tokenizer
    pad_id = (
        tok.pad_token_id if getattr(tok, "pad_token_id", None) is not None else min(session.target.eos_ids, default=0)
    )
    drafts = [d for d in args.drafts.split(",") if d]
    engines = ["base", "hf"] + [f"{d}|{p}" for d in drafts for p in ("ragged", "min")]
    for engine in engines:  # warm-up, untimed
        run_engine(engine, session, args, prompts[:2], pad_id)
    print(
        f"\n{args.target}, drafts {', '.join(drafts)}, γ={args.gamma}, task {args.task}, {len(prompts)} prompts, "
        f"max_new_tokens {args.max_new_tokens}, greedy, {session.target.device}, "
        f"torch threads {torch.get_num_threads()}"
    )
    table = {}
    for size in args.batch_sizes:
        if size > len(prompts):
            print(f"note: batch size {size} > {len(prompts)} examples: clamped to {len(prompts)}")
            size = len(prompts)
        table[size] = measure_size(session, args, prompts, size, engines, pad_id)
        print_size(size, table[size], drafts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"batch-{time.strftime('%Y%m%d-%H%M%S')}.json"
    atomic_write_json(path, json_safe({"args": vars(args), "by_batch_size": table, **environment_info()}))
    print(f"written {path}")
    return {"by_batch_size": table, "path": str(path)}


if __name__ == "__main__":
    try:
        main()
    except SpecbenchError as exc:  # bad flags: one line and exit 1, as the CLI does
        raise SystemExit(f"error: {exc}") from None

"""One-shot GPU check: run it once on a machine with an NVIDIA GPU, end to end.

    python bench/gpu.py [--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b] [--task ding-de-en]

On CUDA it runs, in bf16 with CUDA-synchronized timing: (1) `bench.py` under each of our
backends, eager (dynamic KV cache) and compiled (static KV cache + torch.compile with CUDA
graphs, decoding/backend.py): our baseline against HF generate(), our speculative decoding
against HF assisted generation with the same draft and γ, measured/predicted speedup, loop
overhead, and the compiled/eager tokens/s ratio of each of our engines; (2) greedy identity of
speculative decoding against the baseline and HF generate() in bf16, with the mismatch rate
and the logit margin at every divergence (verifying γ+1 tokens in one pass can flip a near-tie).
Without a GPU it runs the same code on the CPU in float32 with a small workload, under the
eager and static backends (compilation on a CPU takes minutes; tests/test_backend.py covers it
on a tiny model), and says which GPU parts it skipped, so the script cannot rot untested
(tests/test_bench.py runs it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import bench  # the sibling script: Python puts this file's folder first on sys.path when it runs
from specbench.config import LoadSpec
from specbench.engines.torch.session import TorchSession as Session
from specbench.evidence.greedy_identity import greedy_checks
from specbench.measure.run.arms import prepare_examples
from specbench.run_specs import parse_draft
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None, help="default: smollm2-135m")
    ap.add_argument("--draft", default=None, help="default: prompt-lookup")
    ap.add_argument("--task", default="ding-de-en")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--out", default="results/bench-gpu")
    args = ap.parse_args(argv)

    cuda = torch.cuda.is_available()
    target = args.target or "smollm2-135m"
    draft = args.draft or "prompt-lookup"
    if cuda:
        device, dtype, limit, max_new, repeats = "cuda", "bfloat16", args.limit or 16, args.max_new_tokens or 128, 2
        print(f"CUDA GPU: {torch.cuda.get_device_name(0)}; bf16, CUDA-synchronized timing")
    else:
        device, dtype, limit, max_new, repeats = "cpu", "float32", args.limit or 2, args.max_new_tokens or 16, 1
        print(
            "no CUDA GPU: running the CPU path in float32 on a small workload; "
            "skipped: bf16, CUDA timing, GPU-sized workload"
        )
        print("skipped: the compiled backend (CUDA graphs); the static backend stands in for it")
    results = {"device": device, "dtype": dtype, "target": target, "draft": draft, "bench": {}}
    backends = ("eager", "compiled") if cuda else ("eager", "static")
    for backend in backends:
        print(f"\n=== backend {backend} ===")
        results["bench"][backend] = bench.main(
            [
                "--target",
                target,
                "--draft",
                draft,
                "--gamma",
                str(args.gamma),
                "--task",
                args.task,
                "--limit",
                str(limit),
                "--max-new-tokens",
                str(max_new),
                "--repeats",
                str(repeats),
                "--device",
                device,
                "--dtype",
                dtype,
                "--backend",
                backend,
                "--out",
                args.out,
            ]
        )
    fast, eager = (results["bench"][b]["tokens_per_s"] for b in (backends[1], "eager"))
    results["backend_ratio"] = {engine: fast[engine] / eager[engine] for engine in ("ours_base", "ours_spec")}
    print(
        f"\n{backends[1]} ÷ eager tokens/s: baseline {results['backend_ratio']['ours_base']:.3f}, "
        f"speculative {results['backend_ratio']['ours_spec']:.3f}"
    )

    session = Session(LoadSpec(target, device=device, dtype=dtype))
    spec = load_task(args.task)
    prepared = prepare_examples(spec, select_examples(spec, limit, 0), session.target, max_new)
    corpus = [p.prompt_ids for p in prepared]
    checks = greedy_checks(
        session.target.model,
        lambda: session.proposer(parse_draft(draft), corpus),
        corpus,
        gammas=(1, args.gamma),
        max_new_tokens=max_new,
        eos_ids=session.target.eos_ids,
        decoder_start_id=session.target.decoder_start_id,
    )
    print(f"greedy identity in {dtype} over {len(corpus)} prompts × {max_new} tokens:")
    for c in checks:
        print(f"  {c.name:40s} {'pass' if c.passed else 'FAIL'}  {c.detail}")
    results["greedy_checks"] = [c.to_dict() for c in checks]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu-check.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"written {path}")
    return results


if __name__ == "__main__":
    main()

"""`make bench-vllm-overhead`: what does driving vLLM through specbench cost? (issue 39: within 3 % of a bare script)

Two decoders of the same prompts on the same vLLM build, model folder, dtype, mode and CPUs, one request at a time:
  specbench   `specbench run --engine vllm`'s path: the session's worker (engines/vllm/), its step loop with each
              token's arrival time; the time it reports (first token + the rest, the figure a run records), and the
              wall time around the request on specbench's side of the pipe (JSON both ways included)
  bare        bench/vllm_bare.py: `LLM(...)` and `llm.generate([prompt])` timed around the call, as a user's script
for plain decoding and for vLLM's speculative method of --draft at γ. Both processes stay alive; they run in blocks
of all prompts, alternated A B B A (--blocks), after a warm-up each, never at once. Per prompt the median over blocks;
the measure is the geometric mean over prompts of time(specbench) ÷ time(bare), with a t interval on the log ratios
(scipy.stats.t; n = prompts). Token identity of the two per prompt is counted beside it. Run it with nothing beside it.
Usage: python bench/vllm_overhead.py [--target smollm2-135m] [--task aclsum] [--draft prompt-lookup] [--gamma 4]
       [--limit 10] [--max-new-tokens 64] [--blocks 4] [--dtype bfloat16] [--eager] [--out results/bench-vllm-overhead]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specbench.config import LoadSpec, SamplingConfig
from specbench.engines.vllm import vllm_method
from specbench.engines.vllm.client import vllm_python, worker_env
from specbench.engines.vllm.session import KV_SPACE_GIB, PLAIN, VllmSession
from specbench.engines.vllm.worker import speculative_config
from specbench.errors import SpecbenchError
from specbench.files import atomic_write_json
from specbench.measure.results.provenance import environment_info
from specbench.measure.run.arms import prepare_examples
from specbench.measure.stats.statistics import geometric_mean
from specbench.run_specs import parse_draft
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

BARE = Path(__file__).with_name("vllm_bare.py")
GREEDY = SamplingConfig(temperature=0.0)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--task", default="aclsum")
    p.add_argument("--draft", default="prompt-lookup")
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--blocks", type=int, default=4, help="blocks of all prompts per decoder, alternated A B B A")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--eager", action="store_true", help="enforce_eager (default: vLLM's torch.compile)")
    p.add_argument("--out", default="results/bench-vllm-overhead")
    return p.parse_args(argv)


class Bare:
    """bench/vllm_bare.py in .venv-vllm, loaded once; `run()` decodes every prompt once → (seconds, tokens)."""

    def __init__(self, settings: dict):
        fd, self.settings_path = tempfile.mkstemp(prefix="specbench-bare-", suffix=".json")
        with open(fd, "w", encoding="utf-8") as f:
            json.dump(settings, f)
        self.proc = subprocess.Popen(
            [str(vllm_python()), str(BARE), self.settings_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=worker_env(KV_SPACE_GIB, gpu=False),
            text=True,
            bufsize=1,
        )
        self.read()  # {"ready": true} after its load and warm-up

    def read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SpecbenchError(f"bench/vllm_bare.py exited (code {self.proc.poll()})")
        return json.loads(line)

    def run(self) -> tuple[list[float], list[list[int]]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        answer = self.read()
        return answer["seconds"], answer["tokens"]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        Path(self.settings_path).unlink(missing_ok=True)


def specbench_block(session: VllmSession, key: str, prompts, max_new: int) -> dict[str, list]:
    """Every prompt once through the session: the reported seconds, the wall seconds around the request, tokens."""
    reported, wall, tokens = [], [], []
    for ids in prompts:
        t0 = time.perf_counter()
        r = session.decode(key, GREEDY, ids, 0, max_new)
        wall.append(time.perf_counter() - t0)
        reported.append(r.prefill_s + r.decode_s)
        tokens.append(r.token_ids)
    return {"reported": reported, "wall": wall, "tokens": tokens}


def log_ratio_interval(num: list[float], den: list[float]) -> dict:
    """Geometric mean of num/den over prompts and its 95 % Student t interval on the logs (statistics.geometric_mean;
    n = prompts)."""
    est = geometric_mean(np.log(np.asarray(num) / np.asarray(den)), min_n=2)
    return {"ratio": est.value, "ci95": [est.low, est.high], "n": est.n}


def measure(session: VllmSession, key: str, bare: Bare, prompts, max_new: int, blocks: int) -> dict:
    """A B B A blocks of specbench and bare; per prompt the median over blocks; the two ratios and token identity."""
    ours: list[dict] = []
    theirs: list[tuple[list[float], list[list[int]]]] = []
    for b in range(blocks):
        for side in ("specbench", "bare") if b % 4 in (0, 3) else ("bare", "specbench"):
            if side == "specbench":
                ours.append(specbench_block(session, key, prompts, max_new))
            else:
                theirs.append(bare.run())
        print(f"  block {b + 1}/{blocks} done", file=sys.stderr, flush=True)
    per_prompt = range(len(prompts))
    reported = [statistics.median(o["reported"][i] for o in ours) for i in per_prompt]
    wall = [statistics.median(o["wall"][i] for o in ours) for i in per_prompt]
    bare_s = [statistics.median(t[0][i] for t in theirs) for i in per_prompt]
    same = sum(ours[0]["tokens"][i] == theirs[0][1][i] for i in per_prompt)
    n_tokens = sum(len(t) for t in ours[0]["tokens"])
    return {
        "reported_vs_bare": log_ratio_interval(reported, bare_s),
        "wall_vs_bare": log_ratio_interval(wall, bare_s),
        "tokens_per_s": {"specbench": n_tokens / sum(reported), "bare": n_tokens / sum(bare_s)},
        "identical": same,
        "per_prompt": {"reported": reported, "wall": wall, "bare": bare_s},
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    spec = load_task(args.task)
    mode = "eager" if args.eager else "compiled"
    session = VllmSession(LoadSpec(args.target, device="cpu", dtype=args.dtype, backend=mode))
    examples = select_examples(spec, args.limit, 0)
    prompts = [p.prompt_ids for p in prepare_examples(spec, examples, session.target, args.max_new_tokens)]
    method = vllm_method(parse_draft(args.draft), args.gamma, session.model_folder)
    key = session.speculative_key(session.proposer(parse_draft(args.draft), prompts), args.gamma)
    base = {
        "model": session.folder,
        "dtype": args.dtype,
        "enforce_eager": args.eager,
        "prompts": prompts,
        "max_new_tokens": args.max_new_tokens,
        "stop_ids": sorted(session.target.eos_ids),
    }
    results = {}
    for arm, engine_key, config in (("plain", PLAIN, None), (method["name"], key, speculative_config(method))):
        print(f"loading the bare script ({arm})", file=sys.stderr, flush=True)
        bare = Bare(base | {"speculative_config": config})
        session.decode(engine_key, GREEDY, prompts[0], 0, args.max_new_tokens)  # warm-up
        try:
            results[arm] = measure(session, engine_key, bare, prompts, args.max_new_tokens, args.blocks)
        finally:
            bare.close()
    info = session.engine_info()
    session.close()
    print(
        f"\n{args.target} on vLLM {info['version']} ({info['mode']}, {args.dtype}, OpenMP CPUs "
        f"{info['omp_threads_bind']}), {args.task} × {len(prompts)} prompts × {args.blocks} blocks, "
        f"{args.max_new_tokens} new tokens, greedy; {info['cpu']}"
    )
    print(
        f"\n{'arm':<10}{'specbench tok/s':>16}{'bare tok/s':>12}  {'reported ÷ bare (95% CI)':<28}"
        f"{'wall ÷ bare (95% CI)':<28}{'same':>6}  goal"
    )
    for arm, r in results.items():
        rep, wall = r["reported_vs_bare"], r["wall_vs_bare"]
        print(
            f"{arm:<10}{r['tokens_per_s']['specbench']:>16.1f}{r['tokens_per_s']['bare']:>12.1f}  "
            f"{rep['ratio']:.3f} [{rep['ci95'][0]:.3f}, {rep['ci95'][1]:.3f}]{'':<8}"
            f"{wall['ratio']:.3f} [{wall['ci95'][0]:.3f}, {wall['ci95'][1]:.3f}]{'':<8}"
            f"{r['identical']:>3}/{len(prompts)}  ≤ 1.03"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"vllm-overhead-{time.strftime('%Y%m%d-%H%M%S')}.json"
    result = {"args": vars(args), "engine": info, "arms": results, **environment_info()}
    atomic_write_json(path, result)
    print(f"written {path}")
    return result


if __name__ == "__main__":
    try:
        main()
    except SpecbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)

"""Where a plain decode step of specbench's torch engine spends its time (issue 42: torch plain vs vLLM's CPU plain).

One greedy plain decode of a task prompt under torch.profiler, after a warm-up, per backend (eager, compiled) and
dtype: the step's wall milliseconds (decode seconds ÷ tokens after the first), and the profiler's CPU self time split
into the matrix products (aten::mm/addmm/linear and oneDNN's packed linear), attention (scaled_dot_product_attention
and its kernels), the rest of aten's operators (norms, rotary, elementwise, copies, cache updates), and what no
operator accounts for: wall time minus all operator self time on the main thread (Python, transformers' module
calls, dispatch). Compare the step's milliseconds with vLLM's decode-only milliseconds per token from
`make bench-engines` (decode only column) on the same threads. Timing: run it with nothing beside it.
Usage: python bench/profile_plain.py [--target smollm2-135m] [--task aclsum] [--dtype bfloat16] [--threads 0]
       [--backends eager,compiled] [--max-new-tokens 64] [--top 12]
"""

from __future__ import annotations

import argparse
import os

import torch

from specbench.config import LoadSpec, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.engines.torch.session import TorchSession
from specbench.measure.run.arms import prepare_examples
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

GREEDY = SamplingConfig(temperature=0.0)
GEMM = ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::bmm", "mkldnn", "onednn", "_linear_pointwise")
ATTENTION = ("scaled_dot_product", "flash_attention", "sdpa", "attention")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--task", default="aclsum")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: every core this process may use)")
    p.add_argument("--backends", default="eager,compiled")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--top", type=int, default=12, help="operators listed by self time")
    return p.parse_args(argv)


def bucket(name: str) -> str:
    low = name.lower()
    if any(k in low for k in GEMM):
        return "matrix products"
    if any(k in low for k in ATTENTION):
        return "attention"
    return "other operators"


def profile_backend(args, backend: str, prompt: list[int]) -> None:
    session = TorchSession(LoadSpec(args.target, device="cpu", dtype=args.dtype, backend=backend))
    lm, eos = session.target_lm(), session.target.eos_ids

    def decode():
        return decode_autoregressive(
            lm, prompt, max_new_tokens=args.max_new_tokens, sampling=GREEDY, generator=None, eos_ids=eos
        )

    decode()
    decode()  # warm-up: the compiled backend compiles its decode shape here
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = decode()
    steps = max(1, len(result.token_ids) - 1)
    step_ms = 1e3 * result.decode_s / steps
    events = prof.key_averages()
    totals: dict[str, float] = {}
    for e in events:
        if e.key.startswith(("aten::", "mkldnn", "onednn", "torch_ops", "inductor", "cpp_fused")) or "graph" in e.key:
            totals[bucket(e.key)] = totals.get(bucket(e.key), 0.0) + e.self_cpu_time_total / 1e3
    ops_ms = sum(totals.values())
    wall_ms = 1e3 * (result.prefill_s + result.decode_s)
    print(
        f"\n{args.target} {args.dtype}, backend {backend}, {torch.get_num_threads()} threads: {steps} decode steps, "
        f"{step_ms:.2f} ms a step ({1e3 / step_ms:.1f} tok/s decode only)"
    )
    print(f"  of {wall_ms:.0f} ms wall (prefill + decode, under the profiler, which adds its own cost):")
    for name, ms in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"    {name:<18}{ms:>9.1f} ms  {100 * ms / wall_ms:5.1f} %")
    print(
        f"    {'outside operators':<18}{wall_ms - ops_ms:>9.1f} ms  {100 * (wall_ms - ops_ms) / wall_ms:5.1f} %  "
        "(Python, module calls, dispatch; operator self times on other threads make this a lower bound)"
    )
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    spec = load_task(args.task)
    probe = TorchSession(LoadSpec(args.target, device="cpu", dtype=args.dtype))
    prompt = prepare_examples(spec, select_examples(spec, 1, 0), probe.target, args.max_new_tokens)[0].prompt_ids
    del probe
    for backend in args.backends.split(","):
        profile_backend(args, backend, prompt)


if __name__ == "__main__":
    main()

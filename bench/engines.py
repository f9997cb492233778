"""`make bench-engines`: does a speedup measured in specbench's torch engine carry to llama.cpp? (issue 28)

One GGUF (the preset's, quantized as shipped), one set of task prompts, one draft and γ, greedy. Decoders:
  torch-fp32 / torch-bf16   specbench's loop on the GGUF de-quantized into transformers (plain and speculative),
                            eager; torch-bf16-compiled the same on --backend compiled (--torch-rows)
  llama-cpp                 specbench's loop on llama.cpp's kernels (engines/llama_cpp/; plain and speculative)
  llama-cpp-python          the binding's own Llama.generate: plain, and its own speculative loop with
                            its prompt-lookup draft (LlamaPromptLookupDecoding, num_pred_tokens=γ) when the
                            draft is prompt-lookup, or with a draft GGUF (a path or a preset shipping one)
                            behind its draft hook. The binding ships no draft-model class: its speculative
                            decoding takes any `LlamaDraftModel` (context ids → draft ids) and verifies by
                            token match, so the draft GGUF runs through decoding/llama_draft.GgufDraftHook
                            (γ greedy tokens from its own llama.cpp context), the binding's loop unchanged.
                            With a draft GGUF, specbench's loops draft with it in llama.cpp as well.
  vllm-bf16                 vLLM (its CPU build, in .venv-vllm; skipped with one line where it is not built):
                            plain, and its own speculative method for the draft (prompt-lookup → ngram, a draft
                            model → draft_model) at the same γ, in its deployed mode (torch.compile; --vllm-eager
                            for enforce_eager), on the preset's safetensors folder (the weights the torch rows run),
                            its OpenMP threads bound to the same number of CPUs as the other engines.
Every decoder runs on every prompt, interleaved prompt by prompt in an order reversed on every repeat
(A B … B A), after one warm-up each; a decode's time is prefill + decode, its median over the repeats.
The primary measure of each pair is the geometric mean over prompts of the per-prompt time ratio, with a
BCa bootstrap 95 % interval over prompts (scipy.stats.bootstrap; at n < 10 prompts its coverage is not
checked here: read the interval as rough). Token identity of each pair is counted beside it. The pass-cost
curves t(k)/t(1) of every engine (calibration.calibrate, the run's own calibration) go on one figure.
Goals (issue 28): specbench plain on llama.cpp within 5 % of the binding's generate (ratio ≥ 0.95);
specbench speculative on llama.cpp ≥ 1.3× its plain decoding, and ≥ the binding's prompt lookup. Issue 39/42: the
fastest plain decoder measured here is named, and the best speculative decoder is priced against it (not against
its own engine's plain decoding alone); torch plain bf16 ≥ 0.8× vLLM plain on the same threads.
Timing is measured here, never asserted in tests; run it with nothing heavy beside it.
Usage: python bench/engines.py [--target smollm2-135m] [--task aclsum] [--draft prompt-lookup] [--gamma 4]
       [--limit 6] [--max-new-tokens 64] [--repeats 2] [--threads 0] [--no-torch] [--no-vllm] [--vllm-eager]
       [--torch-rows float32:eager,bfloat16:eager,bfloat16:compiled]
       [--out results/bench-engines]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import llama_peers  # noqa: E402,I001  (bench/: llama-cpp-python's own decoders, run beside ours)
import numpy as np

from specbench.config import LoadSpec, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import DecodeResult, model_caches
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.speculative import decode_speculative
from specbench.engines.llama_cpp import backend as lc
from specbench.engines.llama_cpp.draft import GgufDraftHook, load_gguf_draft
from specbench.engines.llama_cpp.session import LlamaSession, gguf_of, is_gguf_spec
from specbench.engines.torch.session import TorchSession as Session
from specbench.errors import SpecbenchError
from specbench.files import atomic_write_json
from specbench.measure.auto import calibration as cal
from specbench.measure.results.provenance import environment_info
from specbench.measure.run.arms import prepare_examples
from specbench.measure.stats.metric_units import json_safe
from specbench.run_specs import parse_draft
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

GREEDY = SamplingConfig(temperature=0.0)
K_MAX = 8  # the calibration curves' longest pass


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--task", default="aclsum")
    p.add_argument("--draft", default="prompt-lookup")
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--limit", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument(
        "--threads", type=int, default=0, help="llama.cpp's and torch's threads (0: every core this process may use)"
    )
    p.add_argument("--no-torch", action="store_true", help="llama.cpp only (skip the torch fp32/bf16 engines)")
    p.add_argument(
        "--torch-rows",
        default=DEFAULT_TORCH_ROWS,
        help="the torch engine's rows as dtype:backend pairs (compiled: frozen, prepacked weights and a C++ wrapper; "
        "its first decodes compile each step shape, minutes on 2 cores, outside the timing)",
    )
    p.add_argument("--no-vllm", action="store_true", help="skip vLLM (skipped anyway where .venv-vllm is not built)")
    p.add_argument("--vllm-eager", action="store_true", help="vLLM with enforce_eager (default: its torch.compile)")
    p.add_argument("--out", default="results/bench-engines")
    args = p.parse_args(argv)
    try:
        torch_rows(args.torch_rows)  # a bad value is a usage error (exit 2, one line), before anything loads
    except SpecbenchError as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")
    return args


Decoder = Callable[[list[int]], DecodeResult]


def loop_decoders(name: str, lm, proposer, eos: frozenset[int], gamma: int, max_new: int) -> dict[str, Decoder]:
    """specbench's plain and speculative loops over one engine's model wrapper (CachedModel or LlamaCppModel)."""

    def plain(ids):
        return decode_autoregressive(lm, ids, max_new_tokens=max_new, sampling=GREEDY, generator=None, eos_ids=eos)

    def spec(ids):
        return decode_speculative(
            lm, proposer, ids, gamma=gamma, max_new_tokens=max_new, sampling=GREEDY, generator=None, eos_ids=eos
        )

    return {f"{name} plain": plain, f"{name} spec": spec}


def peer_decoders(path: str, n_ctx: int, threads: int, draft: str, gamma: int, eos, max_new: int) -> dict:
    """llama-cpp-python's own generate: plain, and its own speculative loop at the same γ with its prompt lookup
    (prompt-lookup drafts) or a draft GGUF behind its draft hook (a .gguf path or a preset shipping one)."""
    plain_llm = lc.load_llama(path, n_ctx, threads)
    out = {
        "llama-cpp-python plain": lambda ids: llama_peers.peer_generate(
            plain_llm, ids, max_new_tokens=max_new, eos_ids=eos
        )
    }
    hook = None
    if draft == "prompt-lookup":
        hook = llama_peers.prompt_lookup_peer(gamma)
    elif is_gguf_spec(draft):
        vocab = plain_llm.n_vocab()
        draft_lm = load_gguf_draft(str(gguf_of(draft)), n_ctx=n_ctx, threads=threads, target_vocab=vocab)
        hook = llama_peers.CountingDraft(GgufDraftHook(draft_lm, gamma), gamma)
    if hook is not None:
        pl_llm = lc.load_llama(path, n_ctx, threads, draft_model=hook)
        out["llama-cpp-python spec"] = lambda ids: llama_peers.peer_generate(
            pl_llm, ids, max_new_tokens=max_new, eos_ids=eos, draft=hook
        )
    return out


def vllm_threads_bind(threads: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `threads` compute threads: the last `threads` of the CPUs this process may use,
    so that where fewer than all are bound the first stays free for vLLM's scheduler process, as vLLM's own default
    (auto: every CPU but one reserved) leaves it. Binding the thread beside the scheduler cost vLLM ~40 % of its
    one-thread speed here (docs/benchmarks.md)."""
    cpus = sorted(os.sched_getaffinity(0))
    return ",".join(str(c) for c in cpus[-threads:])


def vllm_decoders(target: str, draft_text: str, prompts, gamma: int, max_new: int, threads: int, eager: bool):
    """vLLM's plain decoding and its own speculative method for the draft, each one request at a time through
    specbench's vLLM session (the worker's timing: perf_counter around vLLM's step loop); → (decoders, session,
    settings). None where .venv-vllm is not built (one line says so)."""
    from specbench.engines.vllm.client import vllm_python
    from specbench.engines.vllm.session import PLAIN, VllmSession

    try:
        vllm_python()
    except SpecbenchError as exc:
        print(f"  vLLM skipped: {exc}", file=sys.stderr, flush=True)
        return None
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", vllm_threads_bind(threads))
    session = VllmSession(LoadSpec(target, device="cpu", dtype="bfloat16", backend="eager" if eager else "compiled"))

    def run(key):
        return lambda ids: session.decode(key, GREEDY, ids, 0, max_new)

    decoders = {"vllm-bf16 plain": run(PLAIN)}
    try:
        key = session.speculative_key(session.proposer(parse_draft(draft_text), prompts), gamma)
        decoders["vllm-bf16 spec"] = run(key)
    except SpecbenchError as exc:  # a draft vLLM has no method for: its plain row still counts
        print(f"  vLLM speculative skipped: {exc}", file=sys.stderr, flush=True)
    return decoders, session


def interleaved(decoders: dict[str, Decoder], prompts: list[list[int]], repeats: int) -> dict[str, list[dict]]:
    """Each decoder on each prompt, the decoder order reversed on every repeat and every other prompt;
    → decoder → per prompt {tokens, seconds (median over repeats), n}."""
    names = list(decoders)
    runs: dict[str, list[list[DecodeResult]]] = {n: [[] for _ in prompts] for n in names}
    for i, ids in enumerate(prompts):
        for r in range(repeats):
            order = names if (i + r) % 2 == 0 else names[::-1]
            for n in order:
                runs[n][i].append(decoders[n](ids))
        print(f"  prompt {i + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
    return {
        n: [
            {
                "tokens": rs[0].token_ids,
                "seconds": statistics.median(r.prefill_s + r.decode_s for r in rs),
                "decode_s": statistics.median(r.decode_s for r in rs),
                "target_calls": rs[0].target_calls,
                "drafted": rs[0].drafted,
                "accepted": rs[0].accepted,
            }
            for rs in per_prompt
        ]
        for n, per_prompt in runs.items()
    }


def ratio_with_interval(slow: list[dict], fast: list[dict], key: str = "seconds") -> dict:
    """Geometric mean over prompts of time(slow)/time(fast) (`key`: seconds end to end, or decode_s after the first
    token), its BCa 95 % interval over prompts, and how many prompts gave identical tokens."""
    from scipy import stats

    logs = np.array([math.log(a[key] / b[key]) for a, b in zip(slow, fast)])
    lo = hi = float("nan")
    if len(logs) >= 3 and np.ptp(logs) > 0:
        ci = stats.bootstrap((logs,), np.mean, method="BCa", confidence_level=0.95, random_state=0).confidence_interval
        lo, hi = math.exp(ci.low), math.exp(ci.high)
    same = sum(a["tokens"] == b["tokens"] for a, b in zip(slow, fast))
    return {"ratio": math.exp(float(logs.mean())), "ci95": [lo, hi], "n": len(logs), "identical": same}


def tokens_per_s(rows: list[dict]) -> float:
    return sum(len(r["tokens"]) for r in rows) / sum(r["seconds"] for r in rows)


DEFAULT_TORCH_ROWS = "float32:eager,bfloat16:eager,bfloat16:compiled"


def torch_rows(text: str) -> list[tuple[str, str]]:
    """--torch-rows "float32:eager,bfloat16:compiled" → [(dtype, backend), ...]."""
    rows = [tuple(item.split(":")) for item in text.split(",") if item]
    for row in rows:
        if len(row) != 2 or row[0] not in ("float32", "bfloat16") or row[1] not in ("eager", "static", "compiled"):
            raise SpecbenchError(
                f"--torch-rows {text!r}: each row is dtype:backend (float32|bfloat16 : eager|static|compiled)"
            )
    return rows  # type: ignore[return-value]


def torch_name(dtype: str, backend: str) -> str:
    """torch-fp32, torch-bf16 (eager: the names every earlier result used), torch-bf16-compiled, ..."""
    name = "torch-fp32" if dtype == "float32" else "torch-bf16"
    return name if backend == "eager" else f"{name}-{backend}"


def curve(lm, prompts: list[list[int]], max_new: int, label: str) -> dict:
    """The engine's calibration: t(k) ms and t(k)/t(1), k = 1..K_MAX, after the task's typical context."""
    c = cal.calibrate(lm, prompts, k_max=K_MAX, max_new_tokens=max_new, max_positions=None, dtype=label)
    return {
        "ms": {str(k): v for k, v in c.target_ms.items()},
        "pass_cost": {str(k): v for k, v in c.pass_cost().items()},
    }


def plot_curves(curves: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, c in curves.items():
        ks = [int(k) for k in c["pass_cost"]]
        ax.plot(ks, list(c["pass_cost"].values()), marker="o", label=f"{name} (t(1) = {c['ms']['1']:.1f} ms)")
    ax.plot([1, K_MAX], [1, K_MAX], color="grey", linestyle=":", label="k one-token passes")
    ax.set_xlabel("tokens in one target pass (k)")
    ax.set_ylabel("t(k) / t(1)")
    ax.set_title("Pass cost by engine (same GGUF)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


PAIRS = [  # (label, slower side, faster side, goal on the ratio)
    ("llama.cpp: specbench plain ÷ binding's generate (speed)", "llama-cpp-python plain", "llama-cpp plain", ">= 0.95"),
    ("llama.cpp: specbench speculative vs its plain decoding", "llama-cpp plain", "llama-cpp spec", ">= 1.3"),
    (
        "llama.cpp: specbench spec vs binding's own spec (same draft)",
        "llama-cpp-python spec",
        "llama-cpp spec",
        ">= 1.0",
    ),
    ("llama.cpp: binding's own speculative vs its plain", "llama-cpp-python plain", "llama-cpp-python spec", "-"),
    ("torch fp32: speculative vs plain", "torch-fp32 plain", "torch-fp32 spec", "-"),
    ("torch bf16: speculative vs plain", "torch-bf16 plain", "torch-bf16 spec", "-"),
    ("llama.cpp plain vs torch bf16 plain", "torch-bf16 plain", "llama-cpp plain", "-"),
    ("torch bf16 plain ÷ vLLM plain (speed, same threads)", "vllm-bf16 plain", "torch-bf16 plain", ">= 0.8"),
    ("vLLM: its own speculative vs its plain", "vllm-bf16 plain", "vllm-bf16 spec", "-"),
    ("specbench torch bf16 spec vs vLLM's own spec", "vllm-bf16 spec", "torch-bf16 spec", "-"),
    ("torch bf16 compiled plain ÷ vLLM plain (same threads)", "vllm-bf16 plain", "torch-bf16-compiled plain", ">= 0.8"),
    ("torch bf16 plain: compiled vs eager (after/before)", "torch-bf16 plain", "torch-bf16-compiled plain", "-"),
    ("torch bf16 compiled: speculative vs plain", "torch-bf16-compiled plain", "torch-bf16-compiled spec", "-"),
    ("specbench torch bf16 compiled spec vs vLLM's own spec", "vllm-bf16 spec", "torch-bf16-compiled spec", "-"),
]


def fastest_pairs(rows: dict[str, list[dict]]) -> list[tuple[str, str, str, str]]:
    """The speedup that does not flatter: the best speculative decoder against the fastest plain decoder measured
    here (any engine), beside each engine's speculative against its own plain."""
    plain = [n for n in rows if n.endswith(" plain")]
    spec = [n for n in rows if n.endswith(" spec")]
    if not plain or not spec:
        return []
    fastest = max(plain, key=lambda n: tokens_per_s(rows[n]))
    best = max(spec, key=lambda n: tokens_per_s(rows[n]))
    return [(f"best speculative ({best}) vs fastest plain ({fastest})", fastest, best, ">= 1.3")]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    threads = args.threads or lc.default_threads()
    import torch

    torch.set_num_threads(threads)  # both engines on the same number of threads
    spec = load_task(args.task)
    llama = LlamaSession(LoadSpec(args.target, threads=threads))
    prepared = prepare_examples(spec, select_examples(spec, args.limit, 0), llama.target, args.max_new_tokens)
    prompts = [p.prompt_ids for p in prepared]
    eos, max_new = llama.target.eos_ids, args.max_new_tokens
    draft = parse_draft(args.draft)  # --draft, parsed once
    n_ctx = lc.context_size(max(len(p) for p in prompts) + max_new + args.gamma + 1)
    proposer = llama.proposer(draft, prompts)
    for lm in [llama.target_lm(), *model_caches(proposer)]:  # the run's context, as the peers get (warm_up does this)
        lm.backend.reserve(n_ctx)
    decoders = loop_decoders("llama-cpp", llama.target_lm(), proposer, eos, args.gamma, max_new)
    decoders |= peer_decoders(str(gguf_of(args.target)), n_ctx, threads, args.draft, args.gamma, eos, max_new)
    curves = {f"llama.cpp ({llama.engine_info()['model_desc']})": curve(llama.target_lm(), prompts, max_new, "gguf")}
    for dtype, backend in [] if args.no_torch else torch_rows(args.torch_rows):
        s = Session(LoadSpec(args.target, device="cpu", dtype=dtype, backend=backend))
        name, torch_proposer = torch_name(dtype, backend), s.proposer(draft, prompts)
        for i, lm in enumerate([s.target_lm(), *model_caches(torch_proposer)]):  # as a run's warm-up (arms.warm_up):
            lm.backend.reserve(n_ctx)  # one static cache for every prompt, and under compiled every step shape
            lm.prime(args.gamma + 1, all_logits=i == 0)  # (1..γ+1 tokens) compiled now, never inside a timed decode
        decoders |= loop_decoders(name, s.target_lm(), torch_proposer, eos, args.gamma, max_new)
        if backend == "eager":  # a compiled curve would compile K_MAX more step shapes (minutes each here)
            curves[f"torch {dtype}"] = curve(CachedModel(s.target.model), prompts, max_new, dtype)
        print(f"  loaded torch {dtype} {backend}", file=sys.stderr, flush=True)
    vllm = (
        None
        if args.no_vllm
        else vllm_decoders(args.target, args.draft, prompts, args.gamma, max_new, threads, args.vllm_eager)
    )
    if vllm is not None:
        decoders |= vllm[0]
        curves["vllm bfloat16"] = curve(vllm[1].target_lm(), prompts, max_new, "bfloat16")
        print("  loaded and calibrated vLLM bfloat16", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    for name, d in decoders.items():
        t = time.perf_counter()
        d(prompts[0])
        print(f"  warm-up {name}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    warm_s = time.perf_counter() - t0
    rows = interleaved(decoders, prompts, args.repeats)
    pairs = [
        {
            "name": label,
            "slow": a,
            "fast": b,
            "goal": goal,
            **ratio_with_interval(rows[a], rows[b]),
            "decode": ratio_with_interval(rows[a], rows[b], "decode_s"),
        }
        for label, a, b, goal in PAIRS + fastest_pairs(rows)
        if a in rows and b in rows
    ]
    if vllm is not None:
        vllm[1].close()
        v = vllm[1].engine_info()
        print(f"vLLM {v['version']}, {v['mode']}, OpenMP bound to CPUs {v['omp_threads_bind']}", file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    figure = out / f"pass-cost-{stamp}.png"
    plot_curves(curves, figure)
    info = llama.engine_info()
    print(
        f"\n{args.target} ({info['model_desc']}), {args.task} × {len(prompts)} prompts × {args.repeats} repeats, "
        f"{max_new} new tokens, greedy, draft {args.draft} γ={args.gamma}; "
        f"llama-cpp-python {info['engine_version']}, {threads} threads; warm-up {warm_s:.1f} s"
    )
    print(f"\n{'decoder':<26}{'tokens/s':>10}{'passes/token':>14}")
    for n, r in rows.items():
        calls = sum(x["target_calls"] for x in r) / max(1, sum(len(x["tokens"]) for x in r))
        shown = f"{calls:>14.2f}" if calls else f"{'n/a':>14}"  # vLLM's speculative steps report no pass count
        print(f"{n:<26}{tokens_per_s(r):>10.1f}{shown}")
    print(
        f"\n{'pair: time ratio slow ÷ fast, geo-mean over prompts':<62}{'ratio':>7}  {'95% CI':<16}"
        f"{'decode only':>12}{'same':>7}  goal"
    )
    for p in pairs:
        ci = "[{:.2f}, {:.2f}]".format(*p["ci95"])
        print(
            f"{p['name']:<62}{p['ratio']:>7.2f}  {ci:<16}{p['decode']['ratio']:>12.2f}"
            f"{p['identical']:>4}/{p['n']:<2}  {p['goal']}"
        )
    fastest = [p for p in pairs if p["name"].startswith("best speculative")]
    for p in fastest:
        lo, hi = p["ci95"]
        print(
            f"\nfastest plain decoder here: {p['slow']} ({tokens_per_s(rows[p['slow']]):.1f} tok/s); best speculative: "
            f"{p['fast']} ({tokens_per_s(rows[p['fast']]):.1f} tok/s), {p['ratio']:.2f}× the fastest plain "
            f"(95 % CI {lo:.2f}-{hi:.2f}, n = {p['n']} prompts)"
        )
    print("\npass cost t(k)/t(1):")
    for name, c in curves.items():
        print(f"  {name:<40}" + " ".join(f"{k}:{v:.2f}" for k, v in c["pass_cost"].items()))
    path = out / f"engines-{stamp}.json"
    result = {
        "args": vars(args),
        "engine": info,
        "vllm": None if vllm is None else vllm[1].engine_info(),
        "tokens_per_s": {n: tokens_per_s(r) for n, r in rows.items()},
        "pairs": pairs,
        "curves": curves,
        "warm_up_s": warm_s,
        "per_prompt": rows,
        **environment_info(),
    }
    atomic_write_json(path, json_safe(result))
    print(f"written {path} and {figure}")
    return result


if __name__ == "__main__":
    try:
        main()
    except SpecbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)

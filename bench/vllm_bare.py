"""The bare vLLM script a user would write, for bench/vllm_overhead.py: `LLM(...)` and `llm.generate` per prompt, timed
around the call; nothing of specbench. Runs with .venv-vllm's python (vLLM pins its own torch).

It loads one engine (plain, or with the speculative config given), then answers lines on stdin: "run" decodes every
prompt once, in order, and prints one JSON line {"seconds": [...], "tokens": [[...], ...]} on the protocol stream;
"quit" (or the end of stdin) exits. Kept alive between blocks so the overhead bench alternates it with specbench's
worker without reloading either.

Usage (by bench/vllm_overhead.py): .venv-vllm/bin/python bench/vllm_bare.py SETTINGS.json
SETTINGS: {"model", "dtype", "enforce_eager", "speculative_config" (or null), "prompts" (token ids), "max_new_tokens",
"stop_ids"}
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    settings = json.loads(open(sys.argv[1], encoding="utf-8").read())
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # vLLM's logs go to stderr, never into the protocol
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kwargs = {"model": settings["model"], "dtype": settings["dtype"], "enforce_eager": settings["enforce_eager"]}
    if settings.get("speculative_config"):
        kwargs["speculative_config"] = settings["speculative_config"]
    llm = LLM(seed=0, **kwargs)
    params = SamplingParams(
        max_tokens=settings["max_new_tokens"], temperature=0.0, stop_token_ids=settings["stop_ids"], detokenize=False
    )
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in settings["prompts"]]
    llm.generate([prompts[0]], params, use_tqdm=False)  # warm-up
    protocol.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if line.strip() != "run":
            break
        seconds, tokens = [], []
        for prompt in prompts:
            t0 = time.perf_counter()
            out = llm.generate([prompt], params, use_tqdm=False)
            seconds.append(time.perf_counter() - t0)
            tokens.append([int(t) for t in out[0].outputs[0].token_ids])
        protocol.write(json.dumps({"seconds": seconds, "tokens": tokens}) + "\n")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # bench/'s modules shadow nothing
    main()

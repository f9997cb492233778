"""The vLLM worker: a process in .venv-vllm that holds vLLM engines and answers specbench over JSON lines.

vLLM pins its own torch and transformers, so it cannot live in specbench's venv (scripts/setup_vllm.sh builds
.venv-vllm). specbench starts this file as a script with .venv-vllm's python (client.py) and talks to it over the
pipe: one JSON object a line on stdin, one answer a line on the protocol stream. This module imports nothing from
specbench (it runs as a script, not as a package module) and vllm only inside functions (importlib: specbench's
type check has no vLLM to see), so specbench's tests read its pure helpers (`speculative_config`,
`spec_counts_from_metrics`, `accept_counts`, `arrival_offsets`) without vLLM installed.

Requests (`op`), each answered with {"id", "ok": true, "result"} or {"id", "ok": false, "error": one line}:
  load      key, model (folder), dtype, method (None or a dict: see speculative_config), enforce_eager, logprobs_mode,
            max_model_len, gpu_memory_utilization (GPU), seed → the engine's settings (the CPU KV space is
            VLLM_CPU_KVCACHE_SPACE, set when the worker starts). One engine per key is kept: a run holds a plain
            one and a speculative one and alternates them (A B B A) without reloading.
  generate  key, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, stop_ids → output token ids, the
            time to first token and each token's arrival (perf_counter around vLLM's step() loop, one request at a
            time), and the request's speculative counts: vLLM's ordered per-step accepted/drafted counts
            (per_request_spec_decode_metrics="detailed") and its counters read before and after the request.
  generate_batch  key, requests (a list of {prompt_ids, seed}), max_new_tokens, temperature, top_k, top_p, stop_ids,
            concurrency (the most requests in flight, ≥ 1), request_rate (requests/s, Poisson arrivals; null: all at
            once up to the cap), schedule_seed → per request (in the order given) what `generate` answers, its
            arrivals relative to its own submission, when it was due and when it was submitted (seconds after the
            batch started); and the batch's wall seconds. One engine serves them all, stepped in one loop (see
            `Worker.generate_batch`): serving load, vLLM's continuous batching (benchmark_serving's schedule).
  pass      key, prompt_ids → the seconds of one prompt pass and one token (prefix-cached blocks reused), and how
            many prompt tokens the cache supplied: specbench's pass-cost calibration and noise probes on vLLM.
  load_planted  `load`'s fields and plant (PLANTS) → a speculative engine whose acceptance rule is biased on purpose.
  prompt_logprobs  key, sequences, positions, k → vLLM's top-k prompt scores at those positions (scores.py).
  info      → vLLM's version, the CPU, the environment that shapes its speed.   shutdown  → {}, engines stopped, exit.

vLLM's logger writes to stdout: the protocol stream is a duplicate of the original stdout taken at start-up, and
fd 1 is pointed at stderr, so nothing but answers reaches the client. vLLM starts its engine core with `spawn`:
everything that runs lives under the `__main__` guard.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import random
import sys
import time
import traceback
from collections import deque

METHODS = ("ngram", "suffix", "draft_model", "eagle", "eagle3", "medusa")
HEAD_METHODS = ("eagle", "eagle3", "medusa")  # need a head folder (the `model` of the speculative config)
# verify's negative controls: each u of vLLM's test p(x)/q(x) ≥ u times a factor, so a draft x is accepted with
# probability min(1, 1.5·p/q) (accept-boost), or always, even where p(x) = 0 (always-accept)
PLANTS = {"accept-boost": 1 / 1.5, "always-accept": 0.0}
INSECURE = "VLLM_ALLOW_INSECURE_SERIALIZATION"  # "1": collective_rpc may send a function (load_planted)
HERE = os.path.dirname(os.path.abspath(__file__))  # this file's folder: scores.py, orphan_guard.py, teardown.py
sibling = lambda name: importlib.import_module("runpy").run_path(f"{HERE}/{name}")  # by path: no specbench imports


def speculative_config(method: dict | None) -> dict | None:
    """specbench's method dict → vLLM's `speculative_config` (None: plain decoding).

    method: {"name": one of METHODS, "num_speculative_tokens": γ, "prompt_lookup_max"/"prompt_lookup_min" (ngram),
    "model": a folder (draft_model; the head for eagle/eagle3/medusa)}."""
    if not method:
        return None
    name = method.get("name")
    if name not in METHODS:
        raise ValueError(f"unknown vLLM speculative method {name!r}; use one of {', '.join(METHODS)}")
    gamma = int(method.get("num_speculative_tokens", 0))
    if gamma < 1:
        raise ValueError(f"num_speculative_tokens must be ≥ 1 (got {gamma})")
    config: dict = {"method": name, "num_speculative_tokens": gamma}
    if name == "ngram":
        config["prompt_lookup_max"] = int(method.get("prompt_lookup_max", 3))
        config["prompt_lookup_min"] = int(method.get("prompt_lookup_min", 1))
        if not 1 <= config["prompt_lookup_min"] <= config["prompt_lookup_max"]:
            raise ValueError(f"need 1 ≤ prompt_lookup_min ≤ prompt_lookup_max (got {method})")
    elif name == "draft_model" or name in HEAD_METHODS:
        if not method.get("model"):
            raise ValueError(f"vLLM method {name} needs a model folder")
        config["model"] = str(method["model"])
    return config


def counter_totals(metrics) -> dict:
    """vLLM's `llm.get_metrics()` → the speculative counters summed over engines: drafts, draft_tokens, accepted,
    accepted_per_pos (a list, position 1 first). Missing counters (plain decoding) read as 0."""
    out: dict = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    names = {
        "vllm:spec_decode_num_drafts": "drafts",
        "vllm:spec_decode_num_draft_tokens": "draft_tokens",
        "vllm:spec_decode_num_accepted_tokens": "accepted",
    }
    for m in metrics:
        name = getattr(m, "name", "")
        if name in names:
            out[names[name]] += int(getattr(m, "value", 0))
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            values = [int(v) for v in getattr(m, "values", [])]
            per_pos = out["accepted_per_pos"]
            per_pos.extend([0] * (len(values) - len(per_pos)))
            for i, v in enumerate(values):
                per_pos[i] += v
    return out


def spec_counts_from_metrics(before: dict, after: dict) -> dict:
    """The counters' growth over one request (the worker runs one request at a time, so it is that request's)."""
    per_after, per_before = after["accepted_per_pos"], before["accepted_per_pos"]
    per_before = per_before + [0] * (len(per_after) - len(per_before))
    return {
        "drafts": after["drafts"] - before["drafts"],
        "draft_tokens": after["draft_tokens"] - before["draft_tokens"],
        "accepted": after["accepted"] - before["accepted"],
        "accepted_per_pos": [a - b for a, b in zip(per_after, per_before, strict=True)],
    }


def accept_counts(drafts: int, accepted_per_pos: list[int]) -> list[int]:
    """How many verification steps accepted exactly n draft tokens, n = 0..len(accepted_per_pos).

    vLLM accepts a prefix of each draft, so the steps that accepted ≥ i tokens are accepted_per_pos[i - 1]; the
    multiset of accepted lengths follows exactly (their order within the request does not)."""
    at_least = [drafts, *accepted_per_pos, 0]
    return [at_least[n] - at_least[n + 1] for n in range(len(accepted_per_pos) + 1)]


def arrival_offsets(n: int, request_rate: float | None, seed: int) -> list[float]:
    """When each of n requests is due, in seconds after the batch starts: all at 0 when request_rate is None (or
    infinite), else a Poisson process at request_rate per second: the first at 0, then exponential gaps of mean
    1 / rate drawn from a generator seeded with `seed` (vLLM's benchmark_serving draws its gaps the same way, with
    numpy), so both arms and every repeat get the same schedule."""
    if request_rate is None or request_rate == float("inf"):
        return [0.0] * n
    if not request_rate > 0:
        raise ValueError(f"request_rate must be > 0 (got {request_rate})")
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(request_rate)
        offsets.append(t)
    return offsets


# --------------------------------------------------------------------------- what runs only inside .venv-vllm


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sampling_params(request: dict, seed):
    """The request's SamplingParams (greedy ignores top-k and top-p; stop at the stop ids; ids only, no text)."""
    SamplingParams = importlib.import_module("vllm").SamplingParams  # noqa: N806  # vLLM's class

    temperature = float(request.get("temperature", 0.0))
    return SamplingParams(
        max_tokens=int(request["max_new_tokens"]),
        temperature=temperature,
        top_k=int(request.get("top_k") or 0) if temperature > 0 else 0,  # 0: off
        top_p=float(request.get("top_p", 1.0)) if temperature > 0 else 1.0,
        seed=int(seed) if seed is not None else None,
        stop_token_ids=[int(t) for t in request.get("stop_ids", [])],
        ignore_eos=bool(request.get("ignore_eos", False)),
        detokenize=False,  # specbench decodes the ids itself, with the same tokenizer as every engine
    )


def completion_result(final, arrivals: list, steps: int) -> dict:
    """A finished request's answer: its tokens, why it stopped, its arrivals and steps, and (speculative) vLLM's
    ordered per-step counts (per_request_spec_decode_metrics="detailed")."""
    completion = final.outputs[0]
    result = {
        "token_ids": [int(t) for t in completion.token_ids],
        "finish_reason": completion.finish_reason,
        "stop_reason": completion.stop_reason if isinstance(completion.stop_reason, int | str) else None,
        "arrivals": arrivals,
        "steps": steps,
    }
    detailed = getattr(completion, "spec_decode_metrics", None)
    if detailed is not None:
        result["per_step"] = {
            "accepted": [int(n) for n in detailed.per_step_accepted],
            "drafted": [int(n) for n in detailed.per_step_drafted],
            "histogram": [int(n) for n in detailed.histogram],
            "num_draft_tokens": int(detailed.num_draft_tokens),
        }
    return result


def plant_acceptance_fault(vllm_worker, factor: float) -> str:
    """In vLLM's model-runner process (collective_rpc sends it by value): every u of the V1 rejection sampler's test
    p/q ≥ u (`generate_uniform_probs`, read by `rejection_sample` at each call) times `factor`, there only."""
    sampler_module = importlib.import_module("vllm.v1.sample.rejection_sampler")
    runner = vllm_worker.model_runner
    if not isinstance(getattr(runner, "rejection_sampler", None), sampler_module.RejectionSampler):
        raise RuntimeError(f"{type(runner).__name__} does not verify with vLLM V1's RejectionSampler; cannot plant")
    original = sampler_module.generate_uniform_probs
    sampler_module.generate_uniform_probs = lambda *args, **kwargs: original(*args, **kwargs) * factor  # type: ignore[attr-defined]
    return type(runner).__name__


class Worker:
    """The engines loaded so far, by key, and the answers to each request."""

    def __init__(self) -> None:
        self.engines: dict = {}  # key → (vllm.LLM, its settings)
        self.next_request = 0

    def info(self, _request: dict) -> dict:
        vllm = importlib.import_module("vllm")
        env = {k: v for k, v in os.environ.items() if k.startswith(("VLLM_", "OMP_")) or k == "CUDA_VISIBLE_DEVICES"}
        return {"vllm": vllm.__version__, "cpu": cpu_name(), "cores": os.cpu_count(), "env": env}

    def load(self, request: dict) -> dict:
        LLM = importlib.import_module("vllm").LLM  # noqa: N806  # vLLM's class, under its own name
        key = request["key"]
        if key in self.engines:
            return self.engines[key][1]
        t0 = time.perf_counter()
        kwargs: dict = {
            "model": request["model"],
            "tokenizer": request.get("tokenizer") or request["model"],
            "dtype": request.get("dtype", "float32"),
            "enforce_eager": bool(request.get("enforce_eager", True)),
            "seed": int(request.get("seed", 0)),
            "disable_log_stats": False,  # get_metrics() needs the stats loggers' counters
            "skip_tokenizer_init": False,
        }
        # a GPU holds two engines (plain, speculative), each its share; raw_logits: prompt scores are logits
        for name, kind in (("max_model_len", int), ("gpu_memory_utilization", float), ("logprobs_mode", str)):
            kwargs.update({name: kind(request[name])} if request.get(name) else {})
        spec = speculative_config(request.get("method"))
        if spec is not None:
            kwargs["speculative_config"] = spec
            kwargs["per_request_spec_decode_metrics"] = "detailed"  # each request's ordered per-step counts
        llm = LLM(**kwargs)
        cache = llm.llm_engine.vllm_config.cache_config
        settings = {
            "key": key,
            "speculative_config": spec,
            "enforce_eager": kwargs["enforce_eager"],
            "dtype": kwargs["dtype"],
            "block_size": cache.block_size,
            "prefix_caching": bool(cache.enable_prefix_caching),
            "max_model_len": llm.llm_engine.vllm_config.model_config.max_model_len,
            "load_s": time.perf_counter() - t0,
        }
        self.engines[key] = (llm, settings)
        return settings

    def load_planted(self, request: dict) -> dict:
        """`load` a speculative engine, then plant `request["plant"]` in its acceptance rule, in the processes vLLM
        spawns for it (INSECURE is set while they start, so they inherit it, and removed after)."""
        plant, key = request.get("plant"), request["key"]
        if plant not in PLANTS or not request.get("method"):
            raise ValueError(f"plant must be one of {', '.join(PLANTS)}, on a method (got {plant!r})")
        if key in self.engines:
            return self.engines[key][1]
        previous = os.environ.get(INSECURE)
        os.environ[INSECURE] = "1"
        try:
            settings = self.load(request)
            try:
                runners = self.engines[key][0].collective_rpc(plant_acceptance_fault, args=(PLANTS[plant],))
            except Exception:
                del self.engines[key]  # never served unplanted under the planted key
                raise
        finally:
            os.environ.pop(INSECURE) if previous is None else os.environ.update({INSECURE: previous})
        settings.update(plant=plant, plant_factor=PLANTS[plant], planted_in=list(runners))
        return settings

    def engine(self, key: str):
        if key not in self.engines:
            raise ValueError(f"no engine loaded under {key!r}; send load first")
        return self.engines[key]

    def generate(self, request: dict) -> dict:
        TokensPrompt = importlib.import_module("vllm.inputs").TokensPrompt  # noqa: N806  # vLLM's class

        llm, settings = self.engine(request["key"])
        params = sampling_params(request, request.get("seed"))
        engine = llm.llm_engine
        before = counter_totals(llm.get_metrics()) if settings["speculative_config"] else None
        self.next_request += 1
        rid = f"specbench-{self.next_request}"
        arrivals: list[tuple[float, int]] = []  # (seconds since the request was added, tokens so far)
        steps = 0
        final = None
        t0 = time.perf_counter()
        engine.add_request(rid, TokensPrompt(prompt_token_ids=[int(t) for t in request["prompt_ids"]]), params)
        while engine.has_unfinished_requests():
            outputs = engine.step()
            now = time.perf_counter() - t0
            steps += 1
            for out in outputs:
                if out.request_id != rid:
                    continue
                n = len(out.outputs[0].token_ids)
                if not arrivals or n > arrivals[-1][1]:
                    arrivals.append((now, n))
                final = out
        if final is None:
            raise RuntimeError("vLLM finished without an output for the request")
        result = completion_result(final, arrivals, steps)
        if before is not None:
            result["counters"] = spec_counts_from_metrics(before, counter_totals(llm.get_metrics()))
        return result

    def generate_batch(self, request: dict) -> dict:
        """Serve `requests` on one engine under a load schedule: a request is submitted (add_request) once it is due
        (arrival_offsets) and fewer than `concurrency` are in flight, so a new one starts as soon as one finishes;
        the engine steps while any is in flight (each step decodes every running request: continuous batching) and
        sleeps until the next is due when none is. Each token's arrival is timed from its own request's submission,
        as benchmark_serving times TTFT from the moment a request is sent (after its concurrency slot opened)."""
        TokensPrompt = importlib.import_module("vllm.inputs").TokensPrompt  # noqa: N806  # vLLM's class

        llm, _settings = self.engine(request["key"])
        engine = llm.llm_engine
        items = request["requests"]
        cap = int(request["concurrency"])
        if cap < 1:
            raise ValueError(f"concurrency must be ≥ 1 (got {cap})")
        rate = request.get("request_rate")
        due = arrival_offsets(len(items), None if rate is None else float(rate), int(request.get("schedule_seed", 0)))
        waiting = deque(range(len(items)))
        in_flight: dict[str, int] = {}  # request id → index in items
        submitted = [0.0] * len(items)  # perf_counter at add_request
        arrivals: list[list[tuple[float, int]]] = [[] for _ in items]
        steps = [0] * len(items)
        finals: list = [None] * len(items)
        t0 = time.perf_counter()
        while waiting or in_flight:
            now = time.perf_counter() - t0
            while waiting and len(in_flight) < cap and due[waiting[0]] <= now:
                i = waiting.popleft()
                self.next_request += 1
                rid = f"specbench-{self.next_request}"
                prompt = TokensPrompt(prompt_token_ids=[int(t) for t in items[i]["prompt_ids"]])
                params = sampling_params(request, items[i].get("seed"))
                submitted[i] = time.perf_counter()
                engine.add_request(rid, prompt, params)
                in_flight[rid] = i
            if not in_flight:  # the next request is not due yet: wait for it
                time.sleep(max(0.0, due[waiting[0]] - (time.perf_counter() - t0)))
                continue
            outputs = engine.step()
            stepped = time.perf_counter()
            for i in in_flight.values():
                steps[i] += 1
            for out in outputs:
                j = in_flight.get(out.request_id)
                if j is None:
                    continue
                n = len(out.outputs[0].token_ids)
                if not arrivals[j] or n > arrivals[j][-1][1]:
                    arrivals[j].append((stepped - submitted[j], n))
                finals[j] = out
                if out.finished:
                    del in_flight[out.request_id]
        wall_s = time.perf_counter() - t0
        results = []
        for i, final in enumerate(finals):
            if final is None:
                raise RuntimeError(f"vLLM finished without an output for request {i}")
            result = completion_result(final, arrivals[i], steps[i])
            result["due_s"], result["submitted_s"] = due[i], submitted[i] - t0
            results.append(result)
        return {"results": results, "wall_s": wall_s}

    def timed_pass(self, request: dict) -> dict:
        """One prompt pass of `prompt_ids` and one sampled token, timed (the calibration's t(k)): with prefix caching
        the whole blocks of an earlier pass over the same prefix are reused, so it computes the tokens after them."""
        SamplingParams = importlib.import_module("vllm").SamplingParams  # noqa: N806  # vLLM's class
        TokensPrompt = importlib.import_module("vllm.inputs").TokensPrompt  # noqa: N806  # vLLM's class

        llm, _settings = self.engines[request["key"]]
        engine = llm.llm_engine
        self.next_request += 1
        params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
        final = None
        t0 = time.perf_counter()
        engine.add_request(
            f"specbench-pass-{self.next_request}",
            TokensPrompt(prompt_token_ids=[int(t) for t in request["prompt_ids"]]),
            params,
        )
        while engine.has_unfinished_requests():
            for out in engine.step():
                final = out
        seconds = time.perf_counter() - t0
        cached = getattr(final, "num_cached_tokens", None)
        return {"seconds": seconds, "cached_tokens": int(cached) if cached is not None else None}


def serve(stream_in, stream_out) -> None:
    """Answer requests until shutdown or the end of stdin (the client went away)."""
    worker = Worker()
    handlers = {
        "info": worker.info,
        "load": worker.load,
        "load_planted": worker.load_planted,
        "generate": worker.generate,
        "generate_batch": worker.generate_batch,
        "pass": worker.timed_pass,
        "prompt_logprobs": lambda r: sibling("scores.py")["run"](worker, r),
        "shutdown": lambda r: sibling("teardown.py")["stop_all"](worker.engines),  # all at once, not in turn at exit
    }
    for line in stream_in:
        if not line.strip():
            continue
        request: dict = {}
        try:
            request = json.loads(line)
            op = request.get("op")
            if op in handlers:
                answer: dict = {"id": request.get("id"), "ok": True, "result": handlers[op](request)}
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as exc:  # noqa: BLE001  # every failure goes back to specbench as one line
            traceback.print_exc(file=sys.stderr)
            message = " ".join(str(exc).split()) or type(exc).__name__
            answer = {"id": request.get("id"), "ok": False, "error": f"{type(exc).__name__}: {message}"}
        stream_out.write(json.dumps(answer) + "\n")
        stream_out.flush()
        if request.get("op") == "shutdown":
            return


def main() -> None:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # our engine.py etc. shadow nothing
    sibling("orphan_guard.py")["watch"](os.getppid())  # dies with specbench
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # vLLM's logs and any print go to stderr, never into the protocol
    sys.stdout = sys.stderr
    serve(sys.stdin, protocol)
    protocol.close()


if __name__ == "__main__":
    main()

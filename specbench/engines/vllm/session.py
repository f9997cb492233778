"""A run's models when `--engine vllm`: the worker process (client.py) holding vLLM engines, and the target's
tokenizer and a torch copy of it on specbench's side.

Prompts are tokenized here, by the same loader as the torch engine, and handed to vLLM as token ids, so both engines
decode identical prompt ids. vLLM loads the folder specbench already has for a --target (a preset's converted
safetensors cache, a local folder; `resolve_source`). The worker keeps one engine per configuration: the plain one,
loaded with the session, is the baseline; each speculative configuration (method, γ) is loaded on its first use and
kept, so a run's A B B A order and a sweep's cells alternate engines without reloading (two LLM instances at once
cost two KV-cache reservations, VLLM_CPU_KVCACHE_SPACE each; restarting per arm would cost a 15-100 s load each time).

The numerics floor and divergence classification of greedy records run on vLLM itself, after the timed decodes:
`prompt_scores` asks the plain engine for its top-k prompt scores along the outputs (the worker's prompt_logprobs op,
scores.py); the plain engine is loaded with logprobs_mode raw_logits, so those scores are its logits
(measure/stats/own_logits.py classifies from them; the manifest's `engine.replays` says "vllm"). The torch copy of the
target (`target.model`, loaded by specbench's own loader in the run's dtype) scores the NLL of sampled records and
replays a greedy example only where vLLM cannot answer (the record says so); the timed decodes and the calibration
(passes.py) are vLLM's alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from specbench.config import LoadSpec
from specbench.decoding.backend import ForwardBackend
from specbench.decoding.base import DecodeResult
from specbench.engines.contract import LoadSchedule, ServedLoad
from specbench.engines.session import Session
from specbench.engines.vllm import ENGINE_NAME, SPEC, own_method, vllm_method
from specbench.engines.vllm.client import VllmClient
from specbench.engines.vllm.draft import VllmDraft
from specbench.engines.vllm.passes import VllmPasses
from specbench.errors import SpecbenchError
from specbench.models import load_model, resolve_source
from specbench.models.shipped import shipped_draft_dir
from specbench.run_specs import DraftSpec

KV_SPACE_GIB = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))  # per engine; 1 GiB holds SmolLM2's 8k context
PLAIN = "plain"
SCORES_TOP_K = 5  # prompt scores per position: at a near-tie both tokens of a divergence are among them
GPU_SHARE = 0.3  # of the GPU's memory per engine: plain, --gamma auto's pilot at γ_max and the chosen γ fit (untested)
KV_MARGIN = 0.95  # of the CPU KV space a capped context may fill (vLLM counts whole blocks)
KV_METHODS = ("draft_model", "eagle", "eagle3")  # speculative methods whose draft keeps a KV cache of its own


def kv_bytes_per_token(config: dict, dtype_bytes: int) -> int | None:
    """Bytes of K and V one token costs in a decoder's cache (every layer), from its config.json; None when the
    config does not say (a medusa head, an unknown layout)."""
    text = config.get("text_config", config)
    layers, heads, hidden = (text.get(k) for k in ("num_hidden_layers", "num_attention_heads", "hidden_size"))
    if not (layers and heads and hidden):
        return None
    head_dim = text.get("head_dim") or hidden // heads
    return 2 * layers * (text.get("num_key_value_heads") or heads) * head_dim * dtype_bytes


def fitting_model_len(configs: list[dict], kv_space_gib: float, dtype_bytes: int) -> int | None:
    """The longest context (whole 16-token blocks) whose KV cache, the target's (configs[0]) and its draft's, fits
    vLLM's CPU KV space, when that is shorter than the target's max_position_embeddings; else None (vLLM's own). vLLM
    refuses to start an engine that cannot hold one request of its full context: a 1.5B target with a 0.5B draft
    model at 32k tokens needs 1.25 GiB, more than the 1 GiB default."""
    sizes = [kv_bytes_per_token(c, dtype_bytes) for c in configs]
    if not configs or any(s is None for s in sizes):
        return None
    fit = int(KV_MARGIN * kv_space_gib * 2**30 / sum(s for s in sizes if s)) // 16 * 16
    model_max = configs[0].get("max_position_embeddings") or configs[0].get("text_config", {}).get(
        "max_position_embeddings"
    )
    return fit if model_max and fit < int(model_max) else None


def folder_config(folder: str) -> dict | None:
    """A local model folder's config.json (None for a hub id or a folder without one)."""
    path = Path(folder).expanduser() / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def result_from(answer: dict) -> DecodeResult:
    """The worker's answer to `generate` → a DecodeResult. Times: prefill_s is the first token's arrival (TTFT),
    decode_s the last token's arrival after it. Counts (speculative only): vLLM's ordered per-step accepted and
    drafted counts; trials as specbench counts them, Σ min(n + 1, γ') over the steps.

    What vLLM does not report stays 0, and what derives from it is NaN (hf-assisted's convention): a speculative
    step of vLLM drafts, verifies and schedules in one, so its draft and verify seconds are not measured apart, and
    target_calls stays 0 there (with verify_s 0 and the steps counted, the verify cost would read as a free pass).
    proposal_lengths: each verify step's drafted count in order, then a 0 for each step decoded without a proposal
    (its ngram or suffix matcher found nothing), which vLLM does not report: every token after the first that no verify
    step emitted came from one (an output cut at a stop token or the budget inside a verify step can hide a few). So
    the law of tokens offered per step (the auto pilot's lookup law) is vLLM's; where the 0s fell is not known."""
    arrivals = answer["arrivals"]
    first, last = (arrivals[0][0], arrivals[-1][0]) if arrivals else (0.0, 0.0)
    tokens = answer["token_ids"]
    stop = "eos" if answer.get("finish_reason") == "stop" else "length"
    result = DecodeResult(token_ids=tokens, stop_reason=stop, prefill_s=first, decode_s=last - first)
    per_step = answer.get("per_step")
    if not per_step:  # plain: each step that delivered a token after the first was one target pass
        result.target_calls = max(0, len(arrivals) - 1)
        return result
    accepted, drafted = per_step["accepted"], per_step["drafted"]
    result.accept_lengths = list(accepted)
    result.draft_lengths = list(drafted)
    result.proposal_lengths = list(drafted) + [0] * max(0, len(tokens) - 1 - sum(n + 1 for n in accepted))
    result.accepted, result.drafted = sum(accepted), sum(drafted)
    result.trials = sum(min(n + 1, g) for n, g in zip(accepted, drafted, strict=True))
    return result


def parameter_count(folder: str) -> int | None:
    """Parameters in a folder's safetensors files, from their headers (no tensor is read)."""
    total = 0
    files = sorted(Path(folder).glob("*.safetensors"))
    for path in files:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name != "__metadata__":
                n = 1
                for d in entry["shape"]:
                    n *= d
                total += n
    return total if files else None


class VllmSession(Session):
    """The worker, its engines by key, and the target's tokenizer and torch copy."""

    session_kind = SPEC.session_kind
    drafts_inside = True  # vLLM drafts in its own loop: --gamma auto's pilot runs its speculative arm (engine_pilot.py)

    def __init__(self, load: LoadSpec, client: VllmClient | None = None):
        self.load = load
        self.folder = resolve_source(load.target)  # a preset's converted folder, a local folder or a hub id
        self.client = client or VllmClient(kv_space_gib=KV_SPACE_GIB)
        self.worker_info = self.client.request("info", status="starting the vLLM worker")
        self.target = load_model(load.target, load.device, load.dtype, load.trust_remote_code)
        if self.target.is_seq2seq:
            raise SpecbenchError(f"--engine {ENGINE_NAME} decodes decoder-only models; {load.target} is seq2seq")
        self.target_backend = ForwardBackend(self.target.model, "eager")  # the torch replays' (docstring)
        self.engines: dict[str, dict] = {}
        self.run_key: str | None = None  # the current run's speculative engine (load_arms), recorded by engine_info
        self.engines[PLAIN] = self.load_engine(PLAIN, None)
        super().__init__()

    def load_engine(self, key: str, method: dict | None, plant: str | None = None) -> dict:
        """Load (once) the worker's engine `key`: plain (method None) or speculative, with `plant` (verify's negative
        control: worker.PLANTS) biasing its acceptance rule; its settings."""
        if key not in self.engines:
            what = "plain" if method is None else f"{method['name']} γ={method['num_speculative_tokens']}"
            what += f", planted fault {plant}" if plant else ""
            mode = "eager" if self.eager else "compiled: torch.compile, slower to start"
            settings = self.client.request(
                "load_planted" if plant else "load",  # load_planted: load, then the fault (worker.PLANTS)
                status=f"loading {self.load.target} into vLLM ({what}, {self.load.dtype}, {mode})",
                key=key,
                model=self.folder,
                dtype=self.load.dtype,
                method=method,
                enforce_eager=self.eager,
                gpu_memory_utilization=GPU_SHARE if self.client.gpu else None,
                max_model_len=None if self.client.gpu else self.cpu_model_len(method),
                seed=0,
                **({"plant": plant} if plant else {}),
                logprobs_mode="raw_logits" if method is None else None,  # the plain one: prompt_scores get logits
            )
            self.engines[key] = settings | self.memory_settings()
        return self.engines[key]

    def memory_settings(self) -> dict:
        """What an engine is given beside the worker's own report: its mode and its KV-cache space (CPU: the worker's
        VLLM_CPU_KVCACHE_SPACE, in GiB, per engine; GPU: its share of the GPU's memory)."""
        return {
            "mode": "eager (enforce_eager)" if self.eager else "compiled (torch.compile)",
            "kv_space_gib": None if self.client.gpu else self.client.env.get("VLLM_CPU_KVCACHE_SPACE"),
            "gpu_memory_utilization": GPU_SHARE if self.client.gpu else None,
        }

    def cpu_model_len(self, method: dict | None) -> int | None:
        """max_model_len for an engine on the CPU: the context whose KV cache (with a draft model's or head's) fits
        VLLM_CPU_KVCACHE_SPACE, where the model's own is longer (fitting_model_len); None otherwise."""
        folders = [self.folder] + ([method["model"]] if method and method.get("name") in KV_METHODS else [])
        configs = [c for c in (folder_config(f) for f in folders) if c is not None]
        space = self.client.env.get("VLLM_CPU_KVCACHE_SPACE")
        if len(configs) < len(folders) or not space:
            return None
        return fitting_model_len(configs, float(space), 4 if self.load.dtype == "float32" else 2)

    @property
    def eager(self) -> bool:
        return self.load.backend == "eager"  # --backend compiled: vLLM's own compilation (rules refuse static)

    def speculative_key(self, proposer, gamma: int | None, plant: str | None = None) -> str:
        """The engine key for the run's draft at γ (with verify's planted fault, if any), loading it on first use."""
        if not isinstance(proposer, VllmDraft):
            raise SpecbenchError(f"--engine {ENGINE_NAME} runs vLLM's own methods; got a {type(proposer).__name__}")
        if gamma is None:
            raise SpecbenchError(f"--engine {ENGINE_NAME} needs an integer --gamma (num_speculative_tokens)")
        method = vllm_method(proposer.spec, gamma, self.model_folder)
        key = json.dumps(method | ({"plant": plant} if plant else {}), sort_keys=True)
        self.load_engine(key, method, plant)
        return key

    def load_arms(self, proposer, gamma: int | None) -> None:
        """The run's speculative engine, loaded now, before the manifest is written: engine_info records its settings
        (method, num_speculative_tokens, mode, KV space) as the run's `speculative` engine."""
        self.run_key = self.speculative_key(proposer, gamma)

    def sampling_prompt(self, prompt_ids: list[int]) -> list[int]:
        """The prompt's end, cut to whole KV blocks plus one token (unchanged when shorter than a block and one): after
        one request, vLLM's prefix cache holds every whole block, so each later sample computes one prompt token
        (a request recomputes its last partial block, up to 127 tokens on the CPU, otherwise)."""
        block = int(self.engines[PLAIN]["block_size"])
        whole = (len(prompt_ids) - 1) // block
        return list(prompt_ids) if whole < 1 else list(prompt_ids[-(whole * block + 1) :])

    def model_folder(self, spec: str) -> str:
        """A draft model spec → the folder vLLM loads (`distilled`: the target's shipped draft)."""
        return str(shipped_draft_dir(self.load.target)) if spec == "distilled" else resolve_source(spec)

    def decode(self, key: str, sampling, prompt_ids: list[int], seed: int, max_new: int) -> DecodeResult:
        """One request on the worker's engine `key`, one at a time."""
        answer = self.client.request(
            "generate",
            key=key,
            prompt_ids=list(prompt_ids),
            max_new_tokens=max_new,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            seed=seed,
            stop_ids=sorted(self.target.eos_ids),
        )
        return result_from(answer)

    def decode_load(
        self, key: str, sampling, prompts: list[list[int]], seeds: list[int], max_new: int, schedule: LoadSchedule
    ) -> ServedLoad:
        """Every prompt as one load on the worker's engine `key` (Worker.generate_batch), in the order given."""
        answer = self.client.request(
            "generate_batch",
            key=key,
            requests=[{"prompt_ids": list(p), "seed": s} for p, s in zip(prompts, seeds, strict=True)],
            max_new_tokens=max_new,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            stop_ids=sorted(self.target.eos_ids),
            concurrency=schedule.concurrency,
            request_rate=schedule.request_rate,
            schedule_seed=schedule.seed,
        )
        results = answer["results"]
        return ServedLoad(
            [result_from(r) for r in results], float(answer["wall_s"]), [float(r["submitted_s"]) for r in results]
        )

    def prompt_scores(self, sequences: list[list[int]], positions: list[list[int]], k: int = SCORES_TOP_K) -> dict:
        """The plain engine's top-k prompt scores at `positions` (indices ≥ 1) of each sequence, one request each:
        {"mode": its logprobs_mode (raw_logits: the scores are logits), "rows": per sequence, per position {"token": the
        sequence's token there, "top": [[id, score], ...] best first, that token included}} (scores.py)."""
        return self.client.request(
            "prompt_logprobs", key=PLAIN, sequences=[list(s) for s in sequences], positions=positions, k=int(k)
        )

    def target_lm(self) -> VllmPasses:  # type: ignore[override]  # VllmPasses duck-types CachedModel's passes
        plain = self.engines[PLAIN]
        return VllmPasses(self.client, PLAIN, plain["block_size"], "eager" if self.eager else "compiled")

    def build_proposer(self, spec: DraftSpec, corpus: list[list[int]] | None) -> VllmDraft:
        """vLLM drafts itself: the proposer only names the method (its model folder is checked here, before timing)."""
        draft = VllmDraft(spec)
        own = own_method(spec)
        if own is not None:
            if own[1]:
                self.model_folder(own[1])  # a head folder: checked now, before any timing
        elif spec.model:
            self.model_folder(spec.model)
        return draft

    def compute_threads(self) -> int:
        """vLLM's OpenMP threads: VLLM_CPU_OMP_THREADS_BIND's CPUs, or (auto, the default) every CPU this process
        may use but the VLLM_CPU_NUM_OF_RESERVED_CPU (1) kept for the scheduler, as its binding log shows."""
        return omp_threads(os.environ, len(os.sched_getaffinity(0)))

    def engine_info(self) -> dict:
        """The manifest's `engine` entry: vLLM's version, device, each engine's settings, binding and KV space."""
        info = self.worker_info
        return {
            "name": ENGINE_NAME,
            "version": info.get("vllm"),
            "cpu": info.get("cpu"),
            "cores": info.get("cores"),
            "device": self.client.env.get("VLLM_TARGET_DEVICE"),
            "mode": "eager (enforce_eager)" if self.eager else "compiled (torch.compile)",
            "compute_threads": self.compute_threads(),
            "omp_threads_bind": self.client.env.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
            "kv_space_gib": self.client.env.get("VLLM_CPU_KVCACHE_SPACE"),
            "model_folder": self.folder,
            "engines": list(self.engines.values()),  # every engine this session loaded so far (a sweep: all cells')
            "speculative": self.engines.get(self.run_key) if self.run_key else None,  # this run's speculative arm
            "timing": "perf_counter around vLLM's LLMEngine.step() loop in the worker, one request at a time (a load "
            "run: its requests in one loop, each timed from its own submission)",
            "calibration": "prompt passes over k tokens after a prefix-cached context of whole blocks (passes.py)",
            "replays": "vllm",  # greedy floors and divergences: the plain engine's prompt scores (own_logits.py)
            "nll_on": "a torch copy of the target in specbench's venv (sampled runs), not vLLM",
        }

    def close(self) -> None:
        self.client.close()


def omp_threads(env, cpus: int) -> int:
    """The compute threads vLLM's CPU binding gives its one worker (see VllmSession.compute_threads)."""
    bind = env.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if bind not in ("auto", "") and bind != "nobind":
        count = 0
        for part in bind.split("|")[0].split(","):
            lo, _, hi = part.partition("-")
            count += int(hi) - int(lo) + 1 if hi else 1
        return count
    reserved = int(env.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "1") or 1)
    return max(1, cpus - reserved)

"""Engines and one timed example: the models a run holds and the two decoders bound to them.

A `Session` loads the target (and builds each draft) once and is reused by every run of a process (a sweep shares
one across cells); `Engines` binds the baseline and the speculative decoder to a session and a resolved config, so
both take the same (prompt ids, seed, max_new_tokens). What one timed example needs around them lives here too:
its prompt tokenized for the target (`prepare_examples`), its seed (`example_seed`: the same example gets the same
randomness in every run and on resume), the A B B A order of repeats, and the merge of repeats into one
`EngineRecord`. No decode state survives from one example or cell to the next (fresh caches, a generator per
example). The batch-1 loop (runner.py), the batched loop (batch_runner.py), multi-turn questions (turns.py),
verification and bench/ scripts all build on this module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from specbench.config import LoadSpec, RunConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.backend import ForwardBackend
from specbench.decoding.base import DecodeResult, Proposer
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.factory import make_proposer
from specbench.decoding.gamma_policy import AdaptiveGamma, FixedGamma, GammaPolicy, HeuristicGamma
from specbench.decoding.speculative import decode_speculative
from specbench.errors import SpecbenchError
from specbench.measure import calibration as cal
from specbench.measure.choose import AutoChoice, PilotResult
from specbench.measure.noise import probe_ms
from specbench.measure.schema import EngineRecord
from specbench.models import LoadedModel, load_model
from specbench.run_specs import DraftSpec
from specbench.tasks.examples import Example, render_for_model
from specbench.tasks.specs import TaskSpec

WARMUP_TOKENS = 8


@dataclass
class Prepared:
    """A task example tokenized for the target."""

    example: Example
    prompt_ids: list[int]


class Session:
    """Models loaded once and reused across runs (and sweep cells), as `load` says (a resolved dtype: not auto)."""

    def __init__(self, load: LoadSpec):
        self.load = load  # --target as given and how it loads: a sweep holds one session per target; drafts load on
        # load.device (the placement over devices, device_map, is the target's)
        self.target: LoadedModel = load_model(
            load.target, load.device, load.dtype, load.trust_remote_code, load.device_map, load.max_memory
        )
        # one backend for the target, shared by the baseline and the speculative engine (same forward for both)
        self.target_backend = ForwardBackend(self.target.model, load.backend)
        self._proposers: dict[tuple, Proposer] = {}
        # (k_max, context key) → the target's Calibration; ("batch", …) → calibrate_batch's dict
        self.calibrations: dict[tuple, Any] = {}
        self.draft_ms: dict[tuple, float | None] = {}  # (draft spec, context key) → ms per draft-model token
        self.pilots: dict[tuple, PilotResult] = {}  # (draft, pilot ids, sampling, budget, γ) → pilot

    def target_lm(self) -> CachedModel:
        """The target's cache wrapper every engine, calibration and probe of this session decodes through."""
        return CachedModel(self.target.model, backend=self.target_backend)

    def engine_info(self) -> dict:
        """The manifest's `engine` entry: {} for torch (its versions are in the manifest already); see llama_session."""
        return {}

    def calibrate(self, prompts: list[list[int]], k_max: int, max_new_tokens: int) -> cal.Calibration:
        """The target's pass-cost curve for these prompts, measured once per session."""
        key = (k_max, max_new_tokens, hashlib.sha256(repr(prompts).encode()).hexdigest())
        if key not in self.calibrations:
            self.calibrations[key] = cal.calibrate(
                self.target_lm(),
                prompts,
                k_max=k_max,
                max_new_tokens=max_new_tokens,
                max_positions=self.target.max_positions,
                dtype=self.load.dtype,
            )
        return self.calibrations[key]

    def draft_token_ms(self, draft_spec: DraftSpec, prompts: list[list[int]], max_new_tokens: int) -> float | None:
        """ms per token of the draft's model (None for model-free drafts), measured once per session."""
        key = (str(draft_spec), max_new_tokens, hashlib.sha256(repr(prompts).encode()).hexdigest())
        if key not in self.draft_ms:
            caches = self.proposer(draft_spec, prompts).model_caches()
            self.draft_ms[key] = (
                None
                if not caches
                else cal.draft_token_ms(
                    caches[0], prompts, max_new_tokens=max_new_tokens, max_positions=self.target.max_positions
                )
            )
        return self.draft_ms[key]

    def calibrate_batch(
        self, draft_spec: DraftSpec, prompts: list[list[int]], batch_size: int, k_max: int, max_new_tokens: int
    ) -> dict | None:
        """t(b, k) of the target (and the draft model's batched token, if any) at every row count b of
        calibration.batch_row_grid(B), timed interleaved, once per session and batch size (a sweep's ragged and
        min cells share it); None for an encoder-decoder target (no batched pass to time here)."""
        if getattr(self.target.model.config, "is_encoder_decoder", False):
            return None
        key = (
            "batch",
            str(draft_spec),
            batch_size,
            k_max,
            max_new_tokens,
            hashlib.sha256(repr(prompts).encode()).hexdigest(),
        )
        if key not in self.calibrations:
            t_start = time.perf_counter()
            caches = self.proposer(draft_spec, prompts).model_caches()
            per_rows = cal.calibrate_batch_grid(
                self.target.model,
                prompts,
                batch_size=batch_size,
                k_max=k_max,
                max_new_tokens=max_new_tokens,
                max_positions=self.target.max_positions,
                draft=caches[0].model if caches else None,
            )
            self.calibrations[key] = cal.batch_calibration_dict(batch_size, per_rows, time.perf_counter() - t_start)
        return self.calibrations[key]

    def proposer(self, spec: DraftSpec, corpus: list[list[int]] | None = None) -> Proposer:
        """The draft for `spec`, built once; frequency drafts are fitted on `corpus` (once per corpus). Every caller
        hands over a spec parsed where its text came in (the command line, the auto candidates, a manifest)."""
        fits = spec.fits_corpus
        key = (spec.text, hashlib.sha256(repr(corpus).encode()).hexdigest() if fits and corpus else None)
        if key not in self._proposers:
            self._proposers[key] = make_proposer(
                spec,
                self.target,
                self.load.device,
                self.load.dtype,
                self.load.trust_remote_code,
                corpus=corpus if fits else None,
                backend=self.load.backend,
            )
        return self._proposers[key]


def example_seed(seed: int, example_id: str) -> int:
    """A per-example seed: the same example gets the same randomness in every run and on resume."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{example_id}".encode()).digest()[:7], "big")


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def prompt_token_ids(spec: TaskSpec, prompt: str, tokenizer) -> list[int]:
    """The prompt's token ids as the target sees them (its chat template applied where the task asks for it)."""
    text = render_for_model(spec, prompt, tokenizer)
    return tokenizer(text, add_special_tokens=text == prompt)["input_ids"]


def prepare_examples(
    spec: TaskSpec, examples: list[Example], target: LoadedModel, max_new_tokens: int
) -> list[Prepared]:
    """Render (chat template) and tokenize; reject empty prompts and prompts that overflow the context."""
    prepared = []
    for ex in examples:
        ids = prompt_token_ids(spec, ex.prompt, target.tokenizer)
        if not ex.prompt.strip() or not ids:
            raise SpecbenchError(
                f"example {ex.id!r} of task {spec.name!r} has an empty prompt; remove it from the task data"
            )
        if target.max_positions and len(ids) + max_new_tokens > target.max_positions:
            raise SpecbenchError(
                f"example {ex.id!r}: prompt of {len(ids)} tokens + {max_new_tokens} new tokens exceeds the "
                f"context of {target.max_positions}; shorten the prompt or lower --max-new-tokens"
            )
        prepared.append(Prepared(ex, ids))
    return prepared


def engine_record(
    result: DecodeResult, tokenizer, repeat_s: list[float] | None = None, batched: bool = False
) -> EngineRecord:
    """A DecodeResult plus what the record adds: decoded text, token count, each repeat's seconds; the batch
    fields only for a run with --batch-size > 1 (`batched`; its last batch may hold a single row)."""
    fields = asdict(result)
    fields.pop("batch_size", None)  # the batch size goes into the ExampleRecord, once
    if not batched:  # a batch-1 engine's defaults: the record carries no batch fields (as before batches)
        fields.update(batch_s=None, batch_pass_rows=[], batch_pass_widths=[], kept_lengths=[])
    return EngineRecord(
        text=tokenizer.decode(result.token_ids, skip_special_tokens=True),
        n_tokens=len(result.token_ids),
        repeat_s=list(repeat_s or []),
        **fields,
    )


@dataclass
class Engines:
    """The two decoders of a run, bound to models and settings; both take (prompt ids, seed, max_new_tokens)."""

    session: Session
    config: RunConfig  # resolved: no auto values left (γ may still be the adaptive or heuristic policy)
    proposer: Proposer  # the draft of config.draft
    choice: AutoChoice | None = None  # the calibration + pilot behind auto values and the adaptive policy

    def gamma_policy(self) -> GammaPolicy:
        """A fresh policy per decode: nothing learnt on one example steers the next."""
        g, top = self.config.gamma, self.config.gamma_max
        if g.fixed is not None:
            return FixedGamma(g.fixed)
        if g.policy == "heuristic":
            return HeuristicGamma(top, start=top)  # HF starts high (20, here capped) and lowers on a rejection
        if g.policy == "adaptive" and self.choice is not None:
            c = self.choice
            return AdaptiveGamma(top, c.calibrations[c.dtype].pass_cost(), c.c(), c.pilots[c.draft].alpha)
        raise SpecbenchError(f"--gamma {g.value!r} was not resolved before decoding (a bug: please report it)")

    @property
    def pad_to(self) -> int:
        """--exact-shapes: every pass of both engines fed γmax+1 tokens (1 = off)."""
        return self.config.draft_gamma + 1 if self.config.exact_shapes else 1

    def baseline(self, prompt_ids: list[int], seed: int, max_new_tokens: int) -> DecodeResult:
        t = self.session.target
        return decode_autoregressive(
            self.session.target_lm(),
            prompt_ids,
            max_new_tokens=max_new_tokens,
            sampling=self.config.sampling,
            generator=make_generator(t.device, seed),
            eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id,
            pad_to=self.pad_to,
        )

    def speculative(self, prompt_ids: list[int], seed: int, max_new_tokens: int) -> DecodeResult:
        t, cfg = self.session.target, self.config
        proposer = self.proposer
        if cfg.engine == "hf-assisted":
            from specbench.decoding.hf_assisted import decode_hf

            assistant = proposer.hf_assistant()
            if assistant is None:
                raise SpecbenchError(
                    "--engine hf-assisted needs a model draft (HF's assistant_model); pick a model for --draft"
                )
            return decode_hf(
                t.model,
                prompt_ids,
                max_new_tokens=max_new_tokens,
                sampling=cfg.sampling,
                seed=seed,
                eos_ids=t.eos_ids,
                assistant=assistant,
                gamma=cfg.gamma.fixed,  # type: ignore[arg-type]  # fixed: auto resolved, policies refused (config)
                min_confidence=cfg.draft_confidence,
            )
        return decode_speculative(
            self.session.target_lm(),
            proposer,
            prompt_ids,
            gamma=self.gamma_policy(),
            max_new_tokens=max_new_tokens,
            sampling=cfg.sampling,
            generator=make_generator(t.device, seed),
            eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id,
            min_confidence=cfg.draft_confidence,
            pad_to=self.pad_to,
        )

    def model_caches(self) -> list[CachedModel]:
        """The target's and (if any) the draft model's cache wrappers, each with its backend."""
        return [self.session.target_lm()] + self.proposer.model_caches()

    def warm_up(self, prompt_ids: list[int], capacity: int = 0) -> None:
        """Run both engines once, unrecorded: first calls pay for allocations and kernel selection.

        `capacity` (longest prompt + max_new_tokens of the run) sizes static caches once; under
        the compiled backend every step shape is compiled here, before any timing.
        """
        for i, lm in enumerate(self.model_caches()):  # the target first, then a model draft
            lm.backend.reserve(capacity)
            lm.prime(self.config.draft_gamma + 1, all_logits=i == 0)
        self.baseline(prompt_ids, 0, WARMUP_TOKENS)
        self.speculative(prompt_ids, 0, WARMUP_TOKENS)


def engine_order(repeats: int, index: int) -> list[str]:
    """A B B A … per example, starting with the other engine on every other example, so neither
    engine always runs first (caches, clocks and thermal state favour no side)."""
    pair = ["baseline", "speculative"] if index % 2 == 0 else ["speculative", "baseline"]
    return [e for r in range(repeats) for e in (pair if r % 2 == 0 else pair[::-1])]


def merge_repeats(results: list[DecodeResult]) -> tuple[DecodeResult, list[float]]:
    """Repeats of one engine on one example → one result with the median of each time, and the
    total seconds of every repeat. Counts come from the first repeat (same seed, same tokens)."""
    import statistics

    first = results[0]
    med = {
        k: statistics.median(getattr(r, k) for r in results) for k in ("prefill_s", "decode_s", "draft_s", "verify_s")
    }
    return dataclasses.replace(first, **med), [r.prefill_s + r.decode_s for r in results]


def compute_threads(session: Session) -> int:
    """The threads the target computes on: llama.cpp's own setting for a GGUF target, else torch's."""
    threads = getattr(session.target.model, "threads", None)
    return threads if isinstance(threads, int) and threads > 0 else torch.get_num_threads()


def probe_target(session: Session, prompt_ids: list[int]) -> float:
    """The noise probe: median ms of a few one-token target passes after a short fixed context."""
    step = cal.pass_step(session.target_lm(), prompt_ids[:32], 1, True, 1)
    return probe_ms(lambda: step(1))

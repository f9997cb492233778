"""A run's two arms and one timed example: the baseline and the speculative decoder of the run's engine, bound.

The engine (engines/: its session holds the models, loaded once per process and shared by a sweep's cells) decodes;
`Engines` binds the baseline and the speculative arm of the registered engine to a session and a resolved config, so
both take the same (prompt ids, seed, max_new_tokens). What one timed example needs around them lives here too:
its prompt tokenized for the target (`prepare_examples`), its seed (`example_seed`: the same example gets the same
randomness in every run and on resume), the A B B A order of repeats, and the merge of repeats into one
`EngineRecord`. No decode state survives from one example or cell to the next (fresh caches, a generator per
example). The batch-1 loop (runner.py), the batched loop (batch_runner.py), multi-turn questions (turns.py),
verification and bench/ scripts all build on this module.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import asdict, dataclass

from specbench.config import RunConfig
from specbench.decoding.base import DecodeResult, Proposer, model_caches
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.gamma_policy import AdaptiveGamma, FixedGamma, GammaPolicy, HeuristicGamma
from specbench.engines import DecodeJob, Engine, runtime
from specbench.engines.session import Session
from specbench.errors import SpecbenchError
from specbench.measure.auto import calibration as cal
from specbench.measure.auto.choose import AutoChoice
from specbench.measure.machine.noise import probe_ms
from specbench.measure.results.schema import EngineRecord
from specbench.models import LoadedModel
from specbench.tasks.examples import Example, render_for_model
from specbench.tasks.specs import TaskSpec

WARMUP_TOKENS = 8


@dataclass
class Prepared:
    """A task example tokenized for the target."""

    example: Example
    prompt_ids: list[int]


def example_seed(seed: int, example_id: str) -> int:
    """A per-example seed: the same example gets the same randomness in every run and on resume."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{example_id}".encode()).digest()[:7], "big")


def prompt_token_ids(spec: TaskSpec, prompt: str, tokenizer) -> list[int]:
    """The prompt's token ids as the target sees them (its chat template applied where the task asks for it)."""
    text = render_for_model(spec, prompt, tokenizer)
    return tokenizer(text, add_special_tokens=text == prompt)["input_ids"]


FALLBACK_TOKEN_CHARS = 64  # a tokenizer without a vocabulary to measure: no common one has longer tokens


def longest_token_chars(tokenizer) -> int:
    """The most characters one token of `tokenizer` covers (its longest vocabulary entry; byte-level entries count
    bytes, never fewer than the characters they decode to)."""
    try:
        return max(map(len, tokenizer.get_vocab()), default=0) or FALLBACK_TOKEN_CHARS
    except (AttributeError, TypeError, NotImplementedError):
        return FALLBACK_TOKEN_CHARS


def check_prompt_chars(ex: Example, max_positions: int | None, max_new_tokens: int, token_chars: int) -> None:
    """A prompt that cannot fit the context whatever its tokens (each at most `token_chars` characters: see
    longest_token_chars), refused by its length in characters before it is tokenized (issue 41: a 100 MB prompt
    peaked at 12.9 GB and 104 s before the context check). A multi-turn question counts its later turns too: the last
    is asked with every earlier one in the conversation, so they must fit together."""
    if not max_positions:
        return
    limit = (max_positions - max_new_tokens) * token_chars
    chars = len(ex.prompt) + sum(map(len, ex.turns))
    if chars > max(limit, 0):
        what = "a prompt" if not ex.turns else f"a prompt and its {len(ex.turns)} later turn(s)"
        raise SpecbenchError(
            f"example {ex.id!r}: {what} of {chars:,} characters cannot fit the context of "
            f"{max_positions} tokens with {max_new_tokens} new tokens (at most {max(limit, 0):,} characters); "
            f"shorten the prompt or lower --max-new-tokens"
        )


def prepare_examples(
    spec: TaskSpec, examples: list[Example], target: LoadedModel, max_new_tokens: int
) -> list[Prepared]:
    """Render (chat template) and tokenize; reject empty prompts and prompts that overflow the context."""
    prepared = []
    token_chars = longest_token_chars(target.tokenizer) if target.max_positions else 0
    for ex in examples:
        check_prompt_chars(ex, target.max_positions, max_new_tokens, token_chars)
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

    @functools.cached_property
    def engine(self) -> Engine:
        return runtime(self.config.engine)

    @functools.cached_property
    def job(self) -> DecodeJob:
        """What both arms take besides the example: the run's sampling, draft, γ, confidence and exactness mode."""
        cfg = self.config
        return DecodeJob(
            sampling=cfg.sampling,
            proposer=self.proposer,
            gamma_policy=self.gamma_policy,
            fixed_gamma=cfg.gamma.fixed,
            min_confidence=cfg.draft_confidence,
            pad_to=self.pad_to,
            bit_exact=cfg.bit_exact,
        )

    def baseline(self, prompt_ids: list[int], seed: int, max_new_tokens: int) -> DecodeResult:
        return self.engine.baseline(self.session, self.job, prompt_ids, seed, max_new_tokens)

    def speculative(self, prompt_ids: list[int], seed: int, max_new_tokens: int) -> DecodeResult:
        return self.engine.speculative(self.session, self.job, prompt_ids, seed, max_new_tokens)

    def model_caches(self) -> list[CachedModel]:
        """The target's and (if any) the draft model's cache wrappers, each with its backend."""
        return [self.session.target_lm()] + model_caches(self.proposer)

    def warm_up(self, prompt_ids: list[int], capacity: int = 0) -> None:
        """Run both engines once, unrecorded: first calls pay for allocations and kernel selection.

        `capacity` (calibrating.run_capacity: longest prompt, budget and widest pass) sizes static caches once; under
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


def probe_target(session: Session, prompt_ids: list[int]) -> float:
    """The noise probe: median ms of a few one-token target passes after a short fixed context."""
    step = cal.pass_step(session.target_lm(), prompt_ids[:32], 1, True, 1)
    return probe_ms(lambda: step(1))

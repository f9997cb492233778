"""The Engine contract: what an engine declares (name, capabilities, its rules for a configuration) and what it does
(open a session that holds the models, decode one example plainly and speculatively).

Every engine is one package under specbench/engines/ and one line in registry.py. The static half (`EngineSpec`:
capabilities and `check`) imports no torch, so the CLI lists and validates engines without loading one; the runtime
half (`Engine`) is imported only when a run loads models. Nothing outside the registry compares engine names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Protocol

from specbench.config import RunConfig, SamplingConfig

if TYPE_CHECKING:
    from specbench.config import LoadSpec
    from specbench.decoding.base import DecodeResult, Proposer
    from specbench.decoding.gamma_policy import GammaPolicy
    from specbench.engines.session import Session


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do; `specbench list engines` prints one column each, and `check` refuses the rest."""

    plain: bool  # plain (autoregressive) decoding: the baseline every speedup divides by
    specbench_drafts: bool  # speculative decoding in specbench's loop with specbench's drafts (--draft)
    own_drafts: bool  # speculative decoding by the engine's own drafting loop (HF's assistant, vLLM's methods)
    exactness_replay: bool  # `verify`'s exact laws and the numerics replays run on its passes
    per_step_timing: bool  # draft and verify seconds of every step (draft_s, verify_s, pass lengths)
    batches: bool  # --batch-size > 1
    sampling: bool  # T > 0
    exact_shapes: bool  # --exact-shapes (every pass padded to γ + 1 tokens)
    gamma_policies: bool  # --gamma adaptive / heuristic (γ chosen per step by specbench's loop)
    threads: bool  # --threads sets the engine's own compute threads (torch's are the process's)
    # --bit-exact: every verify pass of specbench's loop as one-token passes over the engine's KV cache (its
    # decoding step), so greedy speculative output must equal greedy plain output (decoding/stepwise.py)
    bit_exact: bool = False
    # --concurrency / --request-rate: the run's examples served as one load (requests in flight together, continuous
    # batching) by `ServesLoad.serve_load`, instead of one example at a time
    concurrency: bool = False
    # `verify` without replays: seeded samples of its plain and speculative arms against each other and against the
    # target's exact law (its session holds a torch copy), greedy identity, planted faults (evidence/own_loop.py)
    black_box_verify: bool = False

    def rows(self) -> list[tuple[str, bool]]:
        """(capability, yes/no) in declaration order, for listings and docs."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


OWN_LOOP = Capabilities(
    plain=True,
    specbench_drafts=False,
    own_drafts=True,
    exactness_replay=False,
    per_step_timing=False,
    batches=False,
    sampling=True,
    exact_shapes=False,
    gamma_policies=False,
    threads=False,
)  # an engine that runs its own speculative loop (HF's, vLLM's): plain, its own drafts and T > 0, nothing else


@dataclass(frozen=True)
class DecodeJob:
    """How one run decodes an example, beside the prompt, seed and budget: fixed for the run, handed to both arms."""

    sampling: SamplingConfig
    proposer: Proposer  # the draft of the run's --draft (already loaded on the session)
    gamma_policy: Callable[
        [], GammaPolicy
    ]  # a fresh γ policy per decode: nothing learnt on one example steers the next
    fixed_gamma: int | None  # the integer γ, when the run has one (an engine with its own loop takes only this)
    min_confidence: float  # --draft-confidence (0: off)
    pad_to: int  # --exact-shapes: every pass fed this many tokens (1: off)
    bit_exact: bool = False  # --bit-exact: the speculative arm's verify passes as one-token passes (the baseline's)
    # verify's negative control: a fault planted in the engine's own acceptance rule (one of EngineSpec.plants)
    plant: str | None = None


@dataclass(frozen=True)
class LoadSchedule:
    """How a load run submits its requests (the same for both arms and every repeat)."""

    concurrency: int  # at most this many requests in flight; the next is submitted as soon as one finishes
    request_rate: float | None  # Poisson arrivals at this many requests/s (seeded exponential gaps); None: all at once
    seed: int  # the arrival gaps' seed


@dataclass
class ServedLoad:
    """One arm's pass over a load run's requests: a DecodeResult per request, in submission order (prefill_s: time to
    first token from the request's own submission; decode_s: from the first token to the last), and the batch's
    wall seconds from the first submission to the last token."""

    results: list[DecodeResult]
    wall_s: float
    submitted_s: list[float] = field(default_factory=list)  # each request's submission, seconds after the start


class ServesLoad(Protocol):
    """What an engine with the `concurrency` capability adds to Engine."""

    def serve_load(
        self,
        session: Session,
        job: DecodeJob,
        arm: str,
        prompts: list[list[int]],
        seeds: list[int],
        max_new: int,
        schedule: LoadSchedule,
    ) -> ServedLoad:
        """Serve every prompt on one engine (`arm`: "baseline" plain, "speculative" the run's method) under
        `schedule`; request i gets seeds[i]."""


class Engine(Protocol):
    """An engine at run time: sessions it opens and the two arms of every paired measurement."""

    def open_session(self, load: LoadSpec) -> Session:
        """Load the target (and nothing else yet) as `load` says; a missing build is a one-line SpecbenchError."""

    def baseline(
        self, session: Session, job: DecodeJob, prompt_ids: list[int], seed: int, max_new: int
    ) -> DecodeResult:
        """Plain decoding of one example: the arm every speedup divides by."""

    def speculative(
        self, session: Session, job: DecodeJob, prompt_ids: list[int], seed: int, max_new: int
    ) -> DecodeResult:
        """Speculative decoding of one example with job.proposer (or the engine's own drafting)."""

    def check_proposer(self, proposer: Proposer) -> None:
        """Refuse a loaded draft this engine cannot run (one line), before any timing."""


@dataclass(frozen=True)
class EngineSpec:
    """An engine as the registry knows it, without importing it."""

    name: str  # the --engine value, recorded in every manifest and run id (never renamed)
    summary: str  # one line for `specbench list engines` and --help
    capabilities: Capabilities
    session_kind: str  # engines with the same kind share one loaded session (a sweep reuses it across them)
    runtime: str  # "module:attribute" of the Engine object, imported on first use
    rules: Callable[[RunConfig], None]  # the engine's own refusals of a configuration (one-line SpecbenchError)
    setup: str | None = None  # the command that builds what the engine needs beyond specbench's install (None: nothing)
    own_draft_names: tuple[str, ...] = ()  # --draft values (or `<name>:` prefixes) that name the engine's own methods
    # faults it can plant in its own acceptance rule: verify's negative controls (DecodeJob.plant)
    plants: tuple[str, ...] = ()

    def engine(self) -> Engine:
        import importlib

        module, attribute = self.runtime.split(":")
        return getattr(importlib.import_module(module), attribute)

"""Contracts where proposer, verifier and runner meet.

A draft of any kind (a model, an n-gram table, prompt lookup) is a `Proposer`; it returns a
`Proposal`; for a batch of rows it hands over its `BatchProposer` (decoding/batched/drafts.py);
the verifier turns target logits plus a proposal into a `Verdict`; an engine
turns a prompt into a `DecodeResult` of raw counts and times. Ratios are derived later,
in one place (specbench.measure.stats.metrics), never here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from specbench.config import SamplingConfig

if TYPE_CHECKING:
    from specbench.decoding.cached_model import CachedModel
    from specbench.decoding.timing import Clock


@dataclass
class Proposal:
    """γ' drafted tokens and the law each was drawn from: a chain, or with `parents` a token tree (tree.py).

    A tree's tokens are its nodes in topological order; its depth, not its node count, is what γ bounds
    (a step emits at most depth + 1 tokens). Row i of q_probs is the law node i was drawn from given its
    root-to-node path, independently of its earlier siblings; a deterministic node's row is a point mass.
    """

    tokens: torch.Tensor  # [γ'] int64, on the target's device (a tree: its n nodes)
    q_probs: torch.Tensor | None  # [γ', V] float32 processed draft law; None at T = 0 (greedy needs no q); a tree at
    # T > 0: None means every node is deterministic (point masses)
    forward_calls: int  # draft model forward passes spent (0 for model-free drafts)
    parents: list[int] | None = None  # a tree: node i's parent (an earlier node, or −1 for a child of cur); None: a
    # chain, verified on the causal path exactly as before trees existed


@dataclass
class Verdict:
    """What one target pass decided about a proposal."""

    n_accepted: int  # drafted tokens kept, 0..γ' (a tree: the accepted path's length)
    next_token: int  # correction (if a rejection happened) or bonus token from p_{γ'+1}
    expected_accept: list[float]  # Σ_x min(p_i(x), q_i(x)) at each verified position up to the first rejection;
    # a tree: the same sum at every child tried, with p the residual law that child was judged against
    path: list[int] | None = None  # a tree: the accepted nodes, cur's child first; None for a chain (its first n)


class Proposer(Protocol):
    """Anything that drafts tokens for the target to verify."""

    name: str
    is_model: bool  # True when proposing runs a neural network (its cost enters c)

    def begin(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        """Reset all per-example state and absorb the prompt (prefill, index building).

        `max_new_tokens` bounds how far this example will go (a model draft sizes a static cache by it).
        """

    def propose(
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        """Draft up to `gamma` tokens continuing `tokens` (the decoder sequence so far, last = newest).

        `min_confidence` > 0: a draft that knows its own law stops early once the probability it
        gave its newest token falls below it (that token is still proposed), as HF's
        `assistant_confidence_threshold`. The stop depends on the draft's own draws only, so the
        verified output keeps the target's law. Model-free drafts ignore it.
        """

    def batched(self, size: int, device: torch.device) -> BatchProposer:
        """This one draft drafting for every row of a batch of `size` rows (decoding/batched/): a model draft
        drafts all rows in one pass of its network, a model-free one proposes per row from a copy of itself."""


@runtime_checkable
class ModelBacked(Protocol):
    """The optional hooks of a draft that runs a network (a model draft, lookup+model): what calibration, the
    hf-assisted engine, the bench's profiler and the pilot ask of it. A model-free draft implements none of them;
    callers ask through the functions below, which answer for any Proposer."""

    def model_caches(self) -> list[CachedModel]:
        """The KV-cache wrappers of the networks this draft runs ([] for a model-free draft).

        The runner sizes, compiles and warms them with the target's, and calibration times their
        one-token pass; a non-empty list is exactly what `is_model` promises.
        """

    def hf_assistant(self) -> torch.nn.Module | None:
        """The model HF's assisted generation can take as `assistant_model` to draft the same way; None when
        HF has no counterpart (model-free drafts, the hybrid). The hf-assisted engine and the bench use it."""

    def set_timer(self, clock: Clock | None) -> None:
        """Profile every forward of the draft's networks with `clock` (None: stop), starting a fresh
        `forward_times` list on each of `model_caches()`; a no-op for a model-free draft. Bench only: it syncs."""

    def lookup_history(self) -> list[int] | None:
        """Tokens prompt lookup supplied at each proposal since begin(), for a draft that fills lookup's
        shortfall with a model (the pilot's lookup law); None for a draft with no such split."""


def model_caches(proposer: Proposer) -> list[CachedModel]:
    """The draft's networks' cache wrappers ([] for a draft that runs none)."""
    return proposer.model_caches() if isinstance(proposer, ModelBacked) else []


def hf_assistant(proposer: Proposer) -> torch.nn.Module | None:
    """The network HF's assisted generation can take as assistant_model (None: HF has no such draft)."""
    return proposer.hf_assistant() if isinstance(proposer, ModelBacked) else None


def set_timer(proposer: Proposer, clock: Clock | None) -> None:
    """Profile the draft's forwards with `clock` (None: stop); nothing for a draft that runs no network."""
    if isinstance(proposer, ModelBacked):
        proposer.set_timer(clock)


def lookup_history(proposer: Proposer) -> list[int] | None:
    """Tokens lookup supplied at each proposal since begin(), for a lookup-then-model draft; None otherwise."""
    return proposer.lookup_history() if isinstance(proposer, ModelBacked) else None


@runtime_checkable
class LearnsOutputs(Protocol):
    """The optional hooks of a draft that learns from the run's earlier outputs (suffix decoding's cache of earlier
    responses). The runner hands it each example's finished output once, after the example's timed decodes, so
    warm-ups, repeats, pilots and replays never teach it, and resets it at the start and end of every run, so nothing
    learnt in one sweep cell reaches the next. Callers ask through the functions below, which answer for any
    Proposer."""

    def remember_output(self, token_ids: list[int]) -> None:
        """Add one finished output (generated tokens) to what later examples' proposals may copy from."""

    def forget_outputs(self) -> None:
        """Drop every remembered output (a new run starts from nothing)."""


def remember_output(proposer: Proposer, token_ids: list[int]) -> None:
    """Teach a draft that learns from earlier outputs one finished output; nothing for any other draft."""
    if isinstance(proposer, LearnsOutputs):
        proposer.remember_output(list(token_ids))


def forget_outputs(proposer: Proposer) -> None:
    """Reset what a draft learnt from earlier outputs; nothing for any other draft."""
    if isinstance(proposer, LearnsOutputs):
        proposer.forget_outputs()


@runtime_checkable
class KeepsLearnt(Protocol):
    """The optional hooks of a learning draft whose state the remembered outputs cannot rebuild (token recycling's
    table, filled from verify passes' logits, which no record keeps): the runner writes the state after every
    example (measure/run/runner.keep_learnt) and a resumed run restores it, so a resume drafts as an
    uninterrupted run would."""

    def learnt(self) -> dict:
        """What finished examples taught it (the committed state), as a JSON object."""

    def restore_learnt(self, state: object) -> None:
        """Take back a state `learnt()` gave (raises ValueError on anything else: a file is not trusted)."""


@runtime_checkable
class ObservesPasses(Protocol):
    """The optional hook of a draft that learns from the target's verify passes (lookahead decoding's guesses,
    drafts/lookahead.py). After each verified proposal, the batch-1 loop (speculative.py) hands it the target's greedy
    choice at every position of that pass: an argmax of logits the pass computed anyway, no draw, so what the draft
    proposes next is still a function of earlier passes, independent of the next step's draws."""

    def observe_pass(self, choices: torch.Tensor) -> None:
        """[n+1] int64 on the target's device: the target's argmax after cur and after each node of the proposal the
        draft last made (a chain or a tree, in its node order); a draft copies it to the host when it next proposes,
        so that copy is draft time. A draft with an `observe_top` attribute K > 1 (token recycling,
        drafts/recycle.py) is handed each row's K likeliest ids instead, best first: [n+1, K]. A draft whose
        `observes_prefill` is True is also handed the prefill's last row ([1] or [1, K], the law after the prompt's last
        token), after begin() and before its first proposal."""


@runtime_checkable
class ReadsHidden(Protocol):
    """The optional hook of a draft that drafts from the target's hidden states (an EAGLE head, drafts/eagle.py). The
    batch-1 loop (speculative.py) then has the target's passes keep their final hidden states (CachedModel.hidden_log;
    other drafts' passes ask for nothing more) and hands the draft those of every position it keeps: the prompt's after
    the prefill, [cur, accepted tokens] after each verify pass, so the draft's next proposal starts from the target's
    own features of the sequence so far. Chain proposals only: a tree's rows are not handed over (tree_step refuses)."""

    def observe_hidden(self, hidden: torch.Tensor) -> None:
        """[k, H] on the target's device: the target's final hidden states (what its output layer reads) at the k
        positions just kept, in order, each after the one the draft last saw; for a draft with `feature_layers` (an
        EAGLE-3 head) those layers' outputs side by side instead, [k, len·H]."""


class BatchProposer(Protocol):
    """A draft's form for a batch (decoding/batched/drafts.py): every live row drafts at each step.

    Rows are `Row`s (below: each row's tokens, budget, generator and index in the batch); a row draws
    only from its own generator, in the batch-1 draft's order, so each row reproduces its batch-1 run.
    """

    def begin(self, rows: list[Row], pad_id: int) -> None:
        """Absorb every row's prompt (`pad_id` fills the left padding of a batched cache; never attended)."""

    def propose(self, rows: list[Row], gammas: list[int], sampling: SamplingConfig) -> list[Proposal]:
        """Row i drafts up to gammas[i] tokens after its tokens (0: an empty proposal); one Proposal per row."""

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the live rows at positions `keep` ([b'] int64, in order) of any batched state."""


@dataclass
class DecodeResult:
    """Raw counts and times of one example decoded by one engine."""

    token_ids: list[int]  # generated tokens (EOS included if emitted), never more than max_new_tokens
    stop_reason: str  # "eos" or "length"
    prefill_s: float  # time to first token: prompt encoding/prefill of every model + first token
    decode_s: float  # time after the first token until the last
    target_calls: int = 0  # target forward passes after prefill
    draft_calls: int = 0  # draft forward passes after prefill (0 for model-free drafts)
    drafted: int = 0  # draft tokens proposed and verified (a tree step: all its nodes, each fed to the target)
    accepted: int = 0  # of those, accepted by the rejection rule (a tree step: its accepted path's length)
    trials: int = 0  # Bernoulli acceptance trials: Σ over steps of min(n_accepted + 1, γ') (a tree: children tried)
    accept_lengths: list[int] = field(default_factory=list)  # n_accepted of every verification step
    draft_lengths: list[int] = field(
        default_factory=list
    )  # γ' drafted at every verification step (< γ near the budget's end or for short lookups; a tree: its nodes)
    draft_depths: list[int] = field(
        default_factory=list
    )  # depth of every verification step's proposal (a chain: γ', as draft_lengths; a tree: its longest path)
    proposal_lengths: list[int] = field(
        default_factory=list
    )  # what the proposer offered at every pass the budget did not shorten (0 = nothing)
    expected_accept: list[float] = field(
        default_factory=list
    )  # Σ min(p, q) of every verified position (a tree: of every child tried, against the law it was judged by)
    pass_lengths: list[int] = field(
        default_factory=list
    )  # tokens fed to each target pass after prefill (1 = a plain step; g+1 = a verify pass, a tree's nodes + 1)
    tree_paths: list[list[int] | None] = field(
        default_factory=list
    )  # per verification step (accept_lengths' order): a token tree's accepted nodes, None for a chain step
    draft_s: float = 0.0  # decode time spent proposing
    verify_s: float = 0.0  # decode time spent in target passes and verification
    # batched engines (decoding/batched/): the batch this row was decoded in; batch-1 engines leave the defaults
    batch_size: int = 1  # rows decoded together (1: one sequence at a time)
    batch_s: float = 0.0  # wall seconds of the whole batch, its prefill to its last row's stop (0: not batched)
    batch_pass_rows: list[int] = field(default_factory=list)  # live rows in each batched target pass after prefill
    batch_pass_widths: list[int] = field(
        default_factory=list
    )  # tokens per row fed to each such pass (the rectangle's width)
    kept_lengths: list[int] = field(
        default_factory=list
    )  # tokens each verify step kept for this row: n + 1, or fewer under the min policy


def clip_at_stop(new_tokens: list[int], eos_ids: frozenset[int], room: int) -> tuple[list[int], bool]:
    """Cut new tokens after the first EOS (kept) and to at most `room`; → (tokens, stopped at EOS)."""
    for i, tok in enumerate(new_tokens[:room]):
        if tok in eos_ids:
            return new_tokens[: i + 1], True
    return new_tokens[:room], False


@dataclass
class Row:
    """One example inside a batch."""

    index: int  # its place in the caller's prompt list (results come back in that order)
    tokens: list[int]  # the decoder sequence: prompt + generated so far
    budget: int  # max_new_tokens of this row
    generator: torch.Generator | None  # this row's draws only: rows are independent
    res: DecodeResult  # token_ids is the generated list, appended as the row advances
    done: bool = False

    @property
    def out(self) -> list[int]:
        return self.res.token_ids

    @property
    def room(self) -> int:
        return self.budget - len(self.out)

    def emit(self, new: list[int], eos_ids: frozenset[int]) -> None:
        """Append new tokens, cut at the first EOS (kept) and at the budget; mark the row done when it stops."""
        new, stopped = clip_at_stop(new, eos_ids, self.room)
        self.out.extend(new)
        self.tokens.extend(new)
        if stopped:
            self.res.stop_reason = "eos"
        self.done = stopped or self.room <= 0

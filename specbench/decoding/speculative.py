"""Speculative decoding (Leviathan, Kalman & Matias 2023, Algorithm 1) with KV-cache rollback.

Invariant of the step loop: the target's cache covers every token but the newest (`cur`).
A step drafts x_1..x_γ' from `cur`, runs the target once over [cur, x_1..x_γ'] to get
p_1..p_γ'+1, verifies, then crops the target cache to [.., cur, x_1..x_n] and makes the
correction/bonus token the new `cur`. γ comes from a policy (gamma_policy.py: fixed, adaptive or
HF's heuristic) that sees only past steps; γ' = min(γ, room − 1), so a step can never emit more
than max_new_tokens; tokens after an EOS are dropped exactly as the baseline stops there.

A proposal with `parents` is a token tree (tree.py): γ' bounds its depth, the target sees [cur, nodes]
in one pass under the tree's mask and positions, the tree's rule (accept.py) picks a path, and the
cache is compacted to [.., cur, path]. A chain never takes that route, so its passes stay unmasked.
After either pass, a draft that learns from verify passes (base.ObservesPasses: lookahead) is handed the target's
argmax at each of its positions, and a draft that drafts from the target's hidden states (base.ReadsHidden: an EAGLE
head) the final hidden states of the positions kept (the prompt's after the prefill).

`stepwise` (--bit-exact): every target pass after the prefill, chain or tree, runs as consecutive one-token passes
(stepwise.py), so each logit the verifier reads is the one the baseline's decoding step computes at that prefix.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from specbench.config import SamplingConfig
from specbench.decoding.accept import verify_greedy, verify_sampling, verify_tree_greedy, verify_tree_sampling
from specbench.decoding.autoregressive import prompt_split
from specbench.decoding.base import (
    DecodeResult,
    ObservesPasses,
    Proposal,
    Proposer,
    ReadsHidden,
    Verdict,
    clip_at_stop,
)
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.gamma_policy import FixedGamma, GammaPolicy
from specbench.decoding.sampling import next_token, processed_probs
from specbench.decoding.stepwise import depth_first, stepwise_forward, stepwise_keep_path, stepwise_tree
from specbench.decoding.timing import Clock
from specbench.decoding.tree import TokenTree
from specbench.errors import SpecbenchError


@dataclass
class StepContext:
    """What every step of one example's loop shares."""

    target: CachedModel  # the target's cache: covers every token but the newest between steps
    proposer: Proposer
    sampling: SamplingConfig
    generator: torch.Generator | None
    min_confidence: float  # a draft that knows its law stops below it (0 = never)
    pad_to: int  # every target pass fed at least this many tokens (1 = off; --exact-shapes)
    clock: Clock
    res: DecodeResult  # counts and times, updated by each step
    stepwise: bool = False  # --bit-exact: every verify pass as one-token passes (stepwise.py)
    observes: bool = field(init=False)  # the draft learns from verify passes (lookahead): asked once, not every step
    observe_top: int = field(init=False)  # how many of each row's likeliest ids it is handed (1: the argmax)
    reads_hidden: bool = field(init=False)  # the draft reads the target's hidden states (EAGLE): asked once

    def __post_init__(self) -> None:
        self.observes = isinstance(self.proposer, ObservesPasses)
        self.observe_top = handed_top(self.proposer)
        self.reads_hidden = reads_hidden(self.proposer)

    def hand_hidden(self, rows: list[int] | int) -> None:
        """Give a ReadsHidden draft the target's hidden states of the positions kept: the logged pass's `rows` (an
        int n: its first n), then forget the log."""
        log = self.target.hidden_log or []
        hidden = torch.cat(log) if len(log) != 1 else log[0]  # [k, H]: one pass, or one-token passes in order
        log.clear()
        kept = hidden[:rows] if isinstance(rows, int) else hidden[torch.tensor(rows, device=hidden.device)]
        self.proposer.observe_hidden(kept)  # type: ignore[attr-defined]  # ReadsHidden, checked once


def reads_hidden(proposer: Proposer) -> bool:
    """Whether the draft drafts from the target's hidden states (the target's passes then keep them)."""
    return isinstance(proposer, ReadsHidden)


@contextlib.contextmanager
def hidden_kept(target: CachedModel, proposer: Proposer) -> Iterator[bool]:
    """Around one example's loop: for a ReadsHidden draft (an EAGLE head) the target's passes keep their final hidden
    states (CachedModel.hidden_log) until it ends, however it ends; nothing for any other draft. → whether they do."""
    keep = reads_hidden(proposer)
    if keep:
        target.hidden_log = []
        target.hidden_layers = tuple(getattr(proposer, "feature_layers", ()))  # an EAGLE-3 head's fused layers
    try:
        yield keep
    finally:
        if keep:
            target.hidden_log, target.hidden_layers = None, ()


def decode_speculative(
    target: CachedModel,
    proposer: Proposer,
    prompt_ids: list[int],
    *,
    gamma: int | GammaPolicy,
    max_new_tokens: int,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    eos_ids: frozenset[int],
    decoder_start_id: int | None = None,
    min_confidence: float = 0.0,
    pad_to: int = 1,
    stepwise: bool = False,
) -> DecodeResult:
    """`pad_to` > 1 (--exact-shapes): every target pass is padded to pad_to tokens (copies of its
    last token; the extra rows are ignored and their cache slots cropped), matching a baseline run
    with the same pad_to, so both engines compute every logit with the same kernel shapes.
    `stepwise` (--bit-exact): every target pass after the prefill runs as one-token passes, the plain
    baseline's own steps (no padding: the baseline is unchanged), so greedy output equals the baseline's."""
    policy = FixedGamma(gamma) if isinstance(gamma, int) else gamma
    clock = Clock(target.devices)
    with hidden_kept(target, proposer) as keep_hidden:
        t0 = clock.now()
        tokens = prefill_both(target, proposer, prompt_ids, max_new_tokens, sampling, generator, decoder_start_id)
        out = tokens[-1:]
        t1 = clock.now()
        res = DecodeResult(token_ids=out, stop_reason="length", prefill_s=t1 - t0, decode_s=0.0)
        ctx = StepContext(target, proposer, sampling, generator, min_confidence, pad_to, clock, res, stepwise)
        if keep_hidden:  # the prompt's: the head's own prefill happens in its first proposal (draft time)
            ctx.hand_hidden(len(tokens) - 1)
        stopped = out[0] in eos_ids
        while not stopped and len(out) < max_new_tokens:
            room = max_new_tokens - len(out)
            wanted = policy.next_gamma()
            g = min(wanted, room - 1)  # γ': a step never emits past the budget
            new = plain_step(ctx, tokens) if g == 0 else draft_step(ctx, tokens, g, wanted == g, policy)
            new, stopped = clip_at_stop(new, eos_ids, room)
            out.extend(new)
            tokens.extend(new)
        res.decode_s = clock.now() - t1
    res.stop_reason = "eos" if stopped else "length"
    return res


def prefill_both(
    target: CachedModel,
    proposer: Proposer,
    prompt_ids: list[int],
    max_new_tokens: int,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    decoder_start_id: int | None,
) -> list[int]:
    """Start both sides on the prompt; → the decoder tokens, ending with the first generated one."""
    encoder_ids, tokens = prompt_split(target, prompt_ids, decoder_start_id)
    target.start(encoder_ids, capacity=len(tokens) + max_new_tokens)
    proposer.begin(prompt_ids, max_new_tokens)
    logits = target.forward(torch.tensor(tokens, device=target.device))  # [V]
    if isinstance(proposer, ObservesPasses) and getattr(proposer, "observes_prefill", False):  # token recycling
        proposer.observe_pass(pass_choices(logits[None], handed_top(proposer)))
    return tokens + [int(next_token(logits, sampling, generator))]


def plain_step(ctx: StepContext, tokens: list[int]) -> list[int]:
    """One token left in the budget: a plain target step, no draft; → [the new token]."""
    ta = ctx.clock.now()
    cached = ctx.target.length
    ids = torch.tensor(tokens[-1:] * ctx.pad_to, device=ctx.target.device)
    logits = ctx.target.forward(ids, all_logits=True)[0]  # [V]
    ctx.target.truncate(cached + 1)  # drop the padding's cache slots
    new = [int(next_token(logits, ctx.sampling, ctx.generator))]
    if ctx.reads_hidden:
        ctx.hand_hidden(1)  # cur's (the padding's rows dropped)
    ctx.res.target_calls += 1
    ctx.res.pass_lengths.append(1)
    ctx.res.verify_s += ctx.clock.now() - ta
    return new


def draft_step(ctx: StepContext, tokens: list[int], g: int, unbounded: bool, policy: GammaPolicy) -> list[int]:
    """Draft up to g tokens, verify them in one target pass, roll the cache back to what was kept;
    → the accepted tokens and the correction/bonus token. `unbounded`: the budget did not cut γ."""
    ta = ctx.clock.now()
    proposal = ctx.proposer.propose(tokens, g, ctx.sampling, ctx.generator, ctx.min_confidence)
    if unbounded:  # the proposer's own length (the law theory needs)
        ctx.res.proposal_lengths.append(proposal.tokens.shape[0])
    if proposal.parents is not None:
        return tree_step(ctx, tokens, proposal, g, policy, ta)
    g = proposal.tokens.shape[0]
    tb = ctx.clock.now()
    cached = ctx.target.length
    ids = pass_ids(ctx, tokens[-1], proposal.tokens)
    if ctx.stepwise:
        logits = stepwise_forward(ctx.target, ids)  # [g+1, V], one decoding step each
    else:
        logits = ctx.target.forward(ids, all_logits=True)[: g + 1]  # [g+1, V]
    drafted, verdict = judge_proposal(ctx, proposal, logits)
    if ctx.observes:  # a draft that learns from verify passes (lookahead, recycling) sees the target's choices
        ctx.proposer.observe_pass(pass_choices(logits, ctx.observe_top))  # type: ignore[attr-defined]  # checked once
    n = verdict.n_accepted
    if ctx.reads_hidden:
        ctx.hand_hidden(n + 1)  # [cur, x_1..x_n]'s
    ctx.target.truncate(cached + 1 + n)  # keep [.., cur, x_1..x_n]
    count_step(ctx.res, proposal, g, verdict)
    policy.update(g, n)
    tc = ctx.clock.now()
    ctx.res.draft_s += tb - ta
    ctx.res.verify_s += tc - tb
    return drafted[:n] + [verdict.next_token]


def handed_top(proposer: Proposer) -> int:
    """How many of each row's likeliest ids an ObservesPasses draft is handed: its `observe_top`, else 1 (argmax)."""
    return int(getattr(proposer, "observe_top", 1))


def pass_choices(logits: torch.Tensor, top: int) -> torch.Tensor:
    """What an ObservesPasses draft is handed of a pass's rows: each row's argmax [n+1] (top 1), else its `top`
    likeliest ids, best first [n+1, top]."""
    return logits.argmax(-1) if top == 1 else logits.topk(top, dim=-1).indices


def pass_ids(ctx: StepContext, cur: int, drafted: torch.Tensor) -> torch.Tensor:
    """[cur, x_1..x_g'] (padded to pad_to with copies of the last: the padded baseline's pass shape) →
    [max(g'+1, pad_to)]."""
    ids = torch.cat([torch.tensor([cur], device=ctx.target.device), drafted])
    if ctx.pad_to > ids.shape[0]:
        ids = torch.cat([ids, ids[-1:].repeat(ctx.pad_to - ids.shape[0])])
    return ids


def judge_proposal(ctx: StepContext, proposal: Proposal, logits: torch.Tensor) -> tuple[list[int], Verdict]:
    """Target logits [g'+1, V] + the proposal → (drafted ids on the host, the verdict)."""
    g = proposal.tokens.shape[0]
    if ctx.sampling.greedy:  # one host sync a step: drafted ids and the target's choices together
        ids = torch.cat([proposal.tokens, logits.argmax(-1)]).tolist()
        return ids[:g], verify_greedy(ids[:g], ids[g:])
    verdict = verify_sampling(proposal.tokens, proposal.q_probs, processed_probs(logits, ctx.sampling), ctx.generator)  # type: ignore[arg-type]  # sampling: a proposal carries q_probs
    return proposal.tokens.tolist(), verdict


def count_step(res: DecodeResult, proposal: Proposal, g: int, verdict: Verdict) -> None:
    """Add one verified step's raw counts to the result."""
    n = verdict.n_accepted
    res.target_calls += 1
    res.pass_lengths.append(g + 1)
    res.draft_calls += proposal.forward_calls
    res.drafted += g
    res.accepted += n
    res.trials += min(n + 1, g)
    if g:  # an empty proposal (no n-gram match) is a plain step, not a verified draft
        res.accept_lengths.append(n)
        res.draft_lengths.append(g)
        res.draft_depths.append(g)  # a chain's depth is its length
        res.tree_paths.append(None)
    res.expected_accept.extend(verdict.expected_accept)


def tree_step(
    ctx: StepContext, tokens: list[int], proposal: Proposal, g: int, policy: GammaPolicy, ta: float
) -> list[int]:
    """draft_step's rest for a token tree of depth ≤ g: one masked target pass over [cur, nodes] (never padded:
    --exact-shapes covers chains only; under --bit-exact one-token passes, node by node, each over the prefix, cur and
    its ancestors), the tree's verdict, the cache compacted to [.., cur, path];
    → the accepted path's tokens and the correction/bonus token."""
    tree = TokenTree(tuple(proposal.parents or ()))
    if tree.size != proposal.tokens.shape[0] or tree.depth > g:
        raise SpecbenchError(
            f"a tree proposal of {proposal.tokens.shape[0]} tokens came with {tree.size} parents and depth "
            f"{tree.depth} (at most {g}): this is a bug in the proposer {ctx.proposer.name!r}"
        )
    tb = ctx.clock.now()
    cached = ctx.target.length
    ids = torch.cat([torch.tensor([tokens[-1]], device=ctx.target.device), proposal.tokens])  # [n+1]
    logits = stepwise_tree(ctx.target, ids, tree) if ctx.stepwise else ctx.target.forward_tree(ids, tree)  # [n+1, V]
    drafted, verdict = judge_tree(ctx, proposal, tree, logits)
    if ctx.observes:
        ctx.proposer.observe_pass(pass_choices(logits, ctx.observe_top))  # type: ignore[attr-defined]  # checked once
    path = verdict.path or []
    if ctx.reads_hidden:  # an EAGLE head's tree: the hidden states of cur and the accepted path, before the log grows
        ctx.hand_hidden(logged_rows(tree, path, ctx.stepwise))
    if ctx.stepwise:
        stepwise_keep_path(ctx.target, cached, ids, path)
        if ctx.target.hidden_log:  # the rebuilt path's passes: their states were handed over from the tree's
            ctx.target.hidden_log.clear()
    else:
        ctx.target.keep_path(cached, path)  # keep [.., cur, path]
    count_tree_step(ctx.res, proposal, verdict, tree.depth)
    policy.update(tree.depth, len(path))  # a γ policy sees the tree as a chain of its depth
    tc = ctx.clock.now()
    ctx.res.draft_s += tb - ta
    ctx.res.verify_s += tc - tb
    return [drafted[i] for i in path] + [verdict.next_token]


def logged_rows(tree: TokenTree, path: list[int], stepwise: bool) -> list[int]:
    """The rows of a tree pass's hidden-state log that hold cur and the accepted path's nodes, in path order (pure):
    row 1 + i for node i of one masked pass; under --bit-exact the one-token passes logged cur, then the nodes in
    depth-first order (stepwise.stepwise_tree)."""
    if not stepwise:
        return [0] + [1 + node for node in path]
    order = {node: 1 + k for k, node in enumerate(depth_first(tree))}
    return [0] + [order[node] for node in path]


def judge_tree(
    ctx: StepContext, proposal: Proposal, tree: TokenTree, logits: torch.Tensor
) -> tuple[list[int], Verdict]:
    """Target logits [n+1, V] at [cur, nodes] + a tree proposal → (node ids on the host, the verdict)."""
    n = tree.size
    if ctx.sampling.greedy:  # one host sync: node ids and the target's choices together
        ids = torch.cat([proposal.tokens, logits.argmax(-1)]).tolist()
        return ids[:n], verify_tree_greedy(tree, ids[:n], ids[n:])
    ids = proposal.tokens.tolist()
    return ids, verify_tree_sampling(tree, ids, proposal.q_probs, processed_probs(logits, ctx.sampling), ctx.generator)


def count_tree_step(res: DecodeResult, proposal: Proposal, verdict: Verdict, depth: int) -> None:
    """Add one tree step's raw counts: every node was drafted and fed to the target (drafted, draft_lengths),
    the accepted path is what was kept (accepted, accept_lengths), the tree's `depth` bounds it (draft_depths), and
    each child tried is one trial."""
    n = proposal.tokens.shape[0]
    res.target_calls += 1
    res.pass_lengths.append(n + 1)
    res.draft_calls += proposal.forward_calls
    res.drafted += n
    res.accepted += verdict.n_accepted
    res.trials += len(verdict.expected_accept)
    if n:
        res.accept_lengths.append(verdict.n_accepted)
        res.draft_lengths.append(n)
        res.draft_depths.append(depth)
        res.tree_paths.append(list(verdict.path or ()))
    res.expected_accept.extend(verdict.expected_accept)

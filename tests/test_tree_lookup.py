"""Multi-candidate prompt lookup (`--draft tree-lookup`, decoding/drafts/tree_lookup.py): its candidates and trie,
greedy identity through the tree route on prompts planted so that a second branch is really accepted (with the
controls that must fail), the exact law of one sampled step (and a broken rule's), `verify`'s step law on a tree
proposer (sampled with power, and exact), and what #MAT and mean acceptance length read from a tree run."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
import torch
from conftest import VOCAB, sharpen, small_llama, tiny_llama
from helpers import greedy_tail, off_first_branch, recorded_tree_steps

import specbench.decoding.speculative as speculative
from specbench.config import RunConfig, SamplingConfig
from specbench.decoding.accept import accepted_count
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft
from specbench.decoding.drafts.tree_lookup import (
    DEFAULT_NODES,
    TreeLookupDraft,
    build_trie,
    is_chain,
    match_continuations,
    trie_proposal,
)
from specbench.decoding.sampling import processed_probs
from specbench.decoding.speculative import decode_speculative
from specbench.decoding.tree import TokenTree
from specbench.engines import check_config
from specbench.errors import SpecbenchError
from specbench.evidence.controls import CONTROLS
from specbench.evidence.exact_laws import f64, memo, target_sequence_law, tree_step_law
from specbench.evidence.pair_step import pair_step_checks, tree_logits
from specbench.evidence.stat_checks import exact_check
from specbench.run_specs import parse_draft

CPU = torch.device("cpu")
GREEDY = SamplingConfig()


# --- the candidates and the trie


def test_candidates_come_longest_match_first_then_most_recent():
    #          0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15
    tokens = [9, 2, 3, 4, 4, 7, 2, 3, 5, 5, 8, 3, 6, 9, 2, 3]  # suffix (9, 2, 3): a 3-gram at 0..2
    got = match_continuations(tokens, gamma=2, max_ngram=3, min_ngram=1, limit=10)
    # n = 3: the match at 0..2 → (4, 4); n = 2: (2, 3) at 6..7 → (5, 5); n = 1: 3 at 11 → (6, 9)
    assert got == [[4, 4], [5, 5], [6, 9]]
    assert match_continuations(tokens, 2, 3, 2, 10) == [[4, 4], [5, 5]]  # min_ngram 2 drops the 1-gram match
    assert match_continuations(tokens, 2, 3, 1, 2) == [[4, 4], [5, 5]]  # at most `limit` branches
    assert match_continuations([1, 2, 3], 4, 3, 1, 4) == []  # no earlier occurrence of the newest token
    same = [5, 1, 2, 6, 1, 2, 7, 1]  # two matches of (1,) with one continuation start: distinct continuations only
    assert match_continuations(same, 1, 3, 1, 4) == [[2]]
    assert match_continuations(same, 3, 3, 1, 4) == [[2, 7, 1], [2, 6, 1]]


def test_the_trie_shares_prefixes_keeps_order_and_its_budget():
    tokens, parents = build_trie([[4, 5, 6], [4, 5, 7], [8, 9], [4, 1]], max_nodes=10)
    assert tokens == [4, 5, 6, 7, 8, 9, 1] and parents == [-1, 0, 1, 1, -1, 4, 0]
    tree = TokenTree(parents)
    assert tree.children(-1) == (0, 4) and tree.children(1) == (2, 3) and tree.depth == 3
    assert build_trie([[4, 5, 6], [4, 5, 7], [8, 9]], max_nodes=4) == ([4, 5, 6, 7], [-1, 0, 1, 1])  # cut at 4
    assert build_trie([[4, 5, 6], [8, 9]], max_nodes=4) == ([4, 5, 6, 8], [-1, 0, 1, -1])  # a branch cut short
    assert is_chain([-1, 0, 1]) and is_chain([]) and not is_chain([-1, 0, -1])


def test_proposals_bound_depth_and_nodes_and_send_one_branch_as_a_chain():
    draft = TreeLookupDraft(VOCAB, CPU)
    rng = random.Random(0)
    trees = 0
    for _ in range(300):
        tokens = [rng.randrange(6) for _ in range(rng.randrange(2, 40))]
        gamma = rng.randrange(1, 7)
        prop = draft.propose(tokens, gamma, GREEDY, None)
        n = prop.tokens.shape[0]
        assert n <= max(DEFAULT_NODES, gamma) and prop.q_probs is None
        if prop.parents is None:  # a chain: what prompt lookup proposes (the same match rule, "recent")
            assert n <= gamma
            assert (
                prop.tokens.tolist()
                == PromptLookupDraft(VOCAB, CPU).propose(tokens, gamma, GREEDY, None).tokens.tolist()
            )
        else:
            trees += 1
            tree = TokenTree(prop.parents)
            assert tree.depth <= gamma and not is_chain(prop.parents)
            ids = prop.tokens.tolist()  # siblings are distinct (a trie), every path is an earlier continuation
            for node in range(-1, n):
                kids = [ids[c] for c in tree.children(node)]
                assert len(kids) == len(set(kids))
    assert trees > 100 and draft.tree_steps == trees
    sampled = draft.propose([3, 1, 3, 1, 3], 3, SamplingConfig(1.0), None)  # a single chain at T > 0: one-hot q
    assert sampled.parents is None and sampled.q_probs.sum(-1).tolist() == [1.0] * sampled.tokens.shape[0]


def test_one_branch_decodes_exactly_as_prompt_lookup():
    target = tiny_llama(0)
    kw = dict(gamma=3, max_new_tokens=24, sampling=GREEDY, generator=None, eos_ids=frozenset())
    for prompt in ([5, 6, 7, 5, 6, 9, 5, 6], [1, 2, 1, 2, 1, 3, 1]):
        one = decode_speculative(CachedModel(target), TreeLookupDraft(VOCAB, CPU, branches=1), prompt, **kw)
        chain = decode_speculative(CachedModel(target), PromptLookupDraft(VOCAB, CPU), prompt, **kw)
        for field in ("token_ids", "accept_lengths", "draft_lengths", "pass_lengths", "expected_accept"):
            assert getattr(one, field) == getattr(chain, field), field


# --- the spec, the factory, the refusals


def test_the_spec_parses_and_refuses_in_one_line():
    spec = parse_draft("tree-lookup:branches=2,nodes=15,max_ngram=4")
    assert spec.kind == "tree-lookup" and spec.model_free and spec.proposes_trees
    assert dict(spec.options) == {"branches": 2, "nodes": 15, "max_ngram": 4}
    for bad, says in (
        ("tree-lookup:width=2", "tree-lookup takes"),
        ("tree-lookup:nodes=0", "nodes must be an integer >= 1"),
        ("tree-lookup:min_ngram=4", "min_ngram is above max_ngram"),
        ("lookup+tree-lookup", r"after lookup\+ comes a draft model"),
    ):
        with pytest.raises(SpecbenchError, match=says):
            parse_draft(bad)
    with pytest.raises(SpecbenchError, match="proposes token trees.*use --batch-size 1"):
        RunConfig("t", "tree-lookup", "x", batch_size=4).validate()
    with pytest.raises(SpecbenchError, match="proposes token trees.*use --engine specbench"):
        check_config(RunConfig("t", "tree-lookup", "x", engine="llama-cpp"))
    assert check_config(RunConfig("t", "tree-lookup:nodes=15", "x")).draft.proposes_trees


def test_the_factory_builds_it_and_list_drafts_shows_it():
    from types import SimpleNamespace

    from specbench.decoding.drafts.factory import draft_rows, make_proposer

    target = SimpleNamespace(vocab_size=VOCAB, device=CPU, is_seq2seq=False, name="t")
    draft = make_proposer(parse_draft("tree-lookup:branches=2"), target)
    assert isinstance(draft, TreeLookupDraft) and draft.branches == 2 and draft.name == "tree-lookup:branches=2"
    assert not draft.is_model
    with pytest.raises(SpecbenchError, match="needs a decoder-only target"):
        make_proposer(
            parse_draft("tree-lookup"), SimpleNamespace(vocab_size=VOCAB, device=CPU, is_seq2seq=True, name="t5")
        )
    assert any(row["name"].startswith("tree-lookup") for row in draft_rows())


# --- greedy identity through the tree route, on prompts where a second branch is the target's own continuation


def planted_prompt(model, seed: int, depth: int = 3, iters: int = 20) -> list[int] | None:
    """A prompt ... u x b ... u x a ... u whose greedy continuation is x b: after the first token (x) the suffix (u, x)
    matches twice, the most recent match's continuation a is the trie's first branch, the older b its second and
    the target's own. Found by iterating x, b ← the target's greedy tail to a fixed point (None if none is found)."""
    g = torch.Generator().manual_seed(seed)
    draw = lambda n: torch.randint(3, VOCAB, (n,), generator=g).tolist()
    f1, f2, f3, u, x, a, b = draw(5), draw(4), draw(3), draw(1), draw(1), draw(depth), draw(depth)
    for _ in range(iters):
        prompt = f1 + u + x + b + f2 + u + x + a + f3 + u
        tail = greedy_tail(model, prompt, 1 + depth)
        if tail == x + b:
            return prompt if a[0] != b[0] else None
        x, b = tail[:1], tail[1:]
    return None


@pytest.fixture(scope="module")
def planted():
    target = tiny_llama(0)
    prompts = [p for seed in range(12) if (p := planted_prompt(target, seed)) is not None][:3]
    assert len(prompts) >= 2
    return target, prompts


def run_tree_lookup(target, prompt, monkeypatch, backend="eager", **options):
    """A greedy tree-lookup run (γ = 4) recording every tree step's (tree, verdict path)."""
    from specbench.decoding.backend import ForwardBackend

    steps = recorded_tree_steps(monkeypatch, speculative)
    draft = TreeLookupDraft(VOCAB, CPU, **options)
    kw = dict(gamma=4, max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset())
    cm = CachedModel(target, backend=ForwardBackend(target, backend))
    return decode_speculative(cm, draft, prompt, **kw), steps, draft


class WideTree(TreeLookupDraft):
    """Seven sibling guesses after cur at every step: a depth-1 tree, never cut by the budget near the end."""

    def propose(self, tokens, gamma, sampling, generator, min_confidence=0.0):
        return trie_proposal(list(range(10, 17)), [-1] * 7, sampling, CPU, VOCAB)


def test_a_static_cache_reserved_as_a_run_reserves_holds_a_wide_tree_at_the_budgets_end():
    """Prompt + budget = 256 slots, one static cache's worth: steps near the end still feed 1 + 7 slots past the
    example's own. Reserved as a run reserves (calibrating.run_capacity: the widest pass on top) it decodes, identical
    to plain decoding; the control, a cache sized by the example's slots alone, overflows."""
    from types import SimpleNamespace

    from specbench.config import LoadSpec
    from specbench.decoding.backend import ForwardBackend
    from specbench.measure.run.calibrating import calibration_k_max, run_capacity

    target, prompt = tiny_llama(0), [3 + i % 50 for i in range(236)]
    kw = dict(max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset())
    base = decode_autoregressive(CachedModel(target), prompt, **kw)
    config = RunConfig("t", "tree-lookup:nodes=7", "x", gamma=4, gamma_max=4)
    backend = ForwardBackend(target, "static")
    backend.reserve(run_capacity(config, [SimpleNamespace(prompt_ids=prompt)], 20))
    res = decode_speculative(CachedModel(target, backend=backend), WideTree(VOCAB, CPU), prompt, gamma=4, **kw)
    assert res.token_ids == base.token_ids and max(res.pass_lengths) == 8
    compiled = RunConfig(LoadSpec("t", backend="compiled"), "tree-lookup:nodes=7", "x", gamma=4, gamma_max=4)
    held = [SimpleNamespace(prompt_ids=prompt)]
    assert calibration_k_max(compiled) == 5 and run_capacity(compiled, held, 20) == 236 + 20 + 8  # γ + 1 calibrated
    unreserved = CachedModel(target, backend=ForwardBackend(target, "static"))
    with pytest.raises(SpecbenchError, match="overflowed"):
        decode_speculative(unreserved, WideTree(VOCAB, CPU), prompt, gamma=4, **kw)


@pytest.mark.parametrize("backend", ["eager", "static"])
def test_greedy_identity_on_planted_prompts_through_a_second_branch(planted, monkeypatch, backend):
    target, prompts = planted
    kw = dict(max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset())
    took_second = 0
    for prompt in prompts:
        base = decode_autoregressive(CachedModel(target), prompt, **kw)
        res, steps, draft = run_tree_lookup(target, prompt, monkeypatch, backend)
        assert res.token_ids == base.token_ids
        assert draft.tree_steps == len(steps) > 0 and max(res.pass_lengths) > 4 + 1  # a chain of γ = 4 feeds ≤ 5
        assert res.drafted == sum(res.draft_lengths) and res.accepted == sum(res.accept_lengths)
        assert res.trials == len(res.expected_accept)
        took_second += off_first_branch(steps)
        one, one_steps, _ = run_tree_lookup(
            target, prompt, monkeypatch, backend, branches=1
        )  # control: prompt lookup's chain
        assert one.token_ids == base.token_ids and one_steps == [] and one.accepted < res.accepted
    assert took_second >= len(prompts)  # the first tree step of each planted prompt accepts its second branch


def test_a_broken_compaction_breaks_identity_on_the_planted_prompts(planted, monkeypatch):  # negative control
    """keep_path that only crops (the accepted path's keys left where the first branch's were): the test above must
    be able to see it, which it can only if second branches were accepted."""
    target, prompts = planted
    monkeypatch.setattr(CachedModel, "keep_path", lambda self, cached, path: self.truncate(cached + 1 + len(path)))
    kw = dict(max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset())
    broken = 0
    for prompt in prompts:
        base = decode_autoregressive(CachedModel(target), prompt, **kw)
        res, _, _ = run_tree_lookup(target, prompt, monkeypatch)
        broken += res.token_ids != base.token_ids
    assert broken >= 1


def test_greedy_identity_on_ordinary_prompts():
    """No planting: whatever the trie holds (mostly single chains here), the output is the baseline's."""
    target = tiny_llama(1)
    kw = dict(max_new_tokens=32, sampling=GREEDY, generator=None, eos_ids=frozenset([2]))
    for prompt in ([5, 6, 7, 8, 5, 6, 9, 10, 5, 6], [3, 4, 3, 4, 3, 5, 3], [1, 300, 301, 302, 44, 45, 46, 47]):
        base = decode_autoregressive(CachedModel(target), prompt, **kw)
        for gamma in (2, 4):
            draft = TreeLookupDraft(VOCAB, CPU, nodes=5)
            assert decode_speculative(CachedModel(target), draft, prompt, gamma=gamma, **kw).token_ids == base.token_ids


# --- T > 0: the exact law of one tree-lookup step, on a small vocabulary

SAMPLED = SamplingConfig(temperature=0.8, top_k=8)
TOL = 1e-6


def target_law(model, sampling: SamplingConfig):
    """prefix → the target's processed law [V] after it (memoised; one full forward each)."""

    @torch.inference_mode()
    def law(prefix):
        return processed_probs(model(input_ids=torch.tensor([list(prefix)])).logits[0, -1], sampling)

    return memo(law)


def law_context(p_at, seed: int, depth: int = 2) -> list[int]:
    """A context ... u y b ... u x a ... u: x, y the target's 2nd and 1st choices after it (x's branch is the most
    recent match, so it is tried first), a and b their own 1st choices (a few rounds towards a fixed point; the
    exact test below holds whatever the nodes are, these only make every outcome likely)."""
    rng = random.Random(seed)
    draw = lambda n: [rng.randrange(3, 24) for _ in range(n)]
    f1, f2, u = draw(2), draw(2), draw(1)
    x, y, a, b = draw(1), draw(1), draw(depth), draw(depth)
    for _ in range(4):
        ctx = f1 + u + y + b + f2 + u + x + a + u
        top = p_at(tuple(ctx)).topk(2).indices.tolist()
        y, x = top[:1], top[1:]
        a = [int(p_at(tuple(ctx + x)).argmax())] + a[1:]
        b = [int(p_at(tuple(ctx + y)).argmax())] + b[1:]
    return f1 + u + y + b + f2 + u + x + a + u


@pytest.fixture(scope="module")
def law_target():
    target = small_llama(0, sharpen=3.0)
    return target, target_law(target, SAMPLED)


def tree_lookup_law(law_target, ctx: list[int], length: int = 3, **control) -> tuple[dict, dict]:
    """(law of the first `length` tokens after ctx: one tree-lookup step completed by the target's own law, the
    step's law alone). p comes from the engine's tree pass (tree_logits)."""
    target, p_at = law_target
    prop = TreeLookupDraft(24, CPU, nodes=6).propose(ctx, 2, SAMPLED, None)
    assert prop.parents is not None and prop.q_probs is None
    tree, ids = TokenTree(prop.parents), prop.tokens.tolist()
    with torch.inference_mode():
        p = f64(processed_probs(tree_logits(target, ctx, ids, tree), SAMPLED))
    step = tree_step_law(tree, ids, None, p, **control)
    out: dict = defaultdict(float)
    for emitted, w in step.items():
        for tail, v in target_sequence_law(p_at, length - len(emitted), tuple(ctx) + emitted).items():
            out[emitted + tail] += w * v
    return dict(out), step


def test_one_sampled_tree_lookup_step_has_the_targets_law_exactly(law_target):
    _, p_at = law_target
    second, deep = 0.0, 0.0
    for seed in range(3):
        ctx = law_context(p_at, seed)
        law, step = tree_lookup_law(law_target, ctx)
        check = exact_check(f"tree-lookup/{seed}", law, target_sequence_law(p_at, 3, tuple(ctx)), tol=TOL)
        assert check.passed, check
        prop = TreeLookupDraft(24, CPU, nodes=6).propose(ctx, 2, SAMPLED, None)
        first_child = prop.tokens.tolist()[0]
        second += sum(w for emitted, w in step.items() if len(emitted) > 1 and emitted[0] != first_child)
        deep += sum(w for emitted, w in step.items() if len(emitted) == 3)
    assert second > 0.05 and deep > 0.05, (second, deep)  # a second branch and a whole path were accepted


@pytest.mark.parametrize(
    "control",
    [
        dict(count=lambda tok, q, p, u: 1 if bool((q == 1).any()) else accepted_count(tok, q, p, u)),  # always accept
        dict(residual_fn=lambda p_row, q_row: p_row),  # a rejected candidate not removed from the law
    ],
    ids=["fixed-node-always-accepted", "residual-omitted"],
)
def test_a_broken_rule_fails_the_tree_lookup_step_law(law_target, control):  # negative controls
    _, p_at = law_target
    ctx = law_context(p_at, 0)
    law, _ = tree_lookup_law(law_target, ctx, **control)
    check = exact_check("control", law, target_sequence_law(p_at, 3, tuple(ctx)), tol=TOL)
    assert not check.passed and check.statistic > 100 * TOL, check


# --- verify's step law on the pair takes a tree proposer

VERIFY_DEFAULT = SamplingConfig(temperature=1.0, top_k=3)


def test_verify_step_law_runs_tree_steps_and_catches_a_verify_side_bug():
    target = sharpen(tiny_llama(0, layers=1), 15.0)
    p_at = target_law(target, VERIFY_DEFAULT)
    ctx = law_context_big(p_at)
    factory = lambda: TreeLookupDraft(VOCAB, CPU)
    checks = {c.name: c for c in pair_step_checks(target, factory, ctx, VERIFY_DEFAULT, gamma=3, n=4_000)}
    joint = checks["pair-step/γ=3/joint2/gof"]
    assert joint.verdict == "pass" and joint.power >= 0.8, joint
    assert joint.detail["tree_steps"] > 0 and joint.detail["accepted"] > 0 and joint.detail["rejected"] > 0
    caught = pair_step_checks(target, factory, ctx, VERIFY_DEFAULT, gamma=3, n=4_000, control=CONTROLS["always-accept"])
    assert not next(c for c in caught if c.name.endswith("joint2/gof")).passed


def law_context_big(p_at) -> list[int]:
    """law_context on the 512-token vocabulary: ... u y b ... u x a ... u with x, y the target's top-2."""
    f1, f2, u = [40, 41], [50, 51], [60]
    x, y, a, b = [70], [80], [71, 72], [81, 82]
    for _ in range(4):
        ctx = f1 + u + y + b + f2 + u + x + a + u
        top = p_at(tuple(ctx)).topk(2).indices.tolist()
        y, x = top[:1], top[1:]
        a = [int(p_at(tuple(ctx + x)).argmax()), a[1]]
        b = [int(p_at(tuple(ctx + y)).argmax()), b[1]]
    return f1 + u + y + b + f2 + u + x + a + u


def test_sampled_runs_take_tree_steps_with_consistent_counts(planted):
    """T = 1, top-k 3 from the planted prompts: when the first token drawn is the planted x, the first step is a
    tree."""
    target, prompts = planted
    trees = 0
    for seed in range(4):
        draft = TreeLookupDraft(VOCAB, CPU)
        gen = torch.Generator().manual_seed(seed)
        kw = dict(gamma=4, max_new_tokens=16, sampling=VERIFY_DEFAULT, eos_ids=frozenset())
        res = decode_speculative(CachedModel(target), draft, prompts[seed % len(prompts)], generator=gen, **kw)
        assert res.trials == len(res.expected_accept) and all(0.0 <= b <= 1.0 + 1e-6 for b in res.expected_accept)
        assert res.drafted == sum(res.draft_lengths) and res.accepted == sum(res.accept_lengths)
        trees += draft.tree_steps
    assert trees > 0


# --- measures: what the summary derives from a tree run's raw counts


def test_mat_mean_acceptance_length_and_tokens_per_pass_count_a_tree_step_as_its_path(planted, monkeypatch):
    """A tree step is one target pass that emits its accepted path + 1 tokens: Spec-Bench's #MAT (tokens ÷ passes,
    prefill included), vLLM's mean acceptance length (1 + accepted path per drafting step) and decode tokens per
    target pass read the path, never the node count, so they mean the same for a tree as for a chain."""
    from dataclasses import asdict

    from specbench.measure.stats.metrics import peer_metrics, spec_bench_metrics

    target, prompts = planted
    kw = dict(max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset())
    base = decode_autoregressive(CachedModel(target), prompts[0], **kw)
    res, steps, _ = run_tree_lookup(target, prompts[0], monkeypatch)
    assert steps and sum(res.draft_lengths) > sum(res.accept_lengths) + len(res.accept_lengths)  # nodes ≫ path
    plain = res.target_calls - len(res.accept_lengths)  # passes with nothing drafted emit one token each
    assert len(res.token_ids) - 1 == sum(n + 1 for n in res.accept_lengths) + plain  # every pass: path + 1
    record = {
        name: asdict(r) | {"n_tokens": len(r.token_ids)} for name, r in (("baseline", base), ("speculative", res))
    }
    mat = spec_bench_metrics([record])["mean_accepted_tokens"]
    assert mat == pytest.approx(len(res.token_ids) / (res.target_calls + 1))
    length = peer_metrics([record])["mean_acceptance_length"]
    assert length == pytest.approx(1 + sum(res.accept_lengths) / len(res.accept_lengths))
    assert max(res.accept_lengths) <= 4 < max(res.draft_lengths)  # depth ≤ γ = 4 while a step drafts more nodes


def test_verify_exact_step_law_passes_for_tree_lookup_and_moves_under_a_broken_rule():
    from specbench.evidence.pair_step import EXACT_TOL, exact_pair_step_check

    target = sharpen(tiny_llama(0, layers=1), 15.0)
    ctx = law_context_big(target_law(target, VERIFY_DEFAULT))
    factory = lambda: TreeLookupDraft(VOCAB, CPU)
    (check,) = exact_pair_step_check(
        target, factory, ctx, VERIFY_DEFAULT, gamma=3, length=2, eos_ids=frozenset(), max_cells=4096
    )
    assert check.passed and check.statistic < 1e-6, check
    moved = check.detail["controls_moved_law_by"]
    assert set(moved) == {name for name, c in CONTROLS.items() if c.verify_side}
    assert moved["always-accept"] > 100 * EXACT_TOL and moved["abs-residual"] > 100 * EXACT_TOL, moved

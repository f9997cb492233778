"""Lookahead decoding as a draft (`--draft lookahead`, decoding/drafts/lookahead.py): the pool's update rule (context
n-grams, the verify pass's guesses, most recent first, bounded), the trie it proposes, greedy identity on a tiny
random Llama through a second branch (with a broken compaction as the control that must fail), the spec's one-line
usage errors, and `verify`'s step law (sampled with power, and exact) on it, with the broken rules it must catch."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import VOCAB, sharpen, tiny_llama
from helpers import greedy_tail, off_first_branch, recorded_tree_steps
from typer.testing import CliRunner

import specbench.decoding.speculative as speculative
from specbench.cli import app
from specbench.config import RunConfig, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import ObservesPasses
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.lookahead import (
    DEFAULT_WINDOW,
    LookaheadDraft,
    NgramPool,
    add_branch,
    context_ngrams,
    jacobi_step,
    most_nodes,
    pass_ngrams,
)
from specbench.decoding.drafts.tree_lookup import DEFAULT_NODES, build_trie, is_chain, walk_trie
from specbench.decoding.sampling import processed_probs
from specbench.decoding.speculative import decode_speculative
from specbench.decoding.tree import TokenTree
from specbench.engines import check_config
from specbench.errors import SpecbenchError
from specbench.evidence.controls import CONTROLS
from specbench.evidence.exact_laws import memo
from specbench.evidence.pair_step import EXACT_TOL, exact_pair_step_check, pair_step_checks
from specbench.measure.run.calibrating import calibration_k_max
from specbench.run_specs import parse_draft

CPU = torch.device("cpu")
GREEDY = SamplingConfig()


# --- the pool's update rule


def test_context_ngrams_are_every_n_gram_oldest_first_from_start():
    tokens = [1, 2, 3, 4, 2, 5]
    assert context_ngrams(tokens, 3) == [(1, (2, 3)), (2, (3, 4)), (3, (4, 2)), (4, (2, 5))]
    assert context_ngrams(tokens, 3, start=4) == [(3, (4, 2)), (4, (2, 5))]  # only those ending at index >= 4
    assert context_ngrams(tokens, 2, start=5) == [(2, (5,))]
    assert context_ngrams([1, 2], 3) == []


def test_the_pool_keeps_the_most_recent_first_bounded_and_moves_a_repeat_to_the_front():
    pool = NgramPool(2)
    pool.add([(2, (3, 4)), (2, (5, 6))])
    assert pool.table[2] == [(5, 6), (3, 4)]
    pool.add([(2, (3, 4))])  # seen again: to the front, not twice
    assert pool.table[2] == [(3, 4), (5, 6)]
    pool.add([(2, (7, 8))])  # a third: the oldest leaves (at most `size` per key)
    assert pool.table[2] == [(7, 8), (3, 4)]
    assert pool.candidates(2, 5) == [[7, 8], [3, 4]] and pool.candidates(2, 1) == [[7], [3]]
    pool.add([(2, (7, 9))])
    assert pool.candidates(2, 1) == [[7]]  # distinct after the cut to γ
    assert pool.candidates(9, 3) == []


def test_a_pass_gives_the_n_gram_ending_in_each_choice_cut_after_the_last_refuted_node():
    tail = [10, 11, 12]  # cur = 12
    ids, parents = [20, 21, 30], [-1, 0, -1]  # 20 → 21, and 30: two branches
    agreed = [20, 21, 42, 43]  # after cur the target says 20, after 20 it says 21: only 30 is refuted
    got = pass_ngrams(tail, ids, parents, agreed, n=3, window=8)
    assert got == [(11, (12, 20)), (12, (20, 21)), (20, (21, 42)), (30, (43,))]  # 30 refuted: a key, alone
    assert pass_ngrams(tail, ids, parents, agreed, n=3, window=2) == got[:2]  # the first W positions only
    assert pass_ngrams(tail, ids, parents, agreed, n=4, window=8)[2] == (12, (20, 21, 42))
    refuted = [40, 41, 42, 43]  # every node refuted: each is the key of the target's choice after it
    assert pass_ngrams(tail, ids, parents, refuted, n=3, window=8) == [
        (11, (12, 40)),
        (20, (41,)),
        (21, (42,)),
        (30, (43,)),
    ]
    # a chain: 20 refuted (the target said 40), 41 what the target said after it → the trajectory 20 41 50
    assert pass_ngrams(tail, [20, 41], None, [40, 41, 50], n=3, window=8) == [
        (11, (12, 40)),
        (20, (41,)),
        (20, (41, 50)),
    ]
    assert pass_ngrams([12], [], None, [40], n=3, window=8) == [(12, (40,))]  # a context shorter than N: what there is


# --- the proposal


def test_the_newest_tokens_candidates_become_one_trie_most_recent_first():
    draft = LookaheadDraft(VOCAB, CPU, ngram=3, branches=3, window=0)
    tokens = [5, 1, 2, 9, 5, 3, 4, 8, 5]  # key 5: (1, 2) then, more recent, (3, 4)
    prop = draft.propose(tokens, 4, GREEDY, None)
    assert prop.tokens.tolist() == [3, 4, 1, 2] and prop.parents == [-1, 0, -1, 2] and prop.q_probs is None
    short = LookaheadDraft(VOCAB, CPU, ngram=3).propose(tokens, 1, GREEDY, None)  # depth ≤ γ = 1
    assert short.tokens.tolist() == [3, 1] and short.parents == [-1, -1]
    one = LookaheadDraft(VOCAB, CPU, ngram=3).propose([5, 1, 2, 9, 5], 4, SamplingConfig(1.0), None)
    assert one.parents is None and one.tokens.tolist() == [1, 2]  # one candidate: a chain, one-hot q at T > 0
    assert one.q_probs is not None and one.q_probs.sum(-1).tolist() == [1.0, 1.0]
    assert LookaheadDraft(VOCAB, CPU).propose([1, 2, 3], 4, GREEDY, None).tokens.numel() == 0  # no key: nothing
    assert isinstance(draft, ObservesPasses) and not draft.is_model


def test_proposals_bound_depth_and_nodes_and_their_siblings_are_distinct():
    rng = random.Random(0)
    trees = 0
    for _ in range(300):
        draft = LookaheadDraft(VOCAB, CPU, branches=rng.randrange(1, 6), ngram=rng.randrange(2, 6))
        tokens = [rng.randrange(6) for _ in range(rng.randrange(2, 40))]
        gamma = rng.randrange(1, 7)
        prop = draft.propose(tokens, gamma, GREEDY, None)
        n = prop.tokens.shape[0]
        assert n <= max(DEFAULT_NODES, gamma)
        if prop.parents is None:
            assert n <= gamma
            continue
        trees += 1
        tree, ids = TokenTree(prop.parents), prop.tokens.tolist()
        assert tree.depth <= gamma and not is_chain(prop.parents) and tree.size <= draft.branches * gamma
        for node in range(-1, n):
            kids = [ids[c] for c in tree.children(node)]
            assert len(kids) == len(set(kids))
    assert trees > 100


def test_an_observed_pass_feeds_its_guesses_and_another_branch_starts_afresh():
    tokens = [5, 1, 2, 9, 5, 3, 4, 8, 5]
    drafts = {w: LookaheadDraft(VOCAB, CPU, ngram=3, window=w) for w in (DEFAULT_WINDOW, 0)}
    for draft in drafts.values():
        prop = draft.propose(tokens, 4, GREEDY, None)  # nodes 3 4 | 1 2
        draft.observe_pass(torch.tensor([1, 6, 7, 2, 0]))  # the target: 1 after cur (3 refuted), 6 after 3, 7 after 3 4
        assert prop.tokens.tolist() == [3, 4, 1, 2]
        draft.propose(tokens + [1, 2, 0], 4, GREEDY, None)  # the loop emitted path 1 2, then 0
    with_guesses, without = drafts[DEFAULT_WINDOW], drafts[0]
    assert with_guesses.guesses == 5 and without.guesses == 0
    assert (6,) in with_guesses.pool.table[3] and (7,) in with_guesses.pool.table[4]  # keyed by the refuted 3 and 4
    assert (6,) not in without.pool.table[3] and (7,) not in without.pool.table[4]
    assert with_guesses.pool.table[5][0] == (1, 2)  # the context's own n-grams rank above the guesses
    with_guesses.propose([7, 3, 4, 8, 3], 4, GREEDY, None)  # not an extension: the pool is rebuilt from this context
    assert with_guesses.pool.table[3] == [(4, 8)] and 5 not in with_guesses.pool.table


# --- the spec, the factory, the refusals


def test_the_spec_parses_and_refuses_in_one_line():
    spec = parse_draft("lookahead:window=4,ngram=3,branches=2")
    assert spec.kind == "lookahead" and spec.model_free and spec.proposes_trees and not spec.learns_outputs
    assert dict(spec.options) == {"window": 4, "ngram": 3, "branches": 2}
    assert dict(parse_draft("lookahead:window=0").options) == {"window": 0}
    assert dict(parse_draft("lookahead:jacobi=3").options) == {"jacobi": 3}
    for bad, says in (
        ("lookahead:level=2", "lookahead takes window=<n>"),
        ("lookahead:ngram=1", "ngram must be an integer >= 2"),
        ("lookahead:branches=0", "branches must be an integer >= 1"),
        ("lookahead:window=-1", "window must be an integer >= 0"),
        ("lookahead:jacobi=x", "jacobi must be an integer >= 0"),
        ("lookup+lookahead", r"after lookup\+ comes a draft model"),
    ):
        with pytest.raises(SpecbenchError, match=says):
            parse_draft(bad)
    with pytest.raises(SpecbenchError, match="proposes token trees.*use --batch-size 1"):
        RunConfig("t", "lookahead", "x", batch_size=4).validate()
    with pytest.raises(SpecbenchError, match="proposes token trees"):
        check_config(RunConfig("t", "lookahead", "x", engine="llama-cpp"))


def test_a_bad_option_is_a_one_line_usage_error_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", "--target", "t", "--draft", "lookahead:ngram=1", "--task", "t.jsonl"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and "ngram must be an integer >= 2" in lines[0]
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_the_factory_builds_it_and_list_drafts_shows_it():
    from types import SimpleNamespace

    from specbench.decoding.drafts.factory import draft_rows, make_proposer

    target = SimpleNamespace(vocab_size=VOCAB, device=CPU, is_seq2seq=False, name="t")
    draft = make_proposer(parse_draft("lookahead:branches=2,window=0"), target)
    assert isinstance(draft, LookaheadDraft) and draft.branches == 2 and draft.window == 0
    assert draft.name == "lookahead:branches=2,window=0"
    with pytest.raises(SpecbenchError, match="needs a decoder-only target"):
        make_proposer(
            parse_draft("lookahead"), SimpleNamespace(vocab_size=VOCAB, device=CPU, is_seq2seq=True, name="t5")
        )
    assert any(row["name"].startswith("lookahead") for row in draft_rows())


# --- greedy identity, through a second branch


def planted(model, seed: int, depth: int = 3) -> list[int] | None:
    """A prompt … x b … x a … whose greedy continuation is x b: once x is emitted, the pool's candidates for it are
    a (the more recent, so the first branch) and b (the second, and the target's own). x, b are iterated towards the
    target's greedy tail (None when no fixed point is reached)."""
    g = torch.Generator().manual_seed(seed)
    draw = lambda n: torch.randint(3, VOCAB, (n,), generator=g).tolist()
    f1, f2, f3, x, a, b = draw(4), draw(4), draw(3), draw(1), draw(depth), draw(depth)
    for _ in range(20):
        prompt = f1 + x + b + f2 + x + a + f3
        tail = greedy_tail(model, prompt, 1 + depth)
        if tail == x + b:
            return prompt if a[0] != b[0] else None
        x, b = tail[:1], tail[1:]
    return None


@pytest.fixture(scope="module")
def planted_prompts():
    target = tiny_llama(0)
    prompts = [p for seed in range(16) if (p := planted(target, seed)) is not None][:3]
    assert len(prompts) >= 2
    return target, prompts


def run_lookahead(target, prompt, monkeypatch, *, stepwise=False, **options):
    """A greedy lookahead run (γ = 4) recording every tree step's (tree, accepted path)."""
    steps = recorded_tree_steps(monkeypatch, speculative)
    draft = LookaheadDraft(VOCAB, CPU, **options)
    kw = dict(gamma=4, max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset(), stepwise=stepwise)
    return decode_speculative(CachedModel(target), draft, prompt, **kw), steps, draft


@pytest.mark.parametrize("stepwise", [False, True], ids=["one-pass", "bit-exact"])
def test_greedy_identity_on_planted_prompts_through_a_second_branch(planted_prompts, monkeypatch, stepwise):
    target, prompts = planted_prompts
    kw = dict(max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset())
    took_second = 0
    for prompt in prompts:
        base = decode_autoregressive(CachedModel(target), prompt, **kw)
        res, steps, draft = run_lookahead(target, prompt, monkeypatch, stepwise=stepwise)
        assert res.token_ids == base.token_ids
        assert draft.tree_steps == len(steps) > 0 and draft.guesses > 0  # trees verified, passes observed
        assert res.drafted == sum(res.draft_lengths) and res.accepted == sum(res.accept_lengths)
        took_second += off_first_branch(steps)
    assert took_second >= len(prompts)


def test_a_broken_compaction_breaks_identity_on_the_planted_prompts(planted_prompts, monkeypatch):  # negative control
    target, prompts = planted_prompts
    monkeypatch.setattr(CachedModel, "keep_path", lambda self, cached, path: self.truncate(cached + 1 + len(path)))
    kw = dict(max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset())
    broken = 0
    for prompt in prompts:
        base = decode_autoregressive(CachedModel(target), prompt, **kw)
        res, _, _ = run_lookahead(target, prompt, monkeypatch)
        broken += res.token_ids != base.token_ids
    assert broken >= 1


def test_greedy_identity_on_ordinary_prompts_with_and_without_guesses():
    target = tiny_llama(1)
    kw = dict(max_new_tokens=32, sampling=GREEDY, generator=None, eos_ids=frozenset([2]))
    guesses = 0
    for prompt in ([5, 6, 7, 8, 5, 6, 9, 10, 5, 6], [3, 4, 3, 4, 3, 5, 3], [1, 300, 301, 302, 44, 45, 46, 47]):
        base = decode_autoregressive(CachedModel(target), prompt, **kw)
        for gamma in (2, 4):
            for window in (DEFAULT_WINDOW, 0):
                draft = LookaheadDraft(VOCAB, CPU, window=window, ngram=3)
                res = decode_speculative(CachedModel(target), draft, prompt, gamma=gamma, **kw)
                assert res.token_ids == base.token_ids
                guesses += draft.guesses
    assert guesses > 0


# --- the Jacobi trajectory (jacobi=L)


def test_a_jacobi_iteration_takes_the_targets_choices_along_the_guess_past_what_was_emitted():
    ids, parents = [9, 5, 6, 7], [-1, -1, 1, 2]  # a pool branch (9) and the guess 5 6 7 under cur
    nodes = walk_trie(ids, parents, [5, 6, 7])
    assert nodes == [1, 2, 3] and walk_trie(ids, parents, [5, 8]) == [1]  # a token not there ends the walk
    assert walk_trie([5, 6, 7], None, [5, 6, 9]) == [0, 1]  # parents None: a chain
    choices = [5, 40, 6, 70, 71]  # after cur, after node 0 (9), 1 (5), 2 (6), 3 (7)
    # positions after cur: choices[0] = 5, after 5 → choices[2] = 6, after 5 6 → choices[3] = 70, after 5 6 7 → 71
    assert jacobi_step([5, 6, 7], nodes, choices, 1, 3) == [6, 70, 71]  # the step emitted 5 only (accepted nothing)
    assert jacobi_step([5, 6, 7], nodes, choices, 3, 3) == [71]  # it emitted 5 6 70: position 3's guess is left
    assert jacobi_step([5, 6, 7], nodes[:1], choices, 1, 3) == [6]  # the budget kept one of the guess's nodes


def test_the_trajectory_keeps_greedy_identity_and_feeds_the_pool(monkeypatch):
    """Window 0 (no guesses from the pool's own branches): every guess the pool gets comes from the trajectory's
    positions, sent as a branch of every proposal. Control: without a trajectory the same runs add none."""
    target = tiny_llama(1)
    kw = dict(max_new_tokens=32, sampling=GREEDY, generator=None, eos_ids=frozenset([2]))
    guesses, sent = {0: 0, 3: 0}, []
    real = LookaheadDraft.jacobi_guess
    monkeypatch.setattr(
        LookaheadDraft, "jacobi_guess", lambda self, tokens: sent.append(real(self, tokens)) or sent[-1]
    )
    for prompt in ([5, 6, 7, 8, 9, 10, 11], [1, 300, 301, 302, 44, 45, 46, 47], [3, 4, 3, 4, 3, 5, 3]):
        base = decode_autoregressive(CachedModel(target), prompt, **kw)
        for jacobi in guesses:
            draft = LookaheadDraft(VOCAB, CPU, window=0, ngram=3, jacobi=jacobi)
            res = decode_speculative(CachedModel(target), draft, prompt, gamma=4, **kw)
            assert res.token_ids == base.token_ids
            guesses[jacobi] += draft.guesses
    assert guesses[3] > 0 and guesses[0] == 0, guesses  # window 0: the trajectory's positions alone feed the pool
    assert any(len(set(g)) > 1 for g in sent)  # iterated: not only the newest token's copies it is topped up with


def test_the_trajectory_gets_its_own_nodes_beside_a_full_pool_trie():
    pool_ids, pool_parents = build_trie([[1, 2, 3, 4], [1, 5, 6, 7], [8, 9, 10, 11]], 7)  # the budget is full
    ids, parents = add_branch(pool_ids, pool_parents, [1, 2, 30], 3)  # shares 1 2, then one node of its own
    assert ids[:7] == pool_ids and parents[:7] == pool_parents and len(ids) == 8
    assert walk_trie(ids, parents, [1, 2, 30]) == [0, 1, 7]
    ids, parents = add_branch(pool_ids, pool_parents, [40, 41, 42], 2)  # cut where its allowance ends
    assert ids[7:] == [40, 41] and parents[7:] == [-1, 7]


def test_a_run_calibrates_and_sizes_for_the_trajectorys_nodes_beside_a_full_trie():
    """Three 3-token continuations of the newest token fill the pool's 7-node trie; the first trajectory (copies of
    the newest token) shares none of it, so the proposal holds 7 + 3 nodes: most_nodes' bound, reached, and the
    passes a run calibrates (1 + nodes). Control: the trie's budget alone (DEFAULT_NODES) is below it."""
    prompt = [1, 10, 11, 12, 1, 20, 21, 22, 1, 30, 31, 32, 1]
    draft = LookaheadDraft(VOCAB, CPU, jacobi=3)
    draft.begin(prompt)
    proposal = draft.propose(prompt, 4, GREEDY, None)
    assert len(proposal.tokens) == most_nodes(4, 3) == 10 > DEFAULT_NODES
    assert most_nodes(4) == DEFAULT_NODES and most_nodes(9, 3) == 12  # no trajectory; γ above the trie's budget
    assert most_nodes(2, 5) == 3 * 2 + 2 and most_nodes(16) == 3 * 3  # G candidates of min(N − 1, γ); L cut to γ
    config = RunConfig("t", "lookahead:jacobi=3", "x", gamma=4, gamma_max=4)
    assert calibration_k_max(config) == 1 + most_nodes(4, 3)
    assert calibration_k_max(RunConfig("t", "lookahead", "x", gamma=4, gamma_max=4)) == 1 + DEFAULT_NODES


# --- T > 0: verify's step law on the pair, with a lookahead proposer

VERIFY_DEFAULT = SamplingConfig(temperature=1.0, top_k=3)


def law_context(model) -> list[int]:
    """… u y b … u x a … u with x, y the target's 2nd and 1st choices after it and a, b their own first choices (a few
    rounds towards a fixed point): the pool's candidates for u are x a (the more recent) and y b, so every
    accept/reject outcome of the tree is likely."""
    p_at = memo(
        lambda prefix: processed_probs(model(input_ids=torch.tensor([list(prefix)])).logits[0, -1], VERIFY_DEFAULT)
    )
    f1, f2, u = [40, 41], [50, 51], [60]
    x, y, a, b = [70], [80], [71, 72], [81, 82]
    with torch.inference_mode():
        for _ in range(4):
            ctx = f1 + u + y + b + f2 + u + x + a + u
            top = p_at(tuple(ctx)).topk(2).indices.tolist()
            y, x = top[:1], top[1:]
            a = [int(p_at(tuple(ctx + x)).argmax()), a[1]]
            b = [int(p_at(tuple(ctx + y)).argmax()), b[1]]
    return f1 + u + y + b + f2 + u + x + a + u


@pytest.fixture(scope="module")
def law_pair():
    target = sharpen(tiny_llama(0, layers=1), 15.0)
    return target, law_context(target)


def test_verify_step_law_passes_with_power_and_catches_a_verify_side_bug(law_pair):
    target, ctx = law_pair
    factory = lambda: LookaheadDraft(VOCAB, CPU, ngram=3)
    assert factory().propose(ctx, 3, VERIFY_DEFAULT, None).parents is not None  # the context's first step is a tree
    checks = {c.name: c for c in pair_step_checks(target, factory, ctx, VERIFY_DEFAULT, gamma=3, n=4_000)}
    joint = checks["pair-step/γ=3/joint2/gof"]
    assert joint.verdict == "pass" and joint.power >= 0.8, joint
    assert joint.detail["tree_steps"] > 0 and joint.detail["accepted"] > 0 and joint.detail["rejected"] > 0
    caught = pair_step_checks(target, factory, ctx, VERIFY_DEFAULT, gamma=3, n=4_000, control=CONTROLS["always-accept"])
    assert not next(c for c in caught if c.name.endswith("joint2/gof")).passed


@pytest.mark.parametrize("jacobi", [0, 2])
def test_verify_exact_step_law_passes_and_moves_under_a_broken_rule(law_pair, jacobi):
    target, ctx = law_pair
    factory = lambda: LookaheadDraft(VOCAB, CPU, ngram=3, jacobi=jacobi)
    (check,) = exact_pair_step_check(
        target, factory, ctx, VERIFY_DEFAULT, gamma=3, length=2, eos_ids=frozenset(), max_cells=4096
    )
    assert check.passed and check.statistic < 1e-6, check
    moved = check.detail["controls_moved_law_by"]
    assert moved["always-accept"] > 100 * EXACT_TOL and moved["abs-residual"] > 100 * EXACT_TOL, moved


def test_sampled_runs_observe_passes_and_keep_consistent_counts(planted_prompts):
    """T = 1, top-k 3, through the loop: passes are observed (the guesses enter the pool) and the counts add up."""
    target, prompts = planted_prompts
    guesses = 0
    for seed in range(4):
        draft = LookaheadDraft(VOCAB, CPU)
        gen = torch.Generator().manual_seed(seed)
        kw = dict(gamma=4, max_new_tokens=16, sampling=VERIFY_DEFAULT, eos_ids=frozenset())
        res = decode_speculative(CachedModel(target), draft, prompts[seed % len(prompts)], generator=gen, **kw)
        assert res.trials == len(res.expected_accept) and all(0.0 <= e <= 1.0 + 1e-6 for e in res.expected_accept)
        assert res.drafted == sum(res.draft_lengths) and res.accepted == sum(res.accept_lengths)
        guesses += draft.guesses
    assert guesses > 0

"""Token recycling in tree-lookup's trie (`--draft tree-lookup:recycle=K`, decoding/drafts/recycle.py): how the table
grows a trie (best first, matches followed, the budget and depth kept), that the loop hands each pass's top-K rows to
the tokens they follow (a table keyed by the wrong tokens, the control, is accepted far less), greedy identity on a
tiny Llama (one-pass and --bit-exact), the spec's refusals, and verify's exact step law with the table in use."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import VOCAB, sharpen, tiny_llama

import specbench.decoding.drafts.recycle as recycle
from specbench.config import LoadSpec, RunConfig, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import ObservesPasses
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.recycle import RecyclingTreeLookupDraft, grow, pass_inputs
from specbench.decoding.drafts.tree_lookup import TreeLookupDraft
from specbench.decoding.speculative import decode_speculative, pass_choices
from specbench.errors import SpecbenchError
from specbench.evidence.pair_step import EXACT_TOL, exact_pair_step_check
from specbench.run_specs import parse_draft

CPU = torch.device("cpu")
GREEDY = SamplingConfig()
NO_MATCH = dict(max_ngram=3, min_ngram=3)  # trigram matches only: none in a random prompt, so early nodes are recycled


def test_grow_takes_paths_best_first_follows_the_matches_and_keeps_budget_and_depth():
    table = {5: [7, 8], 7: [9, 10], 8: [11], 9: [12]}
    # priors: 7 .5; 8 and 7→9 .25 (the shallower first); 7→10 and 8→11 .125 (ranks (0, 1) before (1, 0))
    assert grow([], [], table, 5, depth=2, budget=4) == ([7, 8, 9, 10], [-1, -1, 0, 0])
    assert grow([7, 9], [-1, 0], table, 5, depth=2, budget=4) == ([7, 9, 8, 10], [-1, 0, -1, 0])  # 7, 9 followed
    assert grow([], [], table, 5, depth=1, budget=9) == ([7, 8], [-1, -1])  # depth 1: no grandchildren
    assert grow([], [], table, 6, depth=3, budget=9) == ([], [])  # no entry for the newest token
    ids, parents = grow([], [], table, 5, depth=3, budget=9)
    assert sorted(ids) == [7, 8, 9, 10, 11, 12] and parents[ids.index(12)] == ids.index(9)


def test_the_table_takes_each_rows_top_k_for_the_token_that_row_follows():
    draft = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=2, **NO_MATCH)
    assert isinstance(draft, ObservesPasses) and draft.observe_top == 2
    context = [10, 11, 12]
    draft.begin(context)
    first = draft.propose(context, 3, GREEDY, None)
    assert first.tokens.numel() == 0  # empty table, no match: a plain step
    logits = torch.full((1, VOCAB), -1.0)
    logits[0, 40], logits[0, 41] = 5.0, 4.0
    draft.observe_pass(pass_choices(logits, draft.observe_top))
    nxt = draft.propose(context + [40], 3, GREEDY, None)
    assert draft.successors == {12: [40, 41]}  # row 0 followed cur, 12
    assert nxt.tokens.numel() == 0  # nothing known after 40 yet
    assert pass_inputs([3, 40], [7, 8]) == [40, 7, 8]
    draft.propose([1, 2], 3, GREEDY, None)  # a context that does not extend the last: the table starts afresh
    assert draft.successors == {}


def test_the_table_outlives_an_example_only_through_what_the_runner_commits():
    """A decode starts from the committed table; the runner's remember_output commits the last decode's table (one
    that decoded nothing since commits nothing: a resumed example), forget_outputs empties both."""
    from specbench.decoding.base import LearnsOutputs, forget_outputs, remember_output

    draft = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=2, **NO_MATCH)
    assert isinstance(draft, LearnsOutputs)
    logits = torch.full((1, VOCAB), -1.0)
    logits[0, 40], logits[0, 41] = 5.0, 4.0

    def decode_one(context):
        draft.begin(context)
        draft.propose(context, 3, GREEDY, None)
        draft.observe_pass(pass_choices(logits, 2))
        draft.propose(context + [40], 3, GREEDY, None)

    decode_one([10, 11, 12])
    draft.begin([1, 2])  # a repeat (or warm-up) before the commit starts from the committed table: empty
    assert draft.successors == {}
    decode_one([10, 11, 12])
    remember_output(draft, [40])
    draft.begin([1, 2])
    assert draft.successors == {12: [40, 41]} and draft.committed == {12: [40, 41]}
    remember_output(draft, [7])  # nothing decoded since: nothing committed
    assert draft.committed == {12: [40, 41]}
    proposal = draft.propose([5, 12], 3, GREEDY, None)  # the committed table drafts in a later example
    assert proposal.tokens.tolist()[:2] == [40, 41]
    forget_outputs(draft)
    draft.begin([1, 2])
    assert draft.successors == {} == draft.committed


def test_each_row_is_filed_under_the_node_it_follows():
    """A two-node proposal's pass has three rows: cur's, then node 0's, then node 1's, each filed under its input."""
    draft = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=2, **NO_MATCH)
    draft.committed = {12: [40], 40: [41]}
    draft.begin([10, 11, 12])
    proposal = draft.propose([10, 11, 12], 3, GREEDY, None)
    assert proposal.tokens.tolist() == [40, 41]  # from the committed table, a chain
    draft.observe_pass(torch.tensor([[40, 7], [41, 8], [50, 9]]))  # rows after 12, after 40, after 41
    draft.propose([10, 11, 12, 40, 41, 50], 3, GREEDY, None)
    assert draft.successors == {12: [40, 7], 40: [41, 8], 41: [50, 9]}
    draft.observe_pass(torch.tensor([[1, 2], [3, 4]]))  # two rows for the last pass's one input (50): dropped
    draft.propose([10, 11, 12, 40, 41, 50, 60], 3, GREEDY, None)
    assert 50 not in draft.successors


@pytest.mark.parametrize("stepwise", [False, True], ids=["one-pass", "bit-exact"])
def test_greedy_identity_with_recycled_trees(stepwise):
    target = tiny_llama(1)
    kw = dict(max_new_tokens=32, sampling=GREEDY, generator=None, eos_ids=frozenset([2]))
    recycled = 0
    for prompt in ([5, 6, 7, 8, 5, 6, 9, 10, 5, 6], [3, 4, 3, 4, 3, 5, 3], [1, 300, 301, 302, 44, 45, 46, 47]):
        base = decode_autoregressive(CachedModel(target), prompt, **kw)
        for gamma, nodes in ((2, 7), (4, 15)):
            draft = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, nodes=nodes)
            res = decode_speculative(CachedModel(target), draft, prompt, gamma=gamma, stepwise=stepwise, **kw)
            assert res.token_ids == base.token_ids
            assert res.drafted == sum(res.draft_lengths) and res.accepted == sum(res.accept_lengths)
            assert max(res.pass_lengths) <= 1 + max(nodes, gamma)
            recycled += draft.recycled_nodes
    assert recycled > 0


def accepted(target, monkeypatch, draft_kind, wrong_keys: bool = False) -> int:
    """Tokens accepted over greedy runs (γ 4, 48 tokens) on six random prompts, nothing committed between them;
    `wrong_keys`: the control, each row's top-K filed under another token (its id + 1: rows handed to the wrong
    keys)."""
    if wrong_keys:
        monkeypatch.setattr(recycle, "pass_inputs", lambda tokens, ids: [(t + 1) % VOCAB for t in [tokens[-1], *ids]])
    kw = dict(max_new_tokens=48, sampling=GREEDY, generator=None, eos_ids=frozenset())
    total = 0
    for seed in range(6):
        prompt = torch.randint(3, VOCAB, (12,), generator=torch.Generator().manual_seed(seed)).tolist()
        total += decode_speculative(CachedModel(target), draft_kind(), prompt, gamma=4, **kw).accepted
    return total


def test_recycled_nodes_are_accepted_and_a_table_under_the_wrong_keys_is_not(monkeypatch):
    """Over the matches alone (tree-lookup, which the tiny model's looping outputs feed), the table adds accepted
    tokens; keyed by the wrong tokens it adds at most a quarter as many."""
    target = tiny_llama(1)
    matches = accepted(target, monkeypatch, lambda: TreeLookupDraft(VOCAB, CPU, **NO_MATCH))
    recycling = lambda: RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, **NO_MATCH)
    right = accepted(target, monkeypatch, recycling) - matches
    wrong = accepted(target, monkeypatch, recycling, wrong_keys=True) - matches
    assert right >= 20 and wrong <= right / 4, (matches, right, wrong)  # measured: 37 and 0 over 40


def test_sampled_runs_observe_passes_and_keep_consistent_counts():
    """T = 1, top-k 3, through the loop: the table fills from the passes (recycled nodes proposed) and the counts
    add up, with every expected acceptance a probability."""
    target = tiny_llama(1)
    recycled = 0
    for seed in range(4):
        draft = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, **NO_MATCH)
        gen = torch.Generator().manual_seed(seed)
        kw = dict(gamma=4, max_new_tokens=24, sampling=SamplingConfig(temperature=1.0, top_k=3), eos_ids=frozenset())
        prompt = torch.randint(3, VOCAB, (12,), generator=torch.Generator().manual_seed(seed)).tolist()
        res = decode_speculative(CachedModel(target), draft, prompt, generator=gen, **kw)
        assert len(res.token_ids) == 24 and res.trials == len(res.expected_accept)
        assert all(0.0 <= e <= 1.0 + 1e-6 for e in res.expected_accept)
        assert res.drafted == sum(res.draft_lengths) and res.accepted == sum(res.accept_lengths)
        recycled += draft.recycled_nodes
    assert recycled > 0


def test_the_spec_parses_and_a_piloted_choice_is_refused_in_one_line():
    from types import SimpleNamespace

    from specbench.decoding.drafts.factory import make_proposer

    spec = parse_draft("tree-lookup:recycle=4,nodes=15")
    assert spec.recycles and spec.proposes_trees and spec.learns_outputs and not parse_draft("tree-lookup").recycles
    target = SimpleNamespace(vocab_size=VOCAB, device=CPU, is_seq2seq=False, name="t")
    draft = make_proposer(spec, target)
    assert isinstance(draft, RecyclingTreeLookupDraft) and draft.observe_top == 4 and draft.nodes == 15
    with pytest.raises(SpecbenchError, match="recycle must be an integer >= 1"):
        parse_draft("tree-lookup:recycle=0")
    refused = "which the pilot of --gamma auto/adaptive and --dtype auto does not replay; give --gamma <n>"
    for policy in ("auto", "adaptive"):
        with pytest.raises(SpecbenchError, match=refused):
            RunConfig("t", "tree-lookup:recycle=2", "x", gamma=policy).validate()
    with pytest.raises(SpecbenchError, match=refused):
        RunConfig(LoadSpec("t", dtype="auto"), "tree-lookup:recycle=2", "x", gamma=3).validate()
    RunConfig("t", "tree-lookup:recycle=2", "x", gamma="heuristic").validate()  # no pilot: HF's per-step schedule
    RunConfig("t", "tree-lookup:recycle=2", "x", gamma=3).validate()


def test_verify_exact_step_law_with_the_table_in_use():
    """Two steps enumerated exactly at T = 1 (top-k 3), every draft's committed table seeded with the target's own
    top-3 after the context's last token and after each of its top-3, so both steps' tries hold recycled nodes (the
    harness runs its own steps and hands no passes, so the table is the seed at every state): the law of the output
    is the target's; the broken rules move it."""
    target = sharpen(tiny_llama(0, layers=1), 15.0)
    sampling = SamplingConfig(temperature=1.0, top_k=3)
    context = [40, 41, 50, 51, 60]

    def top3(tokens: list[int]) -> list[int]:
        with torch.inference_mode():
            return target(input_ids=torch.tensor([tokens])).logits[0, -1].topk(3).indices.tolist()

    seed = {context[-1]: top3(context)} | {t: top3(context + [t]) for t in top3(context)}
    made: list[RecyclingTreeLookupDraft] = []

    def factory():
        made.append(RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, **NO_MATCH))
        made[-1].committed = dict(seed)  # as if earlier examples had taught it
        return made[-1]

    (check,) = exact_pair_step_check(
        target, factory, context, sampling, gamma=3, length=2, eos_ids=frozenset(), max_cells=4096
    )
    assert check.passed and check.statistic < 1e-6, check
    assert sum(d.recycled_nodes for d in made) >= 2 * len(made) and sum(d.tree_steps for d in made) > 0  # in use
    moved = check.detail["controls_moved_law_by"]
    assert moved["always-accept"] > 100 * EXACT_TOL, moved


def test_verify_teaches_a_learning_draft_once_and_gives_every_proposer_the_same_lessons():
    """`specbench verify` teaches a learning draft (evidence/verification.teach): greedy decodes through the loop fill
    the table from their passes and each output is remembered (committed), so the checks' proposals hold recycled
    nodes; every fresh proposer the checks use is given the kept table (`retaught`), the same state by construction;
    a draft that learns nothing is handed back as it was (the control: no recycled node without lessons)."""
    from specbench.evidence.verification import retaught, teach

    target = CachedModel(tiny_llama(1))
    prompts = [torch.randint(3, VOCAB, (12,), generator=torch.Generator().manual_seed(s)).tolist() for s in (5, 6)]
    first = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, **NO_MATCH)
    outputs = teach(first, target, prompts, frozenset())
    assert [len(o) for o in outputs] == [32, 32] and first.committed
    fresh = retaught(RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, **NO_MATCH), outputs, first.learnt())
    assert fresh.committed == first.committed
    plain = TreeLookupDraft(VOCAB, CPU)
    assert retaught(plain, outputs, None) is plain
    untaught = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, **NO_MATCH)
    checked = [40, 41, 50, 51, next(iter(first.committed))]  # ends in a token the table knows
    for draft in (fresh, untaught):
        draft.begin(checked)
        draft.propose(checked, 3, SamplingConfig(temperature=1.0, top_k=3), None)
    assert fresh.recycled_nodes > 0 and untaught.recycled_nodes == 0


def test_the_committed_table_is_kept_beside_the_records_and_a_resume_takes_it_back(tmp_path):
    """runner.keep_learnt writes the committed table with the examples it follows; resume_learnt gives it to a fresh
    draft only for exactly those examples (a file kept after other examples, or a table for another K, leaves the draft
    empty and says why in one sentence); drafts that keep nothing write nothing."""
    from specbench.measure.run.runner import LEARNT_FILE, keep_learnt, resume_learnt

    draft = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=2, **NO_MATCH)
    draft.committed = {12: [40, 41], 40: [7, 8]}
    keep_learnt(tmp_path, draft, ["a", "b"])
    fresh = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=2, **NO_MATCH)
    assert resume_learnt(tmp_path, fresh, ["a", "b"]) is None and fresh.committed == draft.committed
    fresh.begin([3, 12])
    assert fresh.successors == draft.committed  # the first decode after the resume starts from it
    other = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=2, **NO_MATCH)
    said = resume_learnt(tmp_path, other, ["a"])
    assert "kept after other examples than the 1 resumed" in said and other.committed == {}
    wider = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, **NO_MATCH)
    assert "not a recycling table for K = 3" in resume_learnt(tmp_path, wider, ["a", "b"]) and wider.committed == {}
    (tmp_path / LEARNT_FILE).write_text(json.dumps({"examples": ["a", "b"], "state": ["not", "a", "table"]}))
    assert "not a recycling table for K = 2" in resume_learnt(tmp_path, other, ["a", "b"])
    outside = {"recycle": 2, "table": {str(VOCAB + 5): [1, 2]}}  # a key past the vocabulary
    (tmp_path / LEARNT_FILE).write_text(json.dumps({"examples": ["a", "b"], "state": outside}))
    assert "not a recycling table for K = 2" in resume_learnt(tmp_path, other, ["a", "b"]) and other.committed == {}
    (tmp_path / LEARNT_FILE).unlink()
    assert "no learnt.json" in resume_learnt(tmp_path, other, ["a", "b"])
    keep_learnt(tmp_path, TreeLookupDraft(VOCAB, CPU), ["a"])
    assert not (tmp_path / LEARNT_FILE).exists() and resume_learnt(tmp_path, TreeLookupDraft(VOCAB, CPU), ["a"]) is None


def test_the_prefill_row_is_filed_under_the_prompts_last_token():
    """The loop hands the draft the prefill's last row too (observes_prefill): after a decode the table holds the
    target's top-K after the prompt under the prompt's last token, so the next example whose prompt ends alike (a chat
    template) can recycle at its first step; without that row (the control: a draft that does not ask for it) the
    prompt's last token has no entry."""
    model = tiny_llama(1)
    prompt = torch.randint(3, VOCAB, (12,), generator=torch.Generator().manual_seed(9)).tolist()
    with torch.inference_mode():
        want = model(input_ids=torch.tensor([prompt])).logits[0, -1].topk(3).indices.tolist()
    kw = dict(gamma=3, max_new_tokens=6, sampling=GREEDY, generator=None, eos_ids=frozenset())
    draft = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, **NO_MATCH)
    decode_speculative(CachedModel(model), draft, prompt, **kw)
    assert draft.successors[prompt[-1]] == want
    deaf = RecyclingTreeLookupDraft(VOCAB, CPU, recycle=3, **NO_MATCH)
    deaf.observes_prefill = False
    out = decode_speculative(CachedModel(model), deaf, prompt, **kw).token_ids
    assert prompt[-1] not in out and prompt[-1] not in deaf.successors  # no pass row follows it

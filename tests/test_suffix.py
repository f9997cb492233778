"""Suffix decoding (`--draft suffix`, decoding/drafts/suffix.py, on arctic-inference's suffix cache): the spec and its
refusals, the draft's bookkeeping (the decode's own request, the run's remembered outputs, the depth cut), greedy
identity on tiny random models (with an earlier example's output copied, and the control without it), the exact law
of its steps at T > 0 (with the controls that must move it), the runner's reset between runs and sweep cells (with
the control that leaks), and the per-depth counts the summary derives from a tree run.

The tests that run the real cache skip in one line where arctic-inference is not installed (`make setup-suffix`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from conftest import VOCAB, sharpen, tiny_llama
from helpers import FakeSession, make_grid, write_prompts
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config import RunConfig, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.factory import draft_rows, make_proposer
from specbench.decoding.drafts.suffix import SuffixDraft, within_depth
from specbench.decoding.speculative import decode_speculative
from specbench.decoding.tree import TokenTree
from specbench.engines import check_config
from specbench.errors import SpecbenchError
from specbench.measure.stats.metrics import peer_metrics, spec_bench_metrics
from specbench.run_specs import SUFFIX_INSTALL, parse_draft, suffix_cache_missing

CPU = torch.device("cpu")
GREEDY = SamplingConfig()
needs_arctic = pytest.mark.skipif(
    suffix_cache_missing(), reason=f"arctic-inference not installed ({SUFFIX_INSTALL}, or make setup-suffix)"
)


# --- the spec, the factory, the refusals (no cache needed)


def test_the_spec_parses_and_refuses_in_one_line():
    spec = parse_draft("suffix:tree=0,max_spec_factor=2,min_token_prob=0.05,nodes=9")
    assert spec.kind == "suffix" and spec.model_free and not spec.uses_model and spec.learns_outputs
    assert dict(spec.options) == {"tree": 0, "max_spec_factor": 2.0, "min_token_prob": 0.05, "nodes": 9}
    assert not spec.proposes_trees and parse_draft("suffix").proposes_trees  # tree=0 proposes chains
    for bad, says in (
        ("suffix:width=2", "suffix takes tree=0|1"),
        ("suffix:tree=2", "tree must be 0 .a chain. or 1"),
        ("suffix:nodes=0", "nodes must be an integer >= 1"),
        ("suffix:max_spec_factor=-1", "max_spec_factor must be a number >= 0"),
        ("suffix:max_spec_factor=nan", "max_spec_factor must be a number >= 0"),
        ("suffix:min_token_prob=1.5", "min_token_prob must be a probability"),
        ("lookup+suffix", r"after lookup\+ comes a draft model"),
    ):
        with pytest.raises(SpecbenchError, match=says) as err:
            parse_draft(bad)
        assert "\n" not in str(err.value)


def test_batches_and_tree_less_engines_are_refused_in_one_line():
    with pytest.raises(SpecbenchError, match="proposes token trees.*use --batch-size 1"):
        RunConfig("t", "suffix", "x", batch_size=4).validate()
    with pytest.raises(SpecbenchError, match="learns from the run's earlier outputs.*use --batch-size 1"):
        RunConfig("t", "suffix:tree=0", "x", batch_size=4).validate()  # a chain too: rows cannot learn from each other
    with pytest.raises(SpecbenchError, match=r"use --engine specbench \(or --draft suffix:tree=0, its chain\)"):
        check_config(RunConfig("t", "suffix", "x", engine="llama-cpp"))


def test_a_missing_cache_package_is_a_usage_error_naming_the_extra(monkeypatch):
    import specbench.engines.registry as registry

    monkeypatch.setattr(registry, "suffix_cache_missing", lambda: True)
    result = CliRunner().invoke(app, ["run", "--draft", "suffix", "--task", "aclsum", "--limit", "1"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "pip install 'specbench-sd[suffix]'" in lines[0] and lines[0].startswith("error: --draft suffix needs")
    check_config(RunConfig("t", "suffix", "x", engine="vllm"))  # vLLM runs its own suffix method: no package here


def test_the_vllm_engine_still_maps_suffix_to_its_own_method():
    from specbench.engines.vllm import vllm_method

    assert vllm_method(parse_draft("suffix"), 8, str) == {"name": "suffix", "num_speculative_tokens": 8}
    with pytest.raises(SpecbenchError, match="runs on its own settings"):
        vllm_method(parse_draft("suffix:tree=0"), 8, str)


def test_list_drafts_shows_it_and_a_seq2seq_target_is_refused():
    assert any(row["name"].startswith("suffix") for row in draft_rows())
    with pytest.raises(SpecbenchError, match="needs a decoder-only target"):
        make_proposer(parse_draft("suffix"), SimpleNamespace(vocab_size=VOCAB, device=CPU, is_seq2seq=True, name="t5"))


def test_the_depth_cut_keeps_order_and_renumbers_parents():
    ids, parents = [10, 11, 12, 13, 14, 15], [-1, 0, 1, -1, 3, 2]  # depths 1 2 3 1 2 4
    assert within_depth(ids, parents, 2) == ([10, 11, 13, 14], [-1, 0, -1, 2])
    assert within_depth(ids, parents, 4) == (ids, parents)
    assert within_depth(ids, parents, 1) == ([10, 13], [-1, -1])


# --- the bookkeeping, on a cache that records what it is told (no package needed)


class RecordingCache:
    """The SuffixDecodingCache calls the draft makes, recorded; speculate proposes nothing."""

    def __init__(self, max_depth: int):
        self.calls: list[tuple] = []
        self.cached_requests: set = set()

    def start_request(self, key, prompt):
        self.calls.append(("start", key, list(prompt)))
        self.cached_requests.add(key)

    def add_active_response(self, key, tokens):
        self.calls.append(("add", key, list(tokens)))

    def stop_request(self, key):
        self.calls.append(("stop", key))

    def evict_cached_response(self, key):
        self.calls.append(("evict", key))
        self.cached_requests.discard(key)

    def speculate(self, key, context, **kw):
        self.calls.append(("speculate", key, list(context), kw["max_spec_tokens"], kw["use_tree_spec"]))
        return SimpleNamespace(token_ids=[], parents=[])


def test_the_decode_is_one_request_fed_only_new_tokens_and_evicted_at_the_next_begin():
    draft = SuffixDraft(VOCAB, CPU, cache_factory=RecordingCache, max_depth=4)
    cache = draft._cache
    draft.begin([5, 6, 7], 10)
    draft.propose([5, 6, 7, 8], 3, GREEDY, None)
    draft.propose([5, 6, 7, 8, 9, 9], 3, GREEDY, None)
    first = ("decode", 0)
    assert cache.calls == [
        ("start", first, [5, 6, 7]),
        ("add", first, [8]),
        ("speculate", first, [5, 6, 7, 8], 7, True),  # the tree asks for max(nodes, γ) nodes
        ("add", first, [9, 9]),
        ("speculate", first, [7, 8, 9, 9], 7, True),  # the context's last max_depth tokens
    ]
    cache.calls.clear()
    draft.propose([5, 6, 7, 4], 3, GREEDY, None)  # another branch (verify's enumerations): a request afresh
    second = ("decode", 1)
    assert cache.calls[:4] == [("stop", first), ("evict", first), ("start", second, [5, 6, 7]), ("add", second, [4])]
    cache.calls.clear()
    draft.remember_output([8, 9, 9])  # the runner commits an output: the transient leaves, the output stays
    assert cache.calls == [
        ("stop", second),
        ("evict", second),
        ("start", ("output", 0), []),
        ("add", ("output", 0), [8, 9, 9]),
        ("stop", ("output", 0)),
    ]
    assert cache.cached_requests == {("output", 0)} and draft.remembered == 1
    draft.forget_outputs()
    assert draft._cache is not cache and draft._cache.calls == [] and draft.remembered == 0
    chain = SuffixDraft(VOCAB, CPU, tree=0, cache_factory=RecordingCache)
    chain.begin([1, 2], 4)
    chain.propose([1, 2, 3], 2, GREEDY, None)
    assert chain._cache.calls[-1] == ("speculate", ("decode", 0), [1, 2, 3], 2, False)  # a chain: γ tokens, a path


# --- the real cache: proposals, greedy identity, exact laws


@needs_arctic
def test_proposals_are_depth_bounded_trees_and_lengths_follow_the_match():
    draft = SuffixDraft(VOCAB, CPU, nodes=8, max_spec_factor=2.0, min_token_prob=0.0)
    context = [7, 9, 1, 2, 3, 4, 8, 9, 1, 2, 5, 6, 0, 9, 1]  # the longest match "9 1" continues 2 3 4… and 2 5 6…
    draft.begin(context, 8)
    prop = draft.propose(context, 3, GREEDY, None)
    assert prop.parents is not None and prop.q_probs is None and draft.tree_steps == 1
    tree = TokenTree(prop.parents)
    assert tree.depth <= 3 and tree.size <= 8
    paths = {tuple(prop.tokens[tree.path(n)].tolist()) for n in range(tree.size)}
    assert {(2, 3), (2, 5)} <= paths  # both continuations of the match, sharing the 2
    short = SuffixDraft(VOCAB, CPU, max_spec_factor=1.0, min_token_prob=0.0)
    short.begin(context, 8)
    assert short.propose(context, 6, GREEDY, None).tokens.shape[0] <= 2  # a 2-token match earns ≤ 2 tokens
    chain = SuffixDraft(VOCAB, CPU, tree=0, max_spec_factor=2.0, min_token_prob=0.0)
    chain.begin(context, 8)
    sampled = chain.propose(context, 3, SamplingConfig(1.0), None)
    assert sampled.parents is None and 1 <= sampled.tokens.shape[0] <= 3
    assert sampled.q_probs.sum(-1).tolist() == [1.0] * sampled.tokens.shape[0]  # one-hot: a point mass each


@needs_arctic
@pytest.mark.parametrize("tree", [1, 0])
def test_greedy_identity_and_an_earlier_output_copied(tree):
    """The second decode of a prompt, its first output remembered, proposes that output: identical to the baseline
    and accepting more than without it (the control); then a fresh run (forget) accepts as the first did."""
    target = tiny_llama(1)
    kw = dict(max_new_tokens=32, sampling=GREEDY, generator=None, eos_ids=frozenset([2]))
    for prompt in ([5, 6, 7, 8, 5, 6, 9, 10, 5, 6], [3, 4, 3, 4, 3, 5, 3], [1, 300, 301, 302, 44, 45, 46, 47]):
        base = decode_autoregressive(CachedModel(target), prompt, **kw)
        draft = SuffixDraft(VOCAB, CPU, tree=tree)
        first = decode_speculative(CachedModel(target), draft, prompt, gamma=4, **kw)
        draft.remember_output(first.token_ids)
        second = decode_speculative(CachedModel(target), draft, prompt, gamma=4, **kw)
        assert first.token_ids == base.token_ids == second.token_ids
        assert second.accepted > first.accepted and second.target_calls < first.target_calls
        assert second.drafted == sum(second.draft_lengths) and second.accepted == sum(second.accept_lengths)
        assert all(n <= d <= g for n, d, g in zip(second.accept_lengths, second.draft_depths, second.draft_lengths))
        draft.forget_outputs()
        again = decode_speculative(CachedModel(target), draft, prompt, gamma=4, **kw)
        assert again.accept_lengths == first.accept_lengths


VERIFY_DEFAULT = SamplingConfig(temperature=1.0, top_k=3)


@needs_arctic
def test_the_exact_step_law_holds_and_verify_side_bugs_move_it():
    """verify's exact step law (evidence/pair_step.exact_pair_step_check) on a suffix draft with trees and a
    remembered output: equal to the target's law within 1e-6; the verify-side controls move it by far more."""
    from specbench.evidence.controls import CONTROLS
    from specbench.evidence.pair_step import EXACT_TOL, exact_pair_step_check

    target = sharpen(tiny_llama(0, layers=1), 15.0)
    ctx = [40, 41, 60, 80, 81, 82, 50, 51, 60, 70, 71, 72, 60]  # "60" continues with 80… and 70…: a two-branch tree
    trees = SuffixDraft(VOCAB, CPU, max_spec_factor=3.0, min_token_prob=0.0)
    copies = SuffixDraft(VOCAB, CPU, max_spec_factor=3.0, min_token_prob=0.0)
    copies.remember_output([60, 90, 91])  # an earlier output: its path scores higher than the prompt's tree
    for draft, shape in ((trees, "tree"), (copies, "chain")):
        draft.begin(ctx, 4)
        prop = draft.propose(ctx, 3, VERIFY_DEFAULT, None)
        assert (prop.parents is not None) == (shape == "tree")
        if shape == "tree":
            assert len(TokenTree(prop.parents).children(-1)) >= 2
        else:
            assert prop.tokens.tolist() == [90, 91]
        (check,) = exact_pair_step_check(
            target, lambda d=draft: d, ctx, VERIFY_DEFAULT, gamma=3, length=2, eos_ids=frozenset(), max_cells=4096
        )
        assert check.passed and check.statistic < 1e-6, (shape, check)
        moved = check.detail["controls_moved_law_by"]
        assert set(moved) == {name for name, c in CONTROLS.items() if c.verify_side}
        assert moved["always-accept"] > 100 * EXACT_TOL and moved["abs-residual"] > 100 * EXACT_TOL, (shape, moved)


# --- the runner: what the draft learns stays in its run


class SuffixSession(FakeSession):
    """FakeSession with the suffix draft (one object for every cell, as a real session keeps it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.drafts["suffix"] = make_proposer(parse_draft("suffix"), self.target)


def cell_steps(root, cell: str) -> dict:
    from specbench.measure.results.records import read_records

    return {r["example_id"]: r["speculative"]["accept_lengths"] for r in read_records(root / cell / "examples.jsonl")}


@needs_arctic
def test_each_sweep_cell_starts_from_nothing_and_learns_its_own_outputs(tmp_path, monkeypatch):
    """A γ = 3 cell decodes the same, step for step, after a γ = 1 cell in the same session as alone, and its later
    examples learn from its earlier ones (a remembered output per example). Control: without the runner's reset the
    earlier cell's outputs leak and the counts move."""
    import specbench.measure.run.runner as runner
    from specbench.measure.run.sweep_run import run_sweep

    task = write_prompts(tmp_path)
    session = SuffixSession()
    draft = session.drafts["suffix"]
    taught = []
    real_remember = draft.remember_output
    monkeypatch.setattr(draft, "remember_output", lambda ids: (taught.append(list(ids)), real_remember(ids)))
    shared = run_sweep(make_grid(task, draft="suffix", gamma="1,3", max_new_tokens=24), tmp_path / "a", session=session)
    assert len(taught) == 6 and draft.remembered == 0  # 3 examples per cell, forgotten when each run ends
    alone = run_sweep(
        make_grid(task, draft="suffix", gamma="3", max_new_tokens=24), tmp_path / "b", session=SuffixSession()
    )
    cell = "prompts-suffix-g3-t0"
    assert cell_steps(shared.root, cell) == cell_steps(alone.root, cell)
    monkeypatch.setattr(runner, "forget_outputs", lambda proposer: None)  # control: nothing reset between cells
    leaky = run_sweep(
        make_grid(task, draft="suffix", gamma="1,3", max_new_tokens=24), tmp_path / "c", session=SuffixSession()
    )
    assert cell_steps(leaky.root, cell) != cell_steps(alone.root, cell)


# --- per-depth counts from a tree run's records


def test_per_depth_counts_and_mat_from_tree_steps():
    """Three steps: a tree of 5 nodes and depth 2 accepting 2, a chain of 3 accepting 0, a tree of 4 nodes and depth 3
    accepting 1. Per depth: reached 3, 3, 2; accepted ≥ d 2, 1, 0. Per-position acceptance reads depths (with node
    counts, depth 3 would count the first tree too); #MAT is 1 + Σ accepted per pass."""
    spec = {
        "n_tokens": 1 + 3 + 1 + 2,
        "accept_lengths": [2, 0, 1],
        "draft_lengths": [5, 3, 4],
        "draft_depths": [2, 3, 3],
        "target_calls": 3,
        "decode_s": 1.0,
    }
    base = {"n_tokens": 7, "decode_s": 1.0, "target_calls": 6}
    out = peer_metrics([{"baseline": base, "speculative": spec}])
    assert out["draft_depth_counts"] == [3, 3, 2] and out["accepted_depth_counts"] == [2, 1, 0]
    assert out["acceptance_rate_per_position"] == [2 / 3, 1 / 3, 0.0]
    mat = spec_bench_metrics([{"baseline": base | {"prefill_s": 0.1}, "speculative": spec | {"prefill_s": 0.1}}])
    assert mat["mean_accepted_tokens"] == pytest.approx(1 + sum(out["accepted_depth_counts"]) / (3 + 1))
    old = peer_metrics([{"baseline": base, "speculative": {k: v for k, v in spec.items() if k != "draft_depths"}}])
    assert old["draft_depth_counts"] == [3, 3, 3, 2, 1]  # a record without depths: its draft lengths (chains)

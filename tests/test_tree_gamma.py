"""`--gamma auto` with a tree draft (measure/auto/tree_gamma.py): the (depth, nodes) pricing on synthetic pilots, each
with the control that must choose otherwise, the pilot's tries rebuilt from a real decode, and one end-to-end run."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import VOCAB, tiny_llama
from helpers import greedy_tail

import specbench.decoding.speculative as speculative
from specbench.config import SamplingConfig
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.tree_lookup import TreeLookupDraft, build_trie, walk_trie
from specbench.decoding.speculative import decode_speculative
from specbench.measure.auto.tree_gamma import (
    CheckedExample,
    TreeStep,
    checked_speedup,
    checked_trees,
    emitted,
    grid,
    held_out_trees,
    kept,
    kept_chain,
    pilot_steps,
    price,
    rank_trees,
    step_cost,
)

LINEAR = {k: 1.0 + 0.05 * (k - 1) for k in range(1, 17)}  # every extra token costs 5 % of a one-token pass
FLAT = {k: 1.0 for k in range(1, 17)}
CLIFF = {k: 1.0 if k <= 8 else 1.0 + 0.5 * (k - 8) for k in range(1, 17)}  # flat up to 8 tokens, steep after


def trie_step(branches: list[list[int]], accepted: list[int], nodes: int = 15) -> TreeStep:
    """A pilot step: the trie of `branches` (budget `nodes`) and the path along the `accepted` tokens."""
    ids, parents = build_trie(branches, nodes)
    depths: list[int] = []
    for p in parents:
        depths.append(1 + (depths[p] if p >= 0 else 0))
    path = walk_trie(ids, parents, accepted)
    assert len(path) == len(accepted)
    return TreeStep(tuple(depths), tuple(path))


FOUR = [[10 + 10 * b + i for i in range(8)] for b in range(4)]  # four disjoint branches of 8 tokens; a budget of
#                                                                   15 keeps the first (nodes 0-7) and 7 of the second


def test_grid_is_bounded_by_depth_and_the_calibrated_passes():
    assert grid(8, 16)[:4] == [(1, 1), (1, 7), (1, 11), (1, 15)] and (8, 8) in grid(8, 16) and (8, 7) not in grid(8, 16)
    assert max(n for _, n in grid(8, 9)) == 8 and max(d for d, _ in grid(3, 16)) == 3  # k ≤ 9: no 11 or 15 nodes


def test_a_smaller_budget_keeps_the_first_nodes_of_the_pilot_trie():
    step = trie_step(FOUR, FOUR[1][:3])  # accepted along the second branch: its nodes are 8, 9, 10
    assert kept(step, 8, 15) == (15, 3)
    assert kept(step, 7, 7) == (7, 0)  # depth and budget 7: the first branch alone, the accepted path lost
    assert kept(step, 8, 10) == (10, 2) and kept(step, 2, 7) == (4, 2)  # depth 2: 2 nodes of each branch
    assert kept(step, 8, 10)[0] == len(build_trie(FOUR, 10)[0])  # the budget's own trie at the pilot's depth


def test_a_draft_whose_deeper_nodes_are_never_accepted_gets_depth_1():
    shallow = [trie_step(FOUR, FOUR[i % 2][:1]) for i in range(20)] + [TreeStep(())] * 5
    assert rank_trees(shallow, LINEAR, 8)[0].depth == 1  # the same tokens at the cheapest pass
    deep = [trie_step(FOUR, FOUR[0][:6]) for _ in range(20)] + [TreeStep(())] * 5  # control: 6 accepted
    assert rank_trees(deep, LINEAR, 8)[0].depth >= 6


def test_a_pass_cost_flat_to_8_tokens_and_steep_after_prefers_at_most_7_nodes():
    steps = [trie_step(FOUR, FOUR[i % 2][:4]) for i in range(30)]  # half the paths on the second branch (nodes 8-14)
    best = rank_trees(steps, CLIFF, 8)[0]
    assert best.nodes <= 7, best
    assert rank_trees(steps, FLAT, 8)[0].nodes > 7  # control: when every pass costs the same, more nodes win
    assert price(steps, 4, 15, FLAT).speedup > price(steps, 4, 7, FLAT).speedup


def test_the_pilot_tries_rebuilt_from_a_decode_are_the_ones_verified(monkeypatch):
    target = tiny_llama(0)
    recorded = []
    real = speculative.verify_tree_greedy

    def recording(tree, tokens, best):
        verdict = real(tree, tokens, best)
        recorded.append(tuple(verdict.path or ()))
        return verdict

    monkeypatch.setattr(speculative, "verify_tree_greedy", recording)
    g = torch.Generator().manual_seed(3)
    prompt = (torch.randint(3, VOCAB, (6,), generator=g).tolist() * 4)[:-2]  # repeats: lookup finds several matches
    draft = TreeLookupDraft(VOCAB, torch.device("cpu"), nodes=15)
    kw = dict(gamma=8, max_new_tokens=40, sampling=SamplingConfig(), generator=None, eos_ids=frozenset())
    res = decode_speculative(CachedModel(target), draft, prompt, **kw)
    steps = pilot_steps(prompt, res, 40, 8, draft)
    assert len(steps) == len(res.pass_lengths) and sum(len(s.path) for s in steps) == res.accepted
    assert [len(s.node_depths) for s in steps if s.node_depths] == res.draft_lengths
    trees = [s.path for s in steps if s.node_depths != tuple(range(1, len(s.node_depths) + 1))]
    assert trees == recorded and draft.tree_steps == len(recorded)


def fixed_point_prompt(model, seed: int, depth: int = 6) -> tuple[list[int], list[int]] | None:
    """(A prompt f1 u t f2 u, t) where t is the target's own greedy continuation of the prompt: lookup's match of u
    proposes t after the prefill's first token, and the target accepts it (None: no fixed point in 20 rounds)."""
    g = torch.Generator().manual_seed(seed)
    f1, f2, u, t = (torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (5, 4, 1, depth))
    for _ in range(20):
        prompt = f1 + u + t + f2 + u
        tail = greedy_tail(model, prompt, depth)
        if tail == t:
            return prompt, t
        t = tail
    return None


def test_a_step_that_accepts_the_eos_emits_no_bonus_token():
    """The priced tokens are the decode's: where an EOS is accepted inside a step the decode stops there, so the step
    emits its accepted nodes up to the EOS and no bonus. Control: counting 1 + accepted per step overstates it."""
    target = tiny_llama(0)
    prompt, tail = next(found for seed in range(20) if (found := fixed_point_prompt(target, seed)))
    eos = tail[3]  # the third node of the first step's path (the prefill emits tail[0])
    assert eos not in tail[:3]
    draft = TreeLookupDraft(VOCAB, torch.device("cpu"), nodes=15)
    kw = dict(gamma=8, max_new_tokens=40, sampling=SamplingConfig(), generator=None)
    res = decode_speculative(CachedModel(target), draft, prompt, eos_ids=frozenset([eos]), **kw)
    steps = pilot_steps(prompt, res, 40, 8, draft)
    assert res.token_ids == tail[:4] and res.stop_reason == "eos" and steps[-1].emits == 3
    assert sum(emitted(s, len(s.path)) for s in steps) == len(res.token_ids) - 1
    assert sum(1 + len(s.path) for s in steps) > len(res.token_ids) - 1  # control: the bonus counted after the EOS
    assert price(steps, 8, 15, LINEAR).tokens_per_step == pytest.approx((len(res.token_ids) - 1) / len(steps))


def test_run_tree_lookup_gamma_auto_chooses_depth_and_nodes(tmp_path, monkeypatch):
    from helpers import CORPUS, save_tiny
    from typer.testing import CliRunner

    from specbench.cli import app
    from specbench.measure.run import planning

    monkeypatch.setattr(planning, "PILOT_MIN_STEPS", 1)  # the chain pilot's quota would stop after one example

    target = save_tiny(tmp_path / "t", 0)
    task = tmp_path / "task.jsonl"
    prompts = [f"{CORPUS[i % len(CORPUS)]} {CORPUS[(i + 1) % len(CORPUS)]} {i}" for i in range(12)]
    task.write_text("".join(json.dumps({"prompt": p, "reference": p}) + "\n" for p in prompts))
    args = ["run", "--target", target, "--draft", "tree-lookup", "--task", str(task), "--limit", "2"]
    args += ["--max-new-tokens", "16", "--device", "cpu", "--gamma", "auto", "--results-dir", str(tmp_path / "r")]
    result = CliRunner().invoke(app, args + ["--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    manifest = json.loads(next((tmp_path / "r").iterdir()).joinpath("manifest.json").read_text())
    tree = manifest["auto"]["tree"]
    assert 1 <= tree["depth"] <= 8 and tree["depth"] <= tree["nodes"] <= 15 and tree["pilot_nodes"] == 15
    assert summary["gamma"] == tree["depth"] and manifest["auto"]["draft"] == f"tree-lookup:nodes={tree['nodes']}"
    line = next(x for x in result.stderr.splitlines() if x.startswith("auto: γ "))
    assert line.startswith(f"auto: γ {tree['depth']}, nodes {tree['nodes']} (") and "not a measured speed" in line
    assert "auto: pilot: tree-lookup:nodes=15 at γ 8 on " in result.stderr
    held_out = manifest["auto"]["prediction"]  # the chosen tree's figure, for the 2 timed examples, in the summary
    assert held_out["kind"] == "held_out" and held_out["n_examples"] == 2
    assert held_out["n_pilot"] == planning.PILOT_EXAMPLES  # every pilot example, whatever the step quota
    assert summary["auto_predicted_speedup"] == held_out["speedup"] and "predicted (held out)" in result.stderr
    assert set(manifest["auto"]["calibrations"]["float32"]["target_ms"]) == {str(k) for k in range(1, 17)}
    # the cost-model check: the timed examples' own steps (decoded once, untimed, with the chosen tree); at T = 0 in
    # float32 those are the timed run's steps, so their price per decoded token is the records' steps priced
    check = manifest["auto"]["check"]
    assert check["kind"] == "check" and check["n_examples"] == 2 and check["replay_s"] > 0
    assert summary["auto_check_speedup"] == check["speedup"] and "cost-model check (known acceptance)" in result.stderr
    cal = manifest["auto"]["calibrations"]["float32"]  # tree steps priced by the tree passes it timed (k ≥ 2)
    assert set(cal["tree_ms"]) == {str(k) for k in range(2, 17)}
    causal_ms = {int(k): v for k, v in cal["target_ms"].items()}
    tree_ms = {int(k): v for k, v in cal["tree_ms"].items()}
    lines = next((tmp_path / "r").iterdir()).joinpath("examples.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    logs = []
    for r in records:
        spec, tokens = r["speculative"], r["speculative"]["n_tokens"] - 1  # tokens after the prefill's
        trees = iter(spec.get("tree_paths") or [None] * len(spec["accept_lengths"]))  # per verify pass: a tree's?
        ms = [tree_ms[k] if k > 1 and next(trees) is not None else causal_ms[k] for k in spec["pass_lengths"]]
        logs.append(math.log(tokens / sum(v / causal_ms[1] for v in ms)))
    assert len(logs) == 2 and tree["check_per_token"] == pytest.approx(math.exp(sum(logs) / 2), rel=1e-9)


def test_a_tree_step_reads_its_own_price_and_a_one_branch_step_the_causal_one():
    """With tree steps timed (negative keys: Calibration.tree_cost), a step whose kept nodes form one branch (sent as a
    chain) costs the causal pass and a tree step its own; at depth 1 the same trie keeps one node, a chain."""
    curve = LINEAR | {-k: 2 * v for k, v in LINEAR.items() if k > 1}  # tree steps at twice the causal price
    chain, tree = trie_step(FOUR[:1], FOUR[0][:2]), trie_step(FOUR, FOUR[0][:2])
    assert kept_chain(chain, 8, 15) and not kept_chain(tree, 8, 15) and kept_chain(tree, 1, 1)
    assert step_cost(curve, chain, 8, 15, 8) == LINEAR[9] and step_cost(curve, tree, 8, 15, 15) == 2 * LINEAR[16]
    assert price([chain], 8, 15, curve).speedup == pytest.approx(3 / LINEAR[9])
    assert price([tree], 8, 15, curve).speedup == pytest.approx(3 / (2 * LINEAR[16]))
    assert price([tree], 8, 15, LINEAR).speedup == pytest.approx(3 / LINEAR[16])  # no tree steps timed: causal


def test_the_tree_check_prices_prefill_and_search_around_the_steps():
    """End to end, a timed example's check adds its prefill to both arms and the draft's search to the speculative
    one (pure arithmetic on one example); with neither, it is the per-token price; the pricing interval is
    exp(± 1.96 · 0.05) whatever the examples."""
    step = trie_step(FOUR, FOUR[0][:3])  # accepts 3 of the 15-node trie's nodes: 4 tokens for one pass over 16
    ms = {k: 10.0 * v for k, v in LINEAR.items()}
    bare = CheckedExample((step, step), 0.0, 0.0)
    both = CheckedExample((step, step), 50.0, 4.0)
    assert checked_speedup(bare, 8, 15, ms) == pytest.approx(8 * 10.0 / (2 * 10.0 * LINEAR[16]))
    assert checked_speedup(both, 8, 15, ms) == pytest.approx((50 + 80) / (50 + 4 + 2 * 10.0 * LINEAR[16]))
    check, per_token = checked_trees(price([step], 8, 15, LINEAR), [bare, both], ms)
    assert per_token == pytest.approx(price([step], 8, 15, LINEAR).speedup) == pytest.approx(8 / (2 * LINEAR[16]))
    assert check.kind == "check" and check.n_examples == 2 and check.speedup < per_token
    assert check.high / check.speedup == pytest.approx(math.exp(1.959964 * 0.05), rel=1e-5)


def test_the_held_out_tree_prediction_is_the_pooled_price_with_the_examples_spread():
    """The chosen tree's held-out figure is its price on all pilot steps; its interval widens when the pilot examples
    disagree (the control: the same steps split evenly between examples give a narrower one), and one example with
    tree steps gives no interval."""
    good, poor = trie_step(FOUR, FOUR[0][:6]), trie_step(FOUR, FOUR[0][:1])
    chosen = price([good, poor] * 10, 8, 15, LINEAR)
    mixed = held_out_trees(chosen, [[good, poor]] * 10, LINEAR, 20)
    split = held_out_trees(chosen, [[good, good]] * 5 + [[poor, poor]] * 5, LINEAR, 20)
    assert mixed.speedup == split.speedup == chosen.speedup and mixed.kind == "held_out" and mixed.n_pilot == 10
    assert split.low < mixed.low < chosen.speedup < mixed.high < split.high
    assert mixed.sampling_log_sd < 1e-12 and split.sampling_log_sd > 0.3
    alone = held_out_trees(chosen, [[good, poor] * 10, [TreeStep(())]], LINEAR, 20)
    assert alone.low != alone.low and alone.n_pilot == 2  # NaN: one example's spread is unknown

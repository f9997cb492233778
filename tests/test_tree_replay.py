"""The numerics classifier replays a token tree's pass as a tree (measure/stats/numerics.replay with tree_paths).

A tree step's target pass holds cur and every node; the verifier reads the rows of cur and the accepted path, at
slots 1 + node. The record keeps each tree step's accepted nodes (`tree_paths`), and the replay feeds a pass of the
same size with the path's tokens at those slots and fillers elsewhere (tree.path_tree). What must hold:
1. The path's rows of that replay equal the engine's tree pass bit for bit in bf16, whatever the other nodes were
   (every trial below); a replay shaped as a chain (the classifier before tree paths) does not (16 of 80 trials
   differ on the AMD EPYC this was written on, 2026-12-07) — the reason a tree run's bf16 ties read "unexplained".
   Control: the rows read at the chain's slots of the tree pass differ.
2. End to end, multi-candidate prompt lookup (trees and chains mixed): every row the verifier read equals the
   replay's from the run's record, in float32 and bf16; the forced run past a divergence keeps its tree paths
   consistent (the replay's argmax is the verified token at every position).
3. Records carry `tree_paths` only when a step was a tree, and the record check refuses paths that do not pair.
"""

from __future__ import annotations

import random

import pytest
import torch
from conftest import tiny_llama
from helpers import noisy_pair

import specbench.decoding.speculative as speculative_module
from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import DecodeResult
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.tree_lookup import TreeLookupDraft
from specbench.decoding.forced import decode_forced
from specbench.decoding.speculative import decode_speculative
from specbench.decoding.tree import TokenTree, path_tree
from specbench.measure.results.record_checks import engine_problem
from specbench.measure.results.record_schema import engine_dict
from specbench.measure.run.arms import engine_record
from specbench.measure.stats.numerics import replay, speculative_passes

GREEDY = SamplingConfig()
EOS = frozenset([2])
TREE = TokenTree((-1, -1, 0, 1, 1, 3, -1, 6))  # three branches from cur, one forking
LEAVES = (5, 4, 2, 7)


def prompt_cache(model, prompt: list[int]) -> CachedModel:
    lm = CachedModel(model)
    lm.start()
    lm.forward(torch.tensor(prompt))
    return lm


def slot_rows(logits: torch.Tensor, path: list[int]) -> torch.Tensor:
    return logits[[0] + [1 + node for node in path]]


def test_a_path_replay_reads_the_tree_pass_rows_bit_for_bit_and_a_chain_replay_does_not():
    model = tiny_llama(0, hidden=128, intermediate=512).to(torch.bfloat16)  # sdpa: a chain pass's kernels differ
    rng = random.Random(0)
    trials = chain_differs = 0
    for _ in range(20):
        prompt = [rng.randrange(5, 500) for _ in range(30)]
        cur, nodes = rng.randrange(5, 500), [rng.randrange(5, 500) for _ in range(TREE.size)]
        tree_pass = prompt_cache(model, prompt).forward_tree(torch.tensor([cur, *nodes]), TREE)
        for leaf in LEAVES:
            path = TREE.path(leaf)
            want = slot_rows(tree_pass, path)
            ids = [cur] + [nodes[-1]] * TREE.size  # fillers everywhere but the path's slots
            for node in path:
                ids[1 + node] = nodes[node]
            got = prompt_cache(model, prompt).forward_tree(torch.tensor(ids), path_tree(TREE.size, path))
            assert torch.equal(slot_rows(got, path), want), (leaf, path)
            chain = [cur] + [nodes[node] for node in path]
            chain += [nodes[-1]] * (TREE.size + 1 - len(chain))
            as_chain = prompt_cache(model, prompt).forward(torch.tensor(chain), all_logits=True)[: len(path) + 1]
            chain_differs += not torch.equal(as_chain, want)
            if path != list(range(len(path))):  # control: the tree pass's rows at the chain's slots are others
                assert not torch.equal(tree_pass[: len(path) + 1], want)
            trials += 1
    assert trials == 80 and chain_differs >= 1, chain_differs  # 16 of 80 when written


def repetitive_prompts(n: int, seed: int = 3) -> list[list[int]]:
    """Prompts over 20 token ids: many suffix n-grams recur with different continuations, so lookups branch."""
    rng = random.Random(seed)
    return [[rng.randrange(5, 25) for _ in range(40)] for _ in range(n)]


def engine_rows(monkeypatch) -> list[torch.Tensor]:
    """Patch the loop's judges to log the rows each verify pass's verdict read (cur's and the accepted tokens'),
    in emission order; → that log."""
    log: list[torch.Tensor] = []
    judge_tree, judge_chain = speculative_module.judge_tree, speculative_module.judge_proposal

    def tree(ctx, proposal, tree, logits):
        drafted, verdict = judge_tree(ctx, proposal, tree, logits)
        log.extend(slot_rows(logits, verdict.path or []).clone())
        return drafted, verdict

    def chain(ctx, proposal, logits):
        drafted, verdict = judge_chain(ctx, proposal, logits)
        log.extend(logits[: verdict.n_accepted + 1].clone())
        return drafted, verdict

    monkeypatch.setattr(speculative_module, "judge_tree", tree)
    monkeypatch.setattr(speculative_module, "judge_proposal", chain)
    return log


def lookup_run(target, prompt: list[int]) -> DecodeResult:
    return decode_speculative(
        CachedModel(target),
        TreeLookupDraft(512, torch.device("cpu")),
        prompt,
        gamma=4,
        max_new_tokens=32,
        sampling=GREEDY,
        generator=None,
        eos_ids=EOS,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_tree_lookup_run_replays_to_the_rows_its_verifier_read(dtype, monkeypatch):
    target, _ = noisy_pair(dtype)
    log = engine_rows(monkeypatch)
    tree_rows = off_first_slots = 0
    for prompt in repetitive_prompts(12):
        log.clear()
        run = lookup_run(target, prompt)
        passes = speculative_passes(run.pass_lengths, run.accept_lengths, run.tree_paths)
        rows = replay(target, prompt, run.token_ids, passes, len(run.token_ids) - 1)
        compared = [j for j in range(1, len(run.token_ids)) if j - 1 < len(log)]  # a last plain step reads no judge
        assert compared and all(torch.equal(rows[j], log[j - 1]) for j in compared)
        trees = [p for p in run.tree_paths if p is not None]
        tree_rows += sum(len(p) + 1 for p in trees)
        off_first_slots += sum(p != list(range(len(p))) for p in trees)
    # trees were replayed, some along a path off the first slots (98 and 100 rows, 6 and 5 such paths when written)
    assert tree_rows >= 40 and off_first_slots >= 2, (tree_rows, off_first_slots)


def test_past_a_divergence_the_forced_tree_run_replays_to_its_verified_tokens():
    target, _ = noisy_pair(torch.bfloat16)
    diverged = trees = 0
    for prompt in repetitive_prompts(12, seed=4):
        ref = decode_autoregressive(
            CachedModel(target), prompt, max_new_tokens=32, sampling=GREEDY, generator=None, eos_ids=EOS
        ).token_ids
        forced = decode_forced(CachedModel(target), TreeLookupDraft(512, torch.device("cpu")), prompt, ref, gamma=4)
        assert len(forced.tree_paths) == len(forced.accept_lengths)  # a cut step's path is cut with it:
        assert all(p is None or len(p) == n for p, n in zip(forced.tree_paths, forced.accept_lengths))
        passes = speculative_passes(forced.pass_lengths, forced.accept_lengths, forced.tree_paths)
        rows = replay(target, prompt, ref, passes, len(ref) - 1)
        assert [int(rows[j].argmax()) for j in range(len(ref))] == forced.verified
        diverged += len(forced.divergences)
        trees += sum(p is not None for p in forced.tree_paths)
    assert trees >= 10 and diverged >= 1, (trees, diverged)  # the replay followed cut steps past divergences


def test_a_forced_tree_step_cut_inside_its_path_keeps_the_paths_prefix():
    """A reference the target does not follow (every 4th token changed) cuts accepted tree paths mid-way: each cut
    step's path must keep its first k nodes (len = the step's kept count), or the replay reads the wrong slots."""
    target, _ = noisy_pair(torch.float32)
    for prompt in repetitive_prompts(6, seed=5):
        ref = decode_autoregressive(
            CachedModel(target), prompt, max_new_tokens=32, sampling=GREEDY, generator=None, eos_ids=EOS
        ).token_ids
        ref = [(t + 1) % 512 if j % 4 == 3 else t for j, t in enumerate(ref)]
        forced = decode_forced(CachedModel(target), TreeLookupDraft(512, torch.device("cpu")), prompt, ref, gamma=4)
        assert all(p is None or len(p) == n for p, n in zip(forced.tree_paths, forced.accept_lengths))
        passes = speculative_passes(forced.pass_lengths, forced.accept_lengths, forced.tree_paths)
        rows = replay(target, prompt, ref, passes, len(ref) - 1)
        assert [int(rows[j].argmax()) for j in range(len(ref))] == forced.verified


class Decoded:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def test_records_carry_tree_paths_only_for_trees_and_the_check_pairs_them():
    target, _ = noisy_pair(torch.float32)
    run = lookup_run(target, repetitive_prompts(1)[0])
    row = engine_dict(engine_record(run, Decoded()))
    assert row["tree_paths"] == run.tree_paths and engine_problem(row, "speculative") is None
    chain = DecodeResult([5, 6], "length", 0.0, 0.0, accept_lengths=[1], draft_lengths=[2], tree_paths=[None])
    assert "tree_paths" not in engine_dict(engine_record(chain, Decoded()))  # a chain's record reads as before
    i = next(i for i, p in enumerate(row["tree_paths"]) if p)  # a tree step that accepted ≥ 1 node
    past_end = list(row["tree_paths"])
    past_end[i] = [row["draft_lengths"][i] + k for k in range(len(past_end[i]))]
    for bad in (row["tree_paths"][:-1], past_end):  # controls: one step short; nodes past the step's node count
        assert "tree_paths do not pair" in (engine_problem(dict(row, tree_paths=bad), "speculative") or "")

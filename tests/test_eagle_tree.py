"""An EAGLE head's token tree (issue 43): `--draft eagle3:<folder>,top=k` proposes the head's k likeliest first tokens
as siblings and its greedy chain under the likeliest, verified in one masked pass. Checked: the option's parsing and
refusals; the tree's nodes are the chain draft's and the head's top-k; after every tree step the head's next first
token is its own prediction from the target's layer outputs (the hand-over of cur and the accepted path, a sibling's
path included; a hand-over of the wrong rows fails); greedy identity end to end, under --bit-exact too; the T = 1 step
law with power, and the always-accept control fails."""

from __future__ import annotations

import json

import pytest
from eagle_builders import ROWS, decode, distilled, invoke, offline_first_token, save_target, step_law, write_rows

import specbench.decoding.speculative as speculative
from specbench.decoding.base import Proposal
from specbench.decoding.drafts.eagle import EagleDraft
from specbench.decoding.drafts.factory import make_proposer
from specbench.engines.vllm import check_draft
from specbench.errors import SpecbenchError
from specbench.evidence.controls import CONTROLS
from specbench.models import load_model
from specbench.run_specs import parse_draft


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """(target, task file, a trained EAGLE-3 head's folder)."""
    root = tmp_path_factory.mktemp("eagle-tree")
    target, task_file = save_target(root / "t"), write_rows(root / "toy.jsonl")
    out, _ = distilled("eagle3", target, task_file, root / "head")
    return target, task_file, out


def test_top_is_parsed_from_the_last_part_and_bad_values_are_one_line():
    tree = parse_draft("eagle3:/heads/h,top=3")
    assert (tree.model, tree.head_top, tree.proposes_trees, tree.eagle_head) == ("eagle3:/heads/h", 3, True, "/heads/h")
    chain = parse_draft("eagle3:/heads/h")
    assert (chain.head_top, chain.proposes_trees, chain.options) == (1, False, ())
    assert parse_draft("eagle3:/a,b/c").eagle_head == "/a,b/c"  # a comma inside the folder's path stays in it
    assert parse_draft("eagle:/h,top=2").head_top == 2
    for text, message in (("eagle3:/h,depth=2", "takes top=<k>"), ("eagle3:/h,top=0", "integer >= 1")):
        with pytest.raises(SpecbenchError, match=message):
            parse_draft(text)
    with pytest.raises(SpecbenchError, match="drafts a chain here"):
        check_draft(tree)  # vLLM's eagle methods: a chain
    check_draft(chain)


def test_the_tree_is_the_heads_top_k_beside_its_chain(head):
    target, _, out = head
    t = load_model(target, device="cpu")
    prompt = t.tokenizer(ROWS[5]["prompt"])["input_ids"]
    chain = steps(t, f"eagle3:{out}", [prompt])[0][0][1]  # the first proposals, from the same state
    tree = steps(t, f"eagle3:{out},top=3", [prompt])[0][0][1]
    assert chain.parents is None and tree.parents == [-1, -1, -1, 0, 3] and tree.forward_calls == chain.forward_calls
    assert tree.tokens[[0, 3, 4]].tolist() == chain.tokens.tolist() and len(set(tree.tokens[:3].tolist())) == 3
    assert tree.q_probs is None  # deterministic nodes: point masses at T > 0


def test_after_each_tree_step_the_head_drafts_from_the_kept_rows(head, monkeypatch):
    """Every proposal's first node equals the head run from scratch on the sequence so far: the loop handed over cur's
    and the accepted path's hidden states (a path through a sibling too); handing over the pass's first rows instead
    (the chain's rule) breaks it."""
    target, _, out = head
    t = load_model(target, device="cpu")
    prompts = [t.tokenizer(r["prompt"])["input_ids"] for r in ROWS[4:9]]
    seen, siblings = first_tokens(t, f"eagle3:{out},top=3", prompts)
    assert len(seen) > len(prompts) and siblings > 0  # some steps kept a path through a sibling
    draft = make_proposer(parse_draft(f"eagle3:{out}"), t)
    assert [offline_first_token(t, draft.head, tokens) for tokens, _ in seen] == [first for _, first in seen]

    monkeypatch.setattr(speculative, "logged_rows", lambda tree, path, stepwise: len(path) + 1)
    broken, _ = first_tokens(t, f"eagle3:{out},top=3", prompts)
    assert [offline_first_token(t, draft.head, tokens) for tokens, _ in broken] != [first for _, first in broken]


def steps(t, spec: str, prompts) -> list[list[tuple[list[int], Proposal]]]:
    """Per prompt, (the sequence so far, the proposal) of every step of a greedy γ 3 decode with `spec`."""
    draft = make_proposer(parse_draft(spec), t)
    assert isinstance(draft, EagleDraft)
    seen: list[tuple[list[int], Proposal]] = []
    propose = draft.propose

    def spy(tokens, *args, **kw):
        proposal = propose(tokens, *args, **kw)
        seen.append((list(tokens), proposal))
        return proposal

    draft.propose = spy  # type: ignore[method-assign]
    out = []
    for prompt in prompts:
        decode(t, draft, prompt, 3)
        out.append(seen[:])
        seen.clear()
    return out


def first_tokens(t, spec: str, prompts) -> tuple[list[tuple[list[int], int]], int]:
    """(the sequence and the first node of every proposal; how many steps kept a path through a sibling: one
    accepted token, not node 0's)."""
    per_prompt = steps(t, spec, prompts)
    siblings = 0
    for one in per_prompt:
        for (before, proposal), (after, _) in zip(one, one[1:]):
            kept = after[len(before) :]  # the accepted path and the correction or bonus
            siblings += len(kept) == 2 and kept[0] in proposal.tokens[1:3].tolist()
    return [(tokens, int(p.tokens[0])) for one in per_prompt for tokens, p in one], siblings


def test_run_eagle_tree_end_to_end_and_under_bit_exact(head, tmp_path):
    target, task_file, out = head
    for extra in ((), ("--bit-exact",)):
        folder = tmp_path / ("bit" if extra else "plain")
        args = ["run", "--target", target, "--draft", f"eagle3:{out},top=3", "--task", task_file, "--limit", "3"]
        result = invoke(
            *args, "--max-new-tokens", "12", "--gamma", "3", "--device", "cpu", *extra, "--results-dir", folder
        )
        assert result.exit_code == 0, result.output
        (run,) = folder.iterdir()
        summary = json.loads((run / "summary.json").read_text())
        assert summary["greedy_identity"] == 1.0 and summary["accepted"] > 0, summary
        records = [json.loads(x) for x in (run / "examples.jsonl").read_text().splitlines()]
        assert any(k > 4 for r in records for k in r["speculative"]["pass_lengths"])  # tree passes over cur + nodes
    listing = invoke("list", "drafts")
    assert listing.exit_code == 0 and "eagle3:<folder>,top=<k>" in listing.output
    refused = invoke(*args, "--gamma", "auto", "--device", "cpu", "--results-dir", tmp_path / "r", catch=True)
    last = refused.output.strip().splitlines()[-1]
    assert refused.exit_code == 2 and "prices chains" in last and last.startswith("error:"), refused.output


def test_sampled_tree_steps_keep_the_targets_law(head):
    """T = 1, top-k 3: `verify`'s step law of the tree draft (power ≥ 0.8 against a total variation of 0.1) passes,
    with siblings both accepted and rejected; the always-accept control through the same path fails."""
    target, _, out = head
    joint = step_law(target, f"eagle3:{out},top=3", 10)
    assert joint.verdict == "pass" and joint.power >= 0.8, joint
    assert joint.detail["accepted"] > 0 and joint.detail["rejected"] > 0
    assert not step_law(target, f"eagle3:{out},top=3", 10, control=CONTROLS["always-accept"]).passed

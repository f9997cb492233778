"""Token-tree proposals (decoding/tree.py): the mask and positions, the tree pass and its cache compaction, greedy
identity through the loop with a two-branch proposer, and the exact step law of tree verification at T > 0."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest
import torch
from conftest import VOCAB, sharpen, small_llama, tiny_llama

from specbench.config import SamplingConfig
from specbench.decoding.accept import (
    accepted_count,
    drawn_decision,
    residual,
    verify_greedy,
    verify_tree_greedy,
    verify_tree_sampling,
    walk_tree,
)
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.backend import ForwardBackend
from specbench.decoding.base import Proposal
from specbench.decoding.batched.drafts import common_prefix_length
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.sampling import processed_probs, sample
from specbench.decoding.speculative import decode_speculative
from specbench.decoding.tree import TokenTree, additive_mask, kept_slots
from specbench.evidence.exact_laws import acceptance_measure, f64, memo, target_sequence_law
from specbench.evidence.stat_checks import exact_check, sample_checks

GREEDY = SamplingConfig()
PROMPTS = [[5, 17, 99, 3, 250, 31, 7], [400, 12, 64, 9], [1, 300, 301, 302, 44, 45, 46, 47]]
# parents of a hand-written tree: cur → {0, 1}; 0 → {2}; 1 → {3, 4}; 3 → {5}
HAND = TokenTree((-1, -1, 0, 1, 1, 3))


# --- the contract: shape, mask, positions, slots


def mask_violations(tree: TokenTree, mask: torch.Tensor, cached: int) -> list[tuple[int, int]]:
    """(row, column) where `mask` [1, 1, n+1, kv] disagrees with the definition, derived from paths alone: row 0
    (cur) and row i + 1 (node i) see the prefix, cur and the nodes on their own root-to-node path, nothing else."""
    rows = [set()] + [set(tree.path(i)) for i in range(tree.size)]
    bad = []
    for r, on_path in enumerate(rows):
        for c in range(mask.shape[-1]):
            want = c <= cached or (c - cached - 1) in on_path
            if bool(mask[0, 0, r, c]) != want:
                bad.append((r, c))
    return bad


def test_hand_written_tree_shape_positions_mask_and_slots():
    assert HAND.depths == (1, 1, 2, 2, 2, 3) and HAND.depth == 3
    assert [HAND.children(n) for n in (-1, 0, 1, 2, 3, 4, 5)] == [(0, 1), (2,), (3, 4), (), (5,), (), ()]
    assert HAND.path(5) == [1, 3, 5] and HAND.path(-1) == []
    assert HAND.is_path([1, 3, 5]) and not HAND.is_path([0, 3])
    assert HAND.position_ids(cached=4).tolist() == [[4, 5, 5, 6, 6, 6, 7]]
    mask = HAND.attention_mask(cached=4, kv_length=14)  # a static cache's spare columns at the end
    assert mask.shape == (1, 1, 7, 14) and mask.dtype == torch.bool
    assert mask_violations(HAND, mask, cached=4) == []
    # row of node 5 (path 1 → 3 → 5) over the tree's slots [cur, 0..5]: cur, 1, 3, 5
    assert mask[0, 0, 6, 4:11].tolist() == [True, False, True, False, True, False, True]
    assert not mask[0, 0, :, 11:].any()  # nothing sees the unused slots
    add = additive_mask(torch.tensor([[True, False]]), torch.bfloat16)
    assert add.tolist() == [[0.0, torch.finfo(torch.bfloat16).min]] and add.dtype == torch.bfloat16
    src, dst = kept_slots(cached=10, path=[1, 3, 5])
    assert src.tolist() == [12, 14, 16] and dst.tolist() == [11, 12, 13]


def test_a_wrong_mask_is_detected():  # negative control: a node that sees its sibling, one that misses its parent
    mask = HAND.attention_mask(cached=4, kv_length=11)
    sees_sibling = mask.clone()
    sees_sibling[0, 0, 3 + 1, 4 + 1 + 4] = True  # node 3's row sees node 4's slot
    assert mask_violations(HAND, sees_sibling, cached=4) == [(4, 9)]
    misses_parent = mask.clone()
    misses_parent[0, 0, 5 + 1, 4 + 1 + 3] = False  # node 5's row misses node 3's slot
    assert mask_violations(HAND, misses_parent, cached=4) == [(6, 8)]


def test_a_chain_is_the_one_branch_tree_with_the_causal_mask():
    chain = TokenTree.chain(4)
    assert chain.parents == (-1, 0, 1, 2) and chain.depths == (1, 2, 3, 4)
    assert chain.position_ids(cached=3).tolist() == [[3, 4, 5, 6, 7]]
    causal = torch.ones(5, 8, dtype=torch.bool).tril(diagonal=3)
    assert torch.equal(chain.attention_mask(cached=3, kv_length=8)[0, 0], causal)
    with pytest.raises(ValueError, match="earlier node"):  # parents must be topological
        TokenTree((-1, 2, 0))
    assert TokenTree([-1, 0]).parents == (-1, 0)  # a list is accepted


# --- tree verification on given logits


def test_greedy_tree_verification_follows_the_argmax_branch():
    tokens = [7, 8, 9, 10, 11, 12]  # HAND's nodes
    # argmax at [cur, 0..5]: cur → 8 (node 1), node 1 → 11 (node 4, after trying node 3), node 4 → 99 (a leaf)
    best = [8, 0, 11, 0, 0, 99, 0]  # rows: cur, node 0, node 1, ...
    v = verify_tree_greedy(HAND, tokens, best)
    assert (v.path, v.n_accepted, v.next_token) == ([1, 4], 2, 99)
    assert v.expected_accept == [0.0, 1.0, 0.0, 1.0]  # node 0 missed, 1 hit, 3 missed, 4 hit
    none = verify_tree_greedy(HAND, tokens, [5] * 7)
    assert (none.path, none.next_token, none.expected_accept) == ([], 5, [0.0, 0.0])


def test_a_chain_verified_as_a_tree_matches_the_chain_rule():
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        g = int(torch.randint(1, 5, (1,), generator=gen))
        draft = torch.randint(0, 3, (g,), generator=gen).tolist()
        best = torch.randint(0, 3, (g + 1,), generator=gen).tolist()
        chain, tree = verify_greedy(draft, best), verify_tree_greedy(TokenTree.chain(g), draft, best)
        assert (tree.n_accepted, tree.next_token) == (chain.n_accepted, chain.next_token)
        assert tree.path == list(range(chain.n_accepted)) and tree.expected_accept == chain.expected_accept


# --- the tree pass: logits per node, cache compaction


def tree_pass(model, backend: str, prompt: list[int], tree: TokenTree, nodes: list[int]):
    """A CachedModel holding prompt[:-1], then one tree pass over [prompt[-1], nodes] → (model, logits [n+1, V])."""
    cm = CachedModel(model, backend=ForwardBackend(model, backend))
    cm.start(capacity=len(prompt) + 16)
    cm.forward(torch.tensor(prompt[:-1]))
    return cm, cm.forward_tree(torch.tensor(prompt[-1:] + nodes), tree)


@torch.inference_mode()
def last_logits(model, seq: list[int]) -> torch.Tensor:
    """[V] logits after `seq`, from one plain causal pass without a cache."""
    return model(input_ids=torch.tensor([seq])).logits[0, -1]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("backend", ["eager", "static"])
def test_tree_pass_logits_equal_chain_passes_and_compaction_keeps_the_path(backend, attn):
    model = tiny_llama(0)
    model.set_attn_implementation(attn)
    prompt, nodes = PROMPTS[0], [11, 12, 13, 14, 15, 16]
    cm, logits = tree_pass(model, backend, prompt, HAND, nodes)
    assert logits.shape == (HAND.size + 1, VOCAB) and cm.length == len(prompt) + HAND.size
    torch.testing.assert_close(logits[0], last_logits(model, prompt), rtol=0, atol=1e-5)
    for i in range(HAND.size):  # node i sees exactly its root-to-node path
        path_tokens = [nodes[j] for j in HAND.path(i)]
        torch.testing.assert_close(logits[i + 1], last_logits(model, prompt + path_tokens), rtol=0, atol=1e-5)
    cm.keep_path(len(prompt) - 1, [1, 3, 5])
    assert cm.length == len(prompt) + 3
    after = cm.forward(torch.tensor([7]))  # the next step sees [prompt, 12, 14, 16, 7]
    torch.testing.assert_close(after, last_logits(model, prompt + [12, 14, 16, 7]), rtol=0, atol=1e-5)


def test_the_wrong_mask_or_the_wrong_branch_changes_the_logits():  # negative controls of the test above
    model, prompt, nodes = tiny_llama(0), PROMPTS[0], [11, 12, 13, 14, 15, 16]
    cm = CachedModel(model)
    cm.start()
    cm.forward(torch.tensor(prompt[:-1]))
    mask = HAND.attention_mask(cm.length, cm.mask_length(HAND.size + 1))
    mask[0, 0, 3 + 1, cm.length + 1 + 4] = True  # node 3 also sees its sibling, node 4
    logits = cm.forward_masked(torch.tensor(prompt[-1:] + nodes), mask, HAND.position_ids(len(prompt) - 1))
    assert not torch.allclose(logits[3 + 1], last_logits(model, prompt + [12, 14]), atol=1e-3)
    cm, _ = tree_pass(model, "eager", prompt, HAND, nodes)
    cm.keep_path(len(prompt) - 1, [0, 2])  # keeps the other branch, as a compaction bug would
    after = cm.forward(torch.tensor([7]))
    assert not torch.allclose(after, last_logits(model, prompt + [12, 14, 7]), atol=1e-3)


# --- through the loop: a toy two-branch proposer


class TwoBranchDraft:
    """Test-only tree proposer: branch A is a draft model's chain, branch B the target's own greedy continuation
    (`reference`: prompt + the baseline's tokens) with one token spoiled at a depth that cycles with the steps.
    Both hang from cur, interleaved (A0, B0, A1, B1, ...), so neither branch is a contiguous block of slots.
    B's nodes are deterministic (point masses at T > 0). It credits what each branch got accepted.
    branches="b": B alone, as a chain (tree=False: parents None) or as the same chain sent as a tree."""

    name, is_model = "two-branches", True

    def __init__(self, draft_model, reference: list[int], branches: str = "ab", tree: bool = True):
        self.a, self.reference, self.branches, self.tree = ModelDraft(draft_model, "a"), reference, branches, tree
        self.steps = 0
        self.accepted = Counter()  # branch → accepted tokens, read from the tokens of the next call
        self._last: tuple[int, list[int], list[int]] | None = None

    def begin(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        self.a.begin(prompt_ids, max_new_tokens)

    def propose(self, tokens, gamma, sampling, generator, min_confidence=0.0) -> Proposal:
        self.credit(tokens)
        a = self.a.propose(tokens, gamma, sampling, generator) if "a" in self.branches else None
        a_ids = a.tokens.tolist() if a else []
        b_ids = (self.reference[len(tokens) : len(tokens) + gamma] + [0] * gamma)[:gamma]
        spoil = self.steps % (gamma + 1)
        if spoil < gamma:
            b_ids[spoil] = (b_ids[spoil] + 1) % VOCAB
        self.steps += 1
        self._last = (len(tokens), a_ids, b_ids)
        order = sorted([("a", i) for i in range(len(a_ids))] + [("b", i) for i in range(gamma)], key=lambda n: n[::-1])
        slot = {node: k for k, node in enumerate(order)}  # breadth-first: A0, B0, A1, B1, ...
        parents = [-1 if i == 0 else slot[(br, i - 1)] for br, i in order]
        ids = [a_ids[i] if br == "a" else b_ids[i] for br, i in order]
        q = None
        if not sampling.greedy:  # A's draws carry their law, B's nodes are point masses
            one_hot = torch.nn.functional.one_hot(torch.tensor(ids), VOCAB).float()
            q = torch.stack([a.q_probs[i] if br == "a" else one_hot[k] for k, (br, i) in enumerate(order)])
        calls = a.forward_calls if a else 0
        return Proposal(torch.tensor(ids), q, calls, parents=parents if self.tree else None)

    def credit(self, tokens: list[int]) -> None:
        if self._last is None:
            return
        start, a_ids, b_ids = self._last
        path = tokens[start:-1]  # the step's accepted path (its last token is the correction/bonus)
        if a_ids[:1] != b_ids[:1]:
            for branch, ids in (("a", a_ids), ("b", b_ids)):
                self.accepted[branch] += common_prefix_length(path, ids)

    # the rest of the Proposer protocol: what its model branch runs, nothing for HF or batches
    def model_caches(self):
        return self.a.model_caches()

    def hf_assistant(self):
        return None

    def set_timer(self, clock) -> None:
        self.a.set_timer(clock)

    def lookup_history(self):
        return None

    def batched(self, size, device):
        raise NotImplementedError("a batch-1 test proposer")


def run_pair(target, proposer, prompt, sampling=GREEDY, seed=None, backend="eager", max_new=24):
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    kw = dict(max_new_tokens=max_new, sampling=sampling, generator=gen, eos_ids=frozenset([2]))
    cm = CachedModel(target, backend=ForwardBackend(target, backend))
    if proposer is None:
        return decode_autoregressive(cm, prompt, **kw)
    return decode_speculative(cm, proposer, prompt, gamma=3, **kw)


def assert_counts_consistent(res) -> None:
    assert res.drafted == sum(res.draft_lengths) and res.accepted == sum(res.accept_lengths)
    assert res.trials == len(res.expected_accept)
    assert [n + 1 for n in res.draft_lengths] == [p for p in res.pass_lengths if p > 1]


@pytest.mark.parametrize("backend", ["eager", "static"])
def test_two_branch_trees_keep_greedy_identity(backend):
    target, draft = tiny_llama(0), sharpen(tiny_llama(1), 3.0)
    credited = Counter()
    for prompt in PROMPTS:
        base = run_pair(target, None, prompt, backend=backend)
        proposer = TwoBranchDraft(draft, prompt + base.token_ids)
        res = run_pair(target, proposer, prompt, backend=backend)
        assert res.token_ids == base.token_ids
        assert max(res.pass_lengths) == 2 * 3 + 1  # a chain of γ = 3 never feeds 7 tokens: the tree route ran
        assert_counts_consistent(res)
        proposer.credit(prompt + res.token_ids)
        credited += proposer.accepted
    assert credited["b"] > 0  # tokens accepted from branch B, the second child of cur: a path the chain lacks


def test_a_chain_sent_as_a_tree_decodes_as_the_chain_path_does():
    target, draft = tiny_llama(0), tiny_llama(1)
    for prompt in PROMPTS:
        ref = prompt + run_pair(target, None, prompt).token_ids
        chain = run_pair(target, TwoBranchDraft(draft, ref, branches="b", tree=False), prompt)
        tree = run_pair(target, TwoBranchDraft(draft, ref, branches="b", tree=True), prompt)
        assert tree.token_ids == chain.token_ids
        assert sorted(set(chain.accept_lengths)) == [0, 1, 2, 3]  # every outcome of a γ = 3 step occurred
        for field in ("accepted", "drafted", "trials", "pass_lengths", "accept_lengths", "expected_accept"):
            assert getattr(tree, field) == getattr(chain, field), field


def test_sampled_tree_steps_run_reproducibly_with_consistent_counts():
    target, draft = tiny_llama(0), sharpen(tiny_llama(1), 3.0)
    sampling = SamplingConfig(temperature=0.8)
    prompt = PROMPTS[1]
    runs = [run_pair(target, TwoBranchDraft(draft, prompt + [3] * 40), prompt, sampling, seed=7) for _ in range(2)]
    assert runs[0].token_ids == runs[1].token_ids and len(runs[0].token_ids) <= 24
    assert_counts_consistent(runs[0])
    assert all(0.0 <= b <= 1.0 + 1e-6 for b in runs[0].expected_accept)


# --- the step law at T > 0: one tree step's emitted tokens, completed by the target itself, have the target's law

SAMPLED = SamplingConfig(temperature=0.8, top_k=8)
LAW_PROMPT = (3, 7, 11, 5)
TOL = 1e-6  # exact_check's default: the walk's p (a tree pass) and the reference's (plain passes) differ ~1e-10 here
# parents and node kinds: "x" drawn from the draft's q at the prompt, "a" the target's 2nd choice there, "b"/"b2"
# its 1st/3rd choice after a, "c" its 1st choice after x (a function of the path): the fixed ones are point masses
LAYOUTS = {
    "drawn-first": ((-1, -1, 0, 1, 1), ("x", "a", "c", "b", "b2")),
    "fixed-first": ((-1, 0, 0, -1, 3), ("a", "b", "b2", "x", "c")),
}


class Fork(Exception):
    """The scripted decisions ran out: enumerate both outcomes of the next one."""


def step_law(tree, tokens, q, p, *, count=accepted_count, residual_fn=residual) -> dict[tuple[int, ...], float]:
    """Exact law (float64) of the tokens one tree step emits for fixed nodes: the runner's `walk_tree` under every
    accept/reject script, each decision weighted by acceptance_measure of `count` on the law the walk hands it
    (so the walk's own residuals decide), then the final law the walk returns for the next token."""
    measures: dict = {}
    out: dict = defaultdict(float)
    scripts: list[tuple[bool, ...]] = [()]
    while scripts:
        script = scripts.pop()
        weights: list[float] = []

        def decide(token, law, q_x, script=script, weights=weights):
            if len(weights) == len(script):
                raise Fork
            key = (token, law.numpy().tobytes(), q_x.numpy().tobytes())
            if key not in measures:
                measures[key] = acceptance_measure(count, token, law, q_x)[0]
            weights.append(measures[key] if script[len(weights)] else 1.0 - measures[key])
            return script[len(weights) - 1]

        try:
            path, law, _ = walk_tree(tree, tokens, q, p, decide, residual_fn)
        except Fork:
            scripts += [script + (True,), script + (False,)]
            continue
        for y in law.nonzero().flatten().tolist():
            out[tuple(tokens[i] for i in path) + (y,)] += math.prod(weights) * float(law[y])
    return dict(out)


@pytest.fixture(scope="module")
def law_pair():
    target, draft = small_llama(0, sharpen=3.0), small_llama(1, sharpen=3.0)
    p_at = memo(lambda prefix: processed_probs(last_logits(target, list(prefix)), SAMPLED))
    return target, draft, p_at


def tree_cases(law_pair, layout: str):
    """The tree and, for every draw x of its drawn node: (q(x), node tokens, q [n, V], p [n+1, V] from a tree pass)."""
    target, draft, p_at = law_pair
    parents, kinds = LAYOUTS[layout]
    tree = TokenTree(parents)

    def choice(prefix, k):  # the target's k-th most likely token after the prompt + prefix
        return int(p_at(LAW_PROMPT + prefix).topk(k).indices[-1])

    fixed = {"a": choice((), 2), "b": choice((choice((), 2),), 1), "b2": choice((choice((), 2),), 3)}
    q0 = processed_probs(last_logits(draft, list(LAW_PROMPT)), SAMPLED)  # [V] the drawn node's law
    cases = {}
    for x in q0.nonzero().flatten().tolist():
        tokens = [x if k == "x" else choice((x,), 1) if k == "c" else fixed[k] for k in kinds]
        q = torch.nn.functional.one_hot(torch.tensor(tokens), q0.shape[0]).float()
        q[kinds.index("x")] = q0
        _, logits = tree_pass(target, "eager", list(LAW_PROMPT), tree, tokens)
        cases[x] = (float(q0[x]), tokens, q, processed_probs(logits, SAMPLED))
    return tree, q0, cases


def tree_step_law(law_pair, layout: str, **control) -> dict[tuple[int, ...], float]:
    """The exact law of the tokens one tree step emits, over the drawn node's x and every branch of the walk."""
    tree, _, cases = tree_cases(law_pair, layout)
    out: dict = defaultdict(float)
    for weight, tokens, q, p in cases.values():
        for emitted, w in step_law(tree, tokens, f64(q), f64(p), **control).items():
            out[emitted] += weight * w
    return dict(out)


def completed(law_pair, law: dict[tuple[int, ...], float], length: int = 3) -> dict[tuple[int, ...], float]:
    """A step's law with each emitted sequence continued by the target's own law up to `length` tokens."""
    out: dict = defaultdict(float)
    for emitted, w in law.items():
        for tail, v in target_sequence_law(law_pair[2], length - len(emitted), LAW_PROMPT + emitted).items():
            out[emitted + tail] += w * v
    return dict(out)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_one_tree_step_has_the_targets_law_exactly(law_pair, layout):
    law = tree_step_law(law_pair, layout)
    reference = target_sequence_law(law_pair[2], 3, LAW_PROMPT)
    check = exact_check(f"tree-step/{layout}", completed(law_pair, law), reference, tol=TOL)
    assert check.passed, check
    lengths = Counter()  # the enumeration reached every kind of outcome: a correction, one and two accepted tokens
    for emitted, w in law.items():
        lengths[len(emitted)] += w
    assert min(lengths[n] for n in (1, 2, 3)) > 0.01, lengths


CONTROLS = {  # known bugs of a tree rule: each must move the law far beyond TOL
    "fixed-node-always-accepted": dict(
        count=lambda tok, q, p, u: 1 if bool((q == 1).any()) else accepted_count(tok, q, p, u)
    ),
    "residual-omitted": dict(residual_fn=lambda p_row, q_row: p_row),
}


@pytest.mark.parametrize("control", list(CONTROLS))
def test_a_broken_tree_rule_fails_the_exact_step_law(law_pair, control):  # negative controls
    law = completed(law_pair, tree_step_law(law_pair, "drawn-first", **CONTROLS[control]))
    check = exact_check(f"control/{control}", law, target_sequence_law(law_pair[2], 3, LAW_PROMPT), tol=TOL)
    assert not check.passed and check.statistic > 100 * TOL, check


STEPS = 6000  # sampled steps per run of the G-test below (its power is asserted, not assumed)


def sampled_first_tokens(law_pair, decide_for, n: int, seed: int) -> Counter:
    """Counts of the first two tokens of n sampled tree steps ("drawn-first"), the second drawn from the target
    when the step emitted one token: x ~ q, the runner's walk under `decide_for(generator)`, the final draw."""
    tree, q0, cases = tree_cases(law_pair, "drawn-first")
    gen = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    for _ in range(n):
        _, tokens, q, p = cases[int(sample(q0, gen))]
        if decide_for is None:  # the runner's own verification
            v = verify_tree_sampling(tree, tokens, q, p, gen)
            emitted = tuple(tokens[i] for i in v.path or []) + (v.next_token,)
        else:
            path, law, _ = walk_tree(tree, tokens, q, p, decide_for(gen))
            emitted = tuple(tokens[i] for i in path) + (int(sample(law, gen)),)
        if len(emitted) < 2:
            emitted += (int(sample(law_pair[2](LAW_PROMPT + emitted), gen)),)
        counts[emitted[:2]] += 1
    return counts


def fixed_always(generator):
    """A control's decide: a point-mass (fixed) node is accepted whatever p says."""
    drawn = drawn_decision(generator)
    return lambda token, law, q_x: bool((q_x == 1).any()) or drawn(token, law, q_x)


def test_sampled_tree_verification_passes_the_g_test_and_a_broken_one_fails(law_pair):
    reference = target_sequence_law(law_pair[2], 2, LAW_PROMPT)
    checks = sample_checks("tree-step", sampled_first_tokens(law_pair, None, STEPS, seed=1), reference)
    assert all(c.passed for c in checks), [c.name for c in checks if not c.passed]
    joint = next(c for c in checks if c.name.endswith("joint2/gof"))
    assert joint.n == STEPS and joint.power >= 0.8, joint  # could have failed: power vs any law at TV ≥ 0.05
    broken = sample_checks("control", sampled_first_tokens(law_pair, fixed_always, STEPS, seed=1), reference)
    assert not next(c for c in broken if c.name.endswith("joint2/gof")).passed


@pytest.mark.parametrize("stepwise", [False, True])
def test_a_tree_draft_that_reads_hidden_states_gets_the_kept_positions_rows(stepwise, monkeypatch):
    """ReadsHidden after a tree pass (an EAGLE head's tree): the draft is handed the target's hidden states of cur and
    the accepted path, so everything it observes over a decode is the target's final state at every position but
    the last, in order (as one causal pass computes them), under --bit-exact's one-token passes too; handing over the
    pass's first rows instead (a chain's rule) fails, through a path that leaves the first branch."""
    from specbench.decoding import speculative

    target, draft = tiny_llama(0), sharpen(tiny_llama(1), 3.0)
    prompt = [1, 5, 9, 3]
    base = run_pair(target, None, prompt, max_new=12)

    class HiddenTree(TwoBranchDraft):
        def observe_hidden(self, hidden):
            self.seen.append(hidden.clone())

    def observed(proposer) -> tuple[torch.Tensor, torch.Tensor]:
        proposer.seen = []
        cm = CachedModel(target)
        kw = dict(max_new_tokens=12, sampling=GREEDY, generator=None, eos_ids=frozenset([2]), stepwise=stepwise)
        res = decode_speculative(cm, proposer, prompt, gamma=3, **kw)
        tokens = prompt + res.token_ids
        with torch.no_grad():
            whole = target(torch.tensor([tokens]), output_hidden_states=True).hidden_states[-1][0]
        seen = torch.cat(proposer.seen)
        return seen, whole[: len(seen)]

    seen, whole = observed(HiddenTree(draft, prompt + base.token_ids))
    assert seen.shape[0] >= len(prompt) + 8 and torch.allclose(seen, whole, atol=1e-4), (seen - whole).abs().max()
    monkeypatch.setattr(speculative, "logged_rows", lambda tree, path, stepwise: len(path) + 1)
    seen, whole = observed(HiddenTree(draft, prompt + base.token_ids))
    assert not torch.allclose(seen, whole, atol=1e-4)

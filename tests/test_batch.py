"""Exactness of the batched engines (specbench.decoding.batched) on tiny random models.

Why: a batch mixes rows of different lengths in one rectangle (left padding, per-row positions,
masked rejected slots, rows leaving early), and every row must still be its own example.

1. Greedy identity: each row's output equals its batch-1 baseline (decode_autoregressive) for
   B ∈ {1, 2, 3, 8}, prompts of 1..13 tokens, budgets 1..30 with rows stopping at EOS and at their
   budget, γ ∈ {1, 3, 5}, a model draft and prompt lookup, both policies. A divergence would be
   classified (explain_divergence: "numerics" when the target's own top-2 logits at the first
   differing position are within NEAR_TIE and the batched token is the runner-up, else
   "unexplained"); 0 unexplained is asserted, and in float32 we also assert there are none at all.
   Negative controls (B = 8): rejected draft slots left visible and the prompts' padding left
   visible (ragged, γ = 3), and position ids that count the padding (baseline, on GPT-2, whose
   absolute positions show it) must each make ≥ 3 of the 8 rows diverge, classified "unexplained".
2. Seeded sampling: at T > 0 each row draws only from its own generator in the batch-1 order, so
   the batched baseline and ragged speculative decoding reproduce the batch-1 outputs (tokens,
   accept lengths, pass lengths) for the same seeds, row by row.
3. The sampling law of whole outputs, per row, for both policies: small_llama over a vocabulary of
   24 (T = 1, top-k 2: 2^4 = 16 possible 4-token outputs), draft = the target's logits ÷ 10 (same
   top-2, other weights), γ = 2, B = 3 rows with different prompts, each row its own generator.
   N = 1,000 batches (1,000 outputs per row, rows and batches independent), each row's counts
   against that row's exact chain-rule law by a G-test (specbench.evidence.stat_checks.gof_check,
   cells expected < 5 times pooled) at level 1e-3; asserted power ≥ 0.9 against any law at total
   variation ≥ 0.1 on the tested bins. Negative controls on the same test (N = 400): the residual
   norm(|p − q|) instead of norm(max(0, p − q)) (ragged), and a min policy that keeps a row's
   first L − 1 accepted tokens then its own correction/bonus token (which belongs at position
   n + 1, not L) must each fail at least one row at p < 1e-4.
All seeds are fixed: the outcomes are deterministic.
"""

from __future__ import annotations

import copy
import functools
from collections import Counter

import pytest
import torch
from conftest import VOCAB, sharpen, small_llama, tiny_gpt2, tiny_llama, tiny_t5

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.batched import BatchedCachedModel, decode_autoregressive_batch, decode_speculative_batch
from specbench.decoding.batched import cache as batch_cache
from specbench.decoding.batched import speculative as batch_spec
from specbench.decoding.batched.cache import compaction_index, keep_first, left_pad, new_positions
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.hybrid import HybridDraft
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft
from specbench.decoding.sampling import processed_probs
from specbench.decoding.speculative import decode_speculative
from specbench.errors import SpecbenchError
from specbench.evidence.controls import rejection_step, residual_abs
from specbench.evidence.stat_checks import gof_check

GREEDY = SamplingConfig()
CPU = torch.device("cpu")
NEAR_TIE = 1e-4  # a top-2 logit gap below this is within float32 rounding of batched kernels
PROMPTS = [
    [5, 17, 99, 3, 250, 31, 7, 64, 12, 400],
    [8],
    [40, 41, 42, 40, 41],
    [300, 12, 300, 12, 300, 12, 7],
    [9, 9],
    [77, 401, 23, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
    [222, 100],
    [1, 60, 61, 62],
]
BUDGETS = [30, 12, 1, 25, 7, 30, 18, 2]


# ---------------------------------------------------------------------------------------------
# Fixtures: a peaked target, a draft close to it (so acceptance is partial and rows advance raggedly)


@pytest.fixture(scope="module")
def target():
    return sharpen(tiny_llama(0), 4.0)


@pytest.fixture(scope="module")
def close_draft(target):
    draft = copy.deepcopy(target)
    with torch.no_grad():
        w = draft.lm_head.weight
        w.add_(0.25 * w.std() * torch.randn(w.shape, generator=torch.Generator().manual_seed(3)))
    return draft


@pytest.fixture(scope="module")
def eos_ids(target):
    """EOS ids chosen so that some rows stop at EOS before their budget and others run to it."""
    free = [
        decode_autoregressive(
            CachedModel(target), p, max_new_tokens=b, sampling=GREEDY, generator=None, eos_ids=frozenset()
        ).token_ids
        for p, b in zip(PROMPTS, BUDGETS)
    ]
    return frozenset({free[0][9], free[5][4]})


@pytest.fixture(scope="module")
def baselines(target, eos_ids):
    out = [
        decode_autoregressive(
            CachedModel(target), p, max_new_tokens=b, sampling=GREEDY, generator=None, eos_ids=eos_ids
        )
        for p, b in zip(PROMPTS, BUDGETS)
    ]
    stops = Counter(r.stop_reason for r, b in zip(out, BUDGETS) if b > 2)
    assert stops["eos"] >= 2 and stops["length"] >= 2, stops  # both ways of stopping happen inside a batch
    return [r.token_ids for r in out]


def explain_divergence(model, prompt: list[int], baseline: list[int], batched: list[int]) -> tuple[int, str] | None:
    """None when equal; else (first differing position d, "numerics" or "unexplained"): numerics only when
    the target's own logits after prompt + baseline[:d] (one pass, batch 1) nearly tie between the
    baseline's token and the batched one, so the batch's kernel shapes alone can flip the argmax."""
    d = next((i for i, (a, b) in enumerate(zip(baseline, batched)) if a != b), None)
    if d is None:
        return None if len(baseline) == len(batched) else (min(len(baseline), len(batched)), "unexplained")
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + baseline[:d]])).logits[0, -1]
    top = torch.topk(logits, 2)
    tie = float(top.values[0] - top.values[1]) < NEAR_TIE and {baseline[d], batched[d]} == set(top.indices.tolist())
    return d, "numerics" if tie else "unexplained"


def divergences(model, rows: list[int], outs: list[list[int]], baselines: list[list[int]]) -> Counter:
    kinds = Counter()
    for r, out in zip(rows, outs):
        found = explain_divergence(model, PROMPTS[r], baselines[r], out)
        kinds[found[1] if found else "identical"] += 1
    return kinds


def make_draft(kind: str, close_draft):
    """One proposer for every row of a batch: the close model draft, prompt lookup, or lookup then the model
    (one HybridDraft for all rows: the batch looks up per row and drafts the rest in one batched pass)."""
    if kind == "model":
        return ModelDraft(close_draft, "close")
    if kind == "lookup":
        return PromptLookupDraft(VOCAB, CPU)
    return HybridDraft(PromptLookupDraft(VOCAB, CPU), ModelDraft(close_draft, "close"), "hybrid")


def subsets(size: int) -> list[list[int]]:
    """Which prompts form the batches of this size: consecutive groups, all 8 prompts covered."""
    return [list(range(i, min(i + size, len(PROMPTS)))) for i in range(0, len(PROMPTS), size)][: 3 if size < 3 else 8]


# ---------------------------------------------------------------------------------------------
# 1. Greedy identity


@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_batched_baseline_rows_equal_batch1_greedy(target, eos_ids, baselines, size):
    kinds = Counter()
    for rows in subsets(size):
        res = decode_autoregressive_batch(
            target,
            [PROMPTS[r] for r in rows],
            max_new_tokens=[BUDGETS[r] for r in rows],
            sampling=GREEDY,
            eos_ids=eos_ids,
            pad_id=0,
        )
        kinds += divergences(target, rows, [x.token_ids for x in res], baselines)
        assert all(x.batch_size == len(rows) and x.target_calls == len(x.token_ids) - 1 for x in res)
    assert kinds["unexplained"] == 0 and set(kinds) == {"identical"}, kinds


@pytest.mark.parametrize("size", [1, 2, 3, 8])
@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("policy", ["ragged", "min"])
@pytest.mark.parametrize("draft", ["model", "lookup", "hybrid"])
def test_batched_speculative_rows_equal_batch1_greedy(
    target, close_draft, eos_ids, baselines, size, gamma, policy, draft
):
    kinds, accepts = Counter(), Counter()
    for rows in subsets(size):
        proposer = make_draft(draft, close_draft)
        res = decode_speculative_batch(
            target,
            proposer,
            [PROMPTS[r] for r in rows],
            gamma=gamma,
            policy=policy,
            max_new_tokens=[BUDGETS[r] for r in rows],
            sampling=GREEDY,
            eos_ids=eos_ids,
        )
        kinds += divergences(target, rows, [x.token_ids for x in res], baselines)
        for x in res:
            accepts.update(x.accept_lengths)
            assert sum(x.kept_lengths) >= len(x.token_ids) - 1  # every emitted token was kept by some step
    assert kinds["unexplained"] == 0 and set(kinds) == {"identical"}, kinds
    if draft != "lookup":  # acceptance is partial: rows advance by different amounts within one step
        assert accepts[0] > 0 and accepts[gamma] > 0, accepts


def test_ragged_rows_advance_by_their_own_acceptance_and_min_by_the_batchs(target, close_draft, eos_ids):
    prompts = [PROMPTS[0], PROMPTS[3], PROMPTS[5]]
    ragged, least = (
        decode_speculative_batch(
            target,
            ModelDraft(close_draft, "c"),
            prompts,
            gamma=3,
            policy=p,
            max_new_tokens=30,
            sampling=GREEDY,
            eos_ids=frozenset(),
        )
        for p in ("ragged", "min")
    )
    # ragged: each row keeps n + 1 at every verify step, so rows differ within a step
    for x in ragged:
        assert [k for k, w in zip(x.kept_lengths, x.pass_lengths) if w > 1] == [n + 1 for n in x.accept_lengths]
    assert any(len({x.kept_lengths[i] for x in ragged}) > 1 for i in range(3))
    # min: every row keeps the same count at each step, the least n + 1 of the step
    for i in range(min(len(x.accept_lengths) for x in least)):
        kept = {x.kept_lengths[i] for x in least}
        assert kept == {min(x.accept_lengths[i] + 1 for x in least)}, (i, kept)
    assert any(x.accept_lengths[i] + 1 > x.kept_lengths[i] for x in least for i in range(len(x.accept_lengths)))


def test_greedy_identity_holds_for_gpt2_absolute_positions():
    model = sharpen(tiny_gpt2(0), 4.0)
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[5]]
    base = [
        decode_autoregressive(
            CachedModel(model), p, max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset()
        ).token_ids
        for p in prompts
    ]
    res = decode_autoregressive_batch(model, prompts, max_new_tokens=20, sampling=GREEDY, eos_ids=frozenset())
    spec = decode_speculative_batch(
        model, PromptLookupDraft(VOCAB, CPU), prompts, gamma=3, max_new_tokens=20, sampling=GREEDY, eos_ids=frozenset()
    )
    assert [x.token_ids for x in res] == base and [x.token_ids for x in spec] == base


def test_compaction_keeps_outputs_and_removes_holes(target, close_draft, eos_ids, baselines, monkeypatch):
    calls = Counter()
    original = BatchedCachedModel.compact

    def counted(self):
        calls["compact"] += 1
        before = self.lengths.clone()
        original(self)
        assert torch.equal(self.lengths, before) and self.mask[:, -1].all()  # same tokens, right-aligned

    monkeypatch.setattr(batch_cache, "COMPACT_MIN", 4)
    monkeypatch.setattr(BatchedCachedModel, "compact", counted)
    rows = list(range(8))
    res = decode_speculative_batch(
        target, ModelDraft(close_draft, "c"), PROMPTS, gamma=5, max_new_tokens=BUDGETS, sampling=GREEDY, eos_ids=eos_ids
    )
    assert calls["compact"] > 0
    assert set(divergences(target, rows, [x.token_ids for x in res], baselines)) == {"identical"}


def broken_positions(lengths, valid):
    """Control: one position counter for the whole batch (the widest row's), as a batch without per-row
    positions has: a constant shift per row is harmless to RoPE, but rows that advance raggedly drift."""
    return new_positions(lengths, valid) + (lengths.max() - lengths)[:, None]


def seen_padding(prompts, pad_id, device):
    """Control: the prompts' left padding is left visible to attention."""
    ids, valid = left_pad(prompts, pad_id, device)
    return ids, torch.ones_like(valid)


@pytest.mark.parametrize("control", ["rejected-slots-visible", "padding-visible"])
def test_negative_controls_hole_and_padding_leaks_are_caught(
    target, close_draft, eos_ids, baselines, control, monkeypatch
):
    broken = {
        "rejected-slots-visible": ("keep_first", lambda mask, keep: mask),
        "padding-visible": ("left_pad", seen_padding),
    }[control]
    monkeypatch.setattr(batch_cache, *broken)
    rows = list(range(8))
    res = decode_speculative_batch(
        target, ModelDraft(close_draft, "c"), PROMPTS, gamma=3, max_new_tokens=BUDGETS, sampling=GREEDY, eos_ids=eos_ids
    )
    kinds = divergences(target, rows, [x.token_ids for x in res], baselines)
    assert kinds["unexplained"] >= 3, kinds


def test_negative_control_positions_that_count_padding_are_caught(monkeypatch):
    """GPT-2's learned absolute positions show a position error that RoPE's shift invariance would hide."""
    model = sharpen(tiny_gpt2(0), 4.0)
    base = [
        decode_autoregressive(
            CachedModel(model), p, max_new_tokens=20, sampling=GREEDY, generator=None, eos_ids=frozenset()
        ).token_ids
        for p in PROMPTS
    ]
    monkeypatch.setattr(batch_cache, "new_positions", broken_positions)
    res = decode_autoregressive_batch(model, PROMPTS, max_new_tokens=20, sampling=GREEDY, eos_ids=frozenset())
    kinds = Counter(
        (explain_divergence(model, p, b, x.token_ids) or (0, "identical"))[1] for p, b, x in zip(PROMPTS, base, res)
    )
    assert kinds["unexplained"] >= 3, kinds


# ---------------------------------------------------------------------------------------------
# 2. Seeded sampling reproduces batch 1 row by row


def test_sampled_rows_reproduce_batch1_under_their_seeds(target, close_draft, eos_ids):
    sampling = SamplingConfig(temperature=0.9, top_k=40, top_p=0.95)
    rows = [0, 2, 3, 5, 6]
    prompts, budgets = [PROMPTS[r] for r in rows], [BUDGETS[r] for r in rows]
    gens = lambda: [torch.Generator().manual_seed(100 + r) for r in rows]  # noqa: E731
    base = decode_autoregressive_batch(
        target, prompts, max_new_tokens=budgets, sampling=sampling, eos_ids=eos_ids, generators=gens()
    )
    for draft in ("model", "lookup", "hybrid"):
        make = functools.partial(make_draft, draft, close_draft)
        spec = decode_speculative_batch(
            target,
            make(),
            prompts,
            gamma=3,
            max_new_tokens=budgets,
            sampling=sampling,
            eos_ids=eos_ids,
            generators=gens(),
        )
        for i, (p, b, g) in enumerate(zip(prompts, budgets, gens())):
            one = decode_speculative(
                CachedModel(target),
                make(),
                p,
                gamma=3,
                max_new_tokens=b,
                sampling=sampling,
                generator=g,
                eos_ids=eos_ids,
            )
            assert (spec[i].token_ids, spec[i].accept_lengths, spec[i].pass_lengths, spec[i].draft_lengths) == (
                one.token_ids,
                one.accept_lengths,
                one.pass_lengths,
                one.draft_lengths,
            ), (draft, i)
    for i, (p, b, g) in enumerate(zip(prompts, budgets, gens())):
        one = decode_autoregressive(
            CachedModel(target), p, max_new_tokens=b, sampling=sampling, generator=g, eos_ids=eos_ids
        )
        assert base[i].token_ids == one.token_ids, i


# ---------------------------------------------------------------------------------------------
# 3. The law of whole outputs at T > 0, per row, both policies

V = 24
LAW_PROMPTS = [[4, 6, 8, 10, 12, 13], [7, 3], [15, 9, 21, 4]]
LAW_SAMPLING = SamplingConfig(temperature=1.0, top_k=2)
LAW_NEW, LAW_N, CONTROL_N, LAW_LEVEL, ALT_TV = 4, 1_000, 400, 1e-3, 0.1


def chain_law(model, prompt: list[int], length: int) -> dict[tuple[int, ...], float]:
    """The exact law of the first `length` sampled tokens: the chain rule over every reachable prefix."""
    law = {(): 1.0}
    for _ in range(length):
        prefixes = list(law)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + list(p) for p in prefixes])).logits[:, -1]
        probs = processed_probs(logits, LAW_SAMPLING)
        law = {
            p + (t,): law[p] * float(row[t])
            for p, row in zip(prefixes, probs)
            for t in row.nonzero().flatten().tolist()
        }
    return law


@pytest.fixture(scope="module")
def law_setup():
    target, draft = small_llama(0, sharpen=40.0), small_llama(0, sharpen=4.0)  # the draft: the target's logits ÷ 10
    return target, draft, [chain_law(target, p, LAW_NEW) for p in LAW_PROMPTS]


def row_counts(target, draft, policy: str, n: int, seed: int) -> tuple[list[Counter], Counter]:
    counts, kept = [Counter() for _ in LAW_PROMPTS], Counter()
    lm, proposer = BatchedCachedModel(target), ModelDraft(draft, "d")
    for b in range(n):
        gens = [torch.Generator().manual_seed(seed + 10 * b + r) for r in range(len(LAW_PROMPTS))]
        res = decode_speculative_batch(
            lm,
            proposer,
            LAW_PROMPTS,
            gamma=2,
            policy=policy,
            max_new_tokens=LAW_NEW,
            sampling=LAW_SAMPLING,
            eos_ids=frozenset(),
            generators=gens,
        )
        for c, x in zip(counts, res):
            c[tuple(x.token_ids)] += 1
            kept.update(k - 1 - n for k, n in zip(x.kept_lengths, x.accept_lengths))  # < 0: min cut the row short
    return counts, kept


def law_checks(label: str, counts: list[Counter], laws: list[dict]):
    return [
        gof_check(f"{label}/row{r}", c, law, level=LAW_LEVEL, alt_tv=ALT_TV)
        for r, (c, law) in enumerate(zip(counts, laws))
    ]


@pytest.mark.parametrize("policy", ["ragged", "min"])
def test_each_rows_output_has_the_targets_law(law_setup, policy):
    target, draft, laws = law_setup
    assert all(len(law) == 16 for law in laws)
    counts, cut = row_counts(target, draft, policy, LAW_N, seed=0)
    if policy == "min":
        assert sum(v for k, v in cut.items() if k < 0) > LAW_N // 5, cut  # rows were really cut to the batch's minimum
    for check in law_checks(policy, counts, laws):
        assert check.passed, check
        assert check.power >= 0.9, check


def kept_wrongly(verdicts, policy):
    """Control: L = the batch's min of n + 1, but each row keeps its first L − 1 tokens then its OWN
    correction/bonus token, which was drawn for position n + 1, not L."""
    cap = min(v.n_accepted + 1 for _, v in verdicts)
    return [drafted[: cap - 1] + [v.next_token] for drafted, v in verdicts]


@pytest.mark.parametrize("control", ["abs-residual", "min-keeps-own-correction"])
def test_negative_controls_fail_the_law_test(law_setup, control, monkeypatch):
    target, draft, laws = law_setup
    if control == "abs-residual":
        monkeypatch.setattr(batch_spec, "verify_sampling", rejection_step(residual_fn=residual_abs))
        policy = "ragged"
    else:
        monkeypatch.setattr(batch_spec, "kept_tokens", kept_wrongly)
        policy = "min"
    counts, _ = row_counts(target, draft, policy, CONTROL_N, seed=50_000)
    checks = law_checks(control, counts, laws)
    assert min(c.p_value for c in checks) < 1e-4, [c.p_value for c in checks]


# ---------------------------------------------------------------------------------------------
# Pieces and errors


def test_cache_pieces_are_what_their_docstrings_say():
    ids, valid = left_pad([[5, 6, 7], [8]], 0, CPU)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and valid.tolist() == [[True] * 3, [False, False, True]]
    assert new_positions(torch.tensor([3, 1]), torch.tensor([[True, True], [False, True]])).tolist() == [[3, 4], [0, 1]]
    mask = torch.tensor([[True, True, False, True], [False, True, True, True]])
    assert keep_first(mask, torch.tensor([2, 1])).tolist() == [[True, True, False, False], [False, True, False, False]]
    index, new = compaction_index(mask)
    assert index.tolist() == [[0, 1, 3], [1, 2, 3]] and new.all()
    index, new = compaction_index(torch.tensor([[False, True, False], [True, True, True]]))
    assert index[0, -1] == 1 and new.tolist() == [[False, False, True], [True, True, True]]


def test_bad_inputs_fail_in_one_line(target, close_draft):
    kw = {"max_new_tokens": 4, "sampling": GREEDY, "eos_ids": frozenset()}
    bad = [
        lambda: decode_speculative_batch(target, ModelDraft(close_draft, "c"), [[1]], gamma=2, policy="max", **kw),
        lambda: decode_speculative_batch(target, ModelDraft(close_draft, "c"), [[1]], gamma=0, **kw),
        lambda: decode_autoregressive_batch(target, [], **kw),
        lambda: decode_autoregressive_batch(target, [[1], []], **kw),
        lambda: decode_autoregressive_batch(
            target, [[1], [2]], max_new_tokens=[3], sampling=GREEDY, eos_ids=frozenset()
        ),
        lambda: decode_autoregressive_batch(tiny_t5(0), [[1], [2]], **kw),
    ]
    for call in bad:
        with pytest.raises(SpecbenchError) as err:
            call()
        assert "\n" not in str(err.value)


def test_one_hybrid_per_row_is_accepted_and_exact(target, close_draft, baselines, eos_ids):
    rows = [0, 3, 5]
    hybrids = [HybridDraft(PromptLookupDraft(VOCAB, CPU), ModelDraft(close_draft, "c"), "h") for _ in rows]
    res = decode_speculative_batch(
        target,
        hybrids,
        [PROMPTS[r] for r in rows],
        gamma=3,
        max_new_tokens=[BUDGETS[r] for r in rows],
        sampling=GREEDY,
        eos_ids=eos_ids,
    )
    assert set(divergences(target, rows, [x.token_ids for x in res], baselines)) == {"identical"}


# ---- review findings: each was a real bug before its fix ----------------------------------------------


@pytest.mark.parametrize("order", [1, 2])
def test_one_unfitted_frequency_draft_copied_per_row_keeps_rows_apart(order):
    """A frequency draft refitted on each row's prompt must draft each row from its own law: the rows
    reproduce their batch-1 runs under the same seeds (a memo shared between the copies broke this)."""
    from specbench.decoding.drafts.ngram import FrequencyDraft

    target = sharpen(tiny_llama(0), 4.0)
    sampling = SamplingConfig(temperature=1.0)
    prompts = [[5, 17, 99, 3, 250, 31, 7, 64, 12, 400], [300, 12, 300, 12, 300, 12, 7]]
    batch = decode_speculative_batch(
        target,
        FrequencyDraft(order, VOCAB, torch.device("cpu")),
        prompts,
        gamma=3,
        max_new_tokens=20,
        sampling=sampling,
        eos_ids=frozenset(),
        generators=[torch.Generator().manual_seed(i) for i in range(2)],
    )
    for i, prompt in enumerate(prompts):
        alone = decode_speculative(
            CachedModel(target),
            FrequencyDraft(order, VOCAB, torch.device("cpu")),
            prompt,
            gamma=3,
            max_new_tokens=20,
            sampling=sampling,
            eos_ids=frozenset(),
            generator=torch.Generator().manual_seed(i),
        )
        assert (batch[i].token_ids, batch[i].accept_lengths) == (alone.token_ids, alone.accept_lengths), i


def test_a_sliding_window_target_is_refused_at_batch_above_one():
    """The window counts cache columns; a row's rejected drafts would leave holes inside it (wrong attention)."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=6,
        max_position_embeddings=128,
    )
    target = MistralForCausalLM(cfg).eval()
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    with pytest.raises(SpecbenchError, match="sliding window"):
        decode_speculative_batch(
            target,
            PromptLookupDraft(VOCAB, torch.device("cpu")),
            prompts,
            gamma=3,
            max_new_tokens=8,
            sampling=SamplingConfig(temperature=0.0),
            eos_ids=frozenset(),
        )
    one = decode_speculative_batch(
        target,
        PromptLookupDraft(VOCAB, torch.device("cpu")),
        prompts[:1],
        gamma=3,
        max_new_tokens=8,
        sampling=SamplingConfig(temperature=0.0),
        eos_ids=frozenset(),
    )
    assert len(one[0].token_ids) == 8


def test_one_hybrid_for_all_rows_mixes_lookup_and_batched_model_tokens(
    target, close_draft, eos_ids, baselines, monkeypatch
):
    """The batched hybrid really does both in one step: some row takes lookup tokens while others get model
    tokens from the one batched pass (and a row's proposal can join both), and the rows stay exact."""
    from specbench.decoding.batched import drafts

    seen = Counter()
    real = drafts.BatchedHybridDraft.propose

    def spy(self, rows, gammas, sampling):
        out = real(self, rows, gammas, sampling)
        for g, p in zip(gammas, out):
            seen["model" if p.forward_calls else "lookup"] += g > 0 and p.tokens.shape[0] > 0
            seen["joined"] += 0 < p.forward_calls < p.tokens.shape[0]
        return out

    monkeypatch.setattr(drafts.BatchedHybridDraft, "propose", spy)
    rows = list(range(8))
    prompts = [PROMPTS[r] + PROMPTS[r][:6] for r in rows]  # each prompt repeats its start: lookup has matches
    res = decode_speculative_batch(
        target,
        make_draft("hybrid", close_draft),
        prompts,
        gamma=4,
        max_new_tokens=[BUDGETS[r] for r in rows],
        sampling=GREEDY,
        eos_ids=eos_ids,
    )
    alone = [
        decode_autoregressive(
            CachedModel(target), p, max_new_tokens=BUDGETS[r], sampling=GREEDY, generator=None, eos_ids=eos_ids
        ).token_ids
        for p, r in zip(prompts, rows)
    ]
    assert [x.token_ids for x in res] == alone
    assert seen["model"] > 0 and seen["lookup"] > 0 and seen["joined"] > 0, seen

"""--bit-exact (decoding/stepwise.py): every verify pass as one-token passes, so greedy identity is exact in any dtype.

What must hold, on the tiny random Llama pair of test_numerics (hidden 128, where bf16 passes of 1 and γ+1 rows
round differently; the draft is the target plus weight noise):
1. Negative control first: without the mode, a (γ+1)-token pass's rows are not bit-identical to one-token steps, and
   greedy speculative output diverges from the baseline on some prompts, in bf16 and in float16.
2. With the mode, the rows the verifier reads are the baseline's bit for bit, chains and token trees alike, and greedy
   speculative output equals the baseline's on every prompt; the identity line reads "bit-exact mode: N/N identical".
3. At T > 0 with the same seed: the first token (drawn from the prefill's logits by the fresh generator) is the same in
   both engines, and every row the verifier reads equals the one-token row at its prefix (the negative control: not
   so without the mode). The later draws differ (the draft, the accept test and the residual consume the generator).
4. Planted bugs (evidence/planted.py: late verified logits, a bias on the verified rows, and a flip within one
   spacing of a tie) diverge under the mode on every example they touch, exactly at the first touched position,
   and every divergence is unexplained.
5. The option: refused beside --exact-shapes, at --batch-size > 1 and by hf-assisted; old configs keep their ids;
   the CLI prints the identity line and says its speedup is not a speed measurement.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from helpers import CORPUS, noisy_pair, run_args, save_tiny

from specbench.config import LoadSpec, RunConfig, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import Proposal
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.speculative import decode_speculative
from specbench.decoding.stepwise import stepwise_forward, stepwise_keep_path, stepwise_tree
from specbench.decoding.tree import TokenTree
from specbench.engines import check_config
from specbench.errors import SpecbenchError
from specbench.measure.stats.margin_gate import identity_line
from specbench.measure.stats.metric_units import first_divergence
from specbench.measure.stats.numerics import explain_bit_exact, replay, step_passes

GREEDY = SamplingConfig()
EOS = frozenset([2])
GAMMA = 4
MAX_NEW = 32
PROMPTS = [[5 + 7 * i + j * (i + 3) % 400 for j in range(12)] for i in range(12)]  # test_numerics' prompts
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
pair = noisy_pair


@pytest.fixture(scope="module")
def bf16_runs():
    """(target, draft, the baseline's tokens per prompt) in bf16, decoded once for the module."""
    target, draft = pair(torch.bfloat16)
    return target, draft, [baseline(target, prompt) for prompt in PROMPTS]


@pytest.fixture(scope="module", params=list(DTYPES))
def runs(request, bf16_runs):
    """(dtype name, target, draft, the baseline's tokens per prompt). float16 on 4 prompts (its greedy outputs never
    diverged on this pair: its control is the rows)."""
    if request.param == "bf16":
        return ("bf16", *bf16_runs)
    target, draft = pair(torch.float16)
    return "fp16", target, draft, [baseline(target, prompt) for prompt in PROMPTS[:4]]


def baseline(target, prompt, sampling=GREEDY, seed=None) -> list[int]:
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    kw = dict(max_new_tokens=MAX_NEW, sampling=sampling, generator=gen, eos_ids=EOS)
    return decode_autoregressive(CachedModel(target), prompt, **kw).token_ids


def speculative(target, draft, prompt, stepwise: bool, sampling=GREEDY, seed=None, proposer=None):
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    return decode_speculative(
        CachedModel(target),
        proposer or ModelDraft(draft, "d"),
        prompt,
        gamma=GAMMA,
        max_new_tokens=MAX_NEW,
        sampling=sampling,
        generator=gen,
        eos_ids=EOS,
        stepwise=stepwise,
    )


def record(target, prompt, base: list[int], spec) -> dict:
    """An example record as the runner writes it under --bit-exact."""
    d = first_divergence(base, spec.token_ids)
    numerics = explain_bit_exact(target, prompt, {"token_ids": base}, {"token_ids": spec.token_ids}, d)
    return {"identical": d is None, "numerics": numerics}


# ---- 1 and 2: rows, then outputs ------------------------------------------------------------------------------------


def rows_after(target, prompt: list[int], ids: list[int], stepwise: bool, done: tuple | list = ()) -> torch.Tensor:
    """Logits [k, V] of ids after the prompt (one prefill pass) and `done` (one-token steps: the engines' cache path),
    from stepwise passes or from one pass over ids."""
    lm = CachedModel(target)
    lm.start()
    lm.forward(torch.tensor(prompt))
    for token in done:
        lm.forward(torch.tensor([token]))
    t = torch.tensor(ids)
    return stepwise_forward(lm, t) if stepwise else lm.forward(t, all_logits=True)


def test_one_token_rows_are_the_baselines_and_a_multi_token_pass_is_not(runs):
    """A verify pass over [cur, x_1..x_4] = out[s..s+4] after the prompt and out[:s] (s = 0..3, 2 prompts), against the
    baseline's own rows there: stepwise rows are bit-identical to them, while the one-pass rows differ somewhere (the
    negative control: why the mode exists; on the AMX Xeon of 2026-12-06 they differed at sequence lengths 15-19)."""
    _, target, _, base = runs
    differ = 0
    for prompt, out in zip(PROMPTS[:2], base):
        steps = replay(target, prompt, out, step_passes(len(out)), 4 + GAMMA)  # the baseline's own rows
        for s in range(4):
            ids = out[s : s + GAMMA + 1]
            want = torch.stack([steps[j] for j in range(s + 1, s + GAMMA + 2)])
            assert torch.equal(rows_after(target, prompt, ids, True, out[:s]), want)
            differ += not torch.equal(rows_after(target, prompt, ids, False, out[:s]), want)
    assert differ >= 1


def test_greedy_identity_is_exact_with_the_mode_and_not_without(runs):
    """bf16: the negative control (without the mode some prompt diverges: 6 of 12 on a Xeon with AMX, 2026-12-06),
    then every prompt identical with it, and the identity line says so. float16: identical with the mode (without it
    these outputs happened not to diverge; its rows do, test above)."""
    name, target, draft, base = runs
    if name == "bf16":
        diverged = 0
        for prompt, out in zip(PROMPTS, base):  # stop at the first divergence: it is all the control needs
            diverged += speculative(target, draft, prompt, stepwise=False).token_ids != out
            if diverged:
                break
        assert diverged, "the normal pass never diverged: this pair cannot show what the mode fixes"
    records = [record(target, p, out, speculative(target, draft, p, stepwise=True)) for p, out in zip(PROMPTS, base)]
    summary = identity_line(records)
    assert summary["identity_line"] == f"bit-exact mode: {len(base)}/{len(base)} identical", summary
    assert summary["numerics_floor"] is None and summary["divergences_numerics"] == 0


def test_tree_rows_are_chain_rows_and_the_kept_path_is_the_chains_cache():
    """stepwise_tree on a hand-written tree: each node's row equals a one-token step after the prefix, cur and its
    ancestors (bitwise), and after stepwise_keep_path the cache equals a chain's over the accepted path."""
    target, _ = pair(torch.bfloat16)
    tree = TokenTree((-1, -1, 0, 1, 1, 3))
    prompt, cur, nodes = PROMPTS[0], 40, [7, 99, 3, 250, 31, 64]
    lm = CachedModel(target)
    lm.start()
    lm.forward(torch.tensor(prompt))
    ids = torch.tensor([cur] + nodes)
    rows = stepwise_tree(lm, ids, tree)
    for node in range(tree.size):
        chain = [cur] + [nodes[i] for i in tree.path(node)]
        assert torch.equal(rows[node + 1], rows_after(target, prompt, chain, stepwise=True)[-1]), node
    assert torch.equal(rows[0], rows_after(target, prompt, [cur], stepwise=True)[0])
    path = tree.path(5)  # [1, 3, 5]
    stepwise_keep_path(lm, len(prompt), ids, path)
    assert lm.length == len(prompt) + 1 + len(path)
    after = lm.forward(torch.tensor([5]))
    chain = [cur] + [nodes[i] for i in path] + [5]
    assert torch.equal(after, rows_after(target, prompt, chain, stepwise=True)[-1])


class TwoBranches:
    """A greedy tree proposer: branch A the draft model's chain, branch B the target's own continuation
    (`reference`: prompt + the baseline's tokens) with one token spoiled at a depth that cycles with the steps, both
    children of cur (A's nodes first, then B's)."""

    name, is_model = "two-branches", True

    def __init__(self, draft_model, reference: list[int]):
        self.a, self.reference, self.steps = ModelDraft(draft_model, "a"), reference, 0

    def begin(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        self.a.begin(prompt_ids, max_new_tokens)

    def propose(self, tokens, gamma, sampling, generator, min_confidence=0.0) -> Proposal:
        a = self.a.propose(tokens, gamma, sampling, generator)
        b = (self.reference[len(tokens) : len(tokens) + gamma] + [0] * gamma)[:gamma]
        if self.steps % (gamma + 1) < gamma:
            b[self.steps % (gamma + 1)] = (b[self.steps % (gamma + 1)] + 1) % 512
        self.steps += 1
        n = a.tokens.shape[0]
        parents = [-1, *range(n - 1), -1, *range(n, n + gamma - 1)]
        return Proposal(torch.cat([a.tokens, torch.tensor(b)]), None, a.forward_calls, parents=parents)

    def model_caches(self):
        return self.a.model_caches()


def test_tree_proposals_keep_bit_exact_identity():
    """The two-branch tree proposer through the loop in bf16: identical to the baseline on the first 4 prompts, and
    the tree route ran (stepwise_tree and stepwise_keep_path in the loop)."""
    target, draft = pair(torch.bfloat16)
    for prompt in PROMPTS[:4]:
        out = baseline(target, prompt)
        res = speculative(target, None, prompt, True, proposer=TwoBranches(draft, prompt + out))
        assert res.token_ids == out
        assert max(res.pass_lengths) == 2 * GAMMA + 1  # a tree of two branches of γ was verified


# ---- 3: T > 0 -------------------------------------------------------------------------------------------------------


def captured_rows(monkeypatch) -> list[tuple[int, torch.Tensor, int]]:
    """Patch the verifier to record (output length, the rows it read, accepted count) at every step."""
    import specbench.decoding.speculative as speculative_module

    seen: list[tuple[int, torch.Tensor, int]] = []
    original = speculative_module.judge_proposal

    def spy(ctx, proposal, logits):
        drafted, verdict = original(ctx, proposal, logits)
        seen.append((len(ctx.res.token_ids), logits.clone(), verdict.n_accepted))
        return drafted, verdict

    monkeypatch.setattr(speculative_module, "judge_proposal", spy)
    return seen


@pytest.mark.parametrize("stepwise", [True, False], ids=["bit-exact", "normal"])
def test_sampled_rows_are_the_one_token_rows_and_the_first_token_matches(stepwise, monkeypatch):
    """T = 1, top-k 50, the same seed per prompt in both engines (bf16, 4 prompts). The first token matches always
    (both draw it first from the same prefill logits). Under the mode every verified row at an emitted position
    (rows 0..n of a step that accepted n) equals the one-token row at that prefix, bitwise; without it some differ."""
    target, draft = pair(torch.bfloat16)
    sampling = SamplingConfig(temperature=1.0, top_k=50)
    seen = captured_rows(monkeypatch)
    compared = differ = 0
    for seed, prompt in enumerate(PROMPTS[:4]):
        seen.clear()
        res = speculative(target, draft, prompt, stepwise, sampling, seed)
        assert res.token_ids[0] == baseline(target, prompt, sampling, seed)[0]
        out = res.token_ids
        steps = replay(target, prompt, out, step_passes(len(out)), len(out) - 1)
        for at, rows, n in seen:
            for i in range(min(n + 1, len(out) - at)):
                compared += 1
                differ += not torch.equal(rows[i], steps[at + i])
    assert compared > 20
    assert differ == 0 if stepwise else differ > 0, (differ, compared)


# ---- 4: planted bugs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("plant", ["late", "biased", "near-tie"])
def test_planted_bugs_diverge_on_every_example_they_touch(plant, bf16_runs):
    """bf16 under the mode, 6 prompts: an example's first divergence is exactly the first position the plant changed
    (None where it changed none), every divergence is unexplained, and the plant touched enough examples to mean
    something (each touched 6/6 on the AMX Xeon, 2026-12-06; the near-tie plant acts only where a row's top two
    logits are within one spacing, which in bf16 on this pair happens in every example)."""
    from specbench.evidence import planted as plants

    target, draft, base = bf16_runs
    prompts = PROMPTS[:6]
    block = {
        "late": lambda: plants.late_verified_logits(every=3),
        "biased": lambda: plants.biased_verified_rows(token=3),
        "near-tie": lambda: plants.near_tie_flips(),
    }[plant]
    records, touched = [], 0
    with block() as seen:
        for prompt, out in zip(prompts, base):
            seen.reset()
            spec = speculative(target, draft, prompt, stepwise=True)
            assert first_divergence(out, spec.token_ids) == seen.first_changed(), (prompt, seen.changed)
            touched += seen.first_changed() is not None
            records.append(record(target, prompt, out, spec))
    summary = identity_line(records)
    assert touched >= 4, touched
    assert summary["divergences_unexplained"] == touched and summary["divergences_numerics"] == 0, summary
    assert summary["identity_line"].startswith(f"bit-exact mode: {len(prompts) - touched}/{len(prompts)} identical")


def test_a_change_past_the_clean_outputs_end_is_not_a_touch():
    """A step that accepts drafts past the end of sequence (or the budget) may have its planted verdict change tokens
    the loop then cuts: no output can show them, so they touch nothing (seen on ding-de-en, AMD EPYC 2026-12-07: a
    17-token output, the +10 plant changing position 18, counted as a touch that did not diverge)."""
    from specbench.evidence.planted import PlantedSteps

    seen = PlantedSteps(changed=[18, 20, 18])
    assert seen.first_changed() == 18 and seen.changed_before() == [18, 20]
    assert seen.first_changed(within=17) is None and seen.first_changed(within=19) == 18
    assert seen.changed_before(17) == [] and seen.changed_before(19) == [18]
    assert PlantedSteps(changed=[3, 18]).first_changed(within=17) == 3


def test_the_near_tie_plant_stays_within_one_spacing():
    """near_tie_rows moves only rows whose top two bf16 logits are within one spacing (ties and one-spacing gaps),
    and there names the runner-up; a row two spacings apart is left alone."""
    from specbench.evidence.planted import near_tie_rows

    logits = torch.zeros(3, 8, dtype=torch.bfloat16)
    logits[0, [2, 5]] = 10.0  # an exact tie: argmax 2, the plant picks 5
    logits[1, 1], logits[1, 4] = 10.0, 10.0 - 0.0625  # one spacing at 10
    logits[2, 0], logits[2, 6] = 10.0, 10.0 - 0.125  # two spacings: untouched
    out = near_tie_rows(logits)
    assert out.argmax(-1).tolist() == [5, 4, 0]
    assert torch.equal(out[2], logits[2])


# ---- 5: the option --------------------------------------------------------------------------------------------------


def test_the_option_is_validated_and_old_configs_keep_their_ids():
    from specbench.measure.run.planning import run_id_for

    base = RunConfig(LoadSpec("tiny-target", device="cpu"), draft="prompt-lookup", task="aclsum")
    assert "bit_exact" not in base.to_dict()  # an old config's dict, id and folder are unchanged
    assert RunConfig.from_dict(base.to_dict()) == base
    exact = RunConfig(LoadSpec("tiny-target", device="cpu"), draft="prompt-lookup", task="aclsum", bit_exact=True)
    assert exact.to_dict()["bit_exact"] is True and RunConfig.from_dict(exact.to_dict()) == exact
    assert "-bitexact-" in run_id_for(exact) and "bitexact" not in run_id_for(base)
    check_config(exact)
    for over, says in (
        (dict(exact_shapes=True), "--bit-exact and --exact-shapes"),
        (dict(batch_size=4), "--batch-size > 1"),
        (
            dict(engine="hf-assisted", draft="tiny-draft"),
            "--bit-exact is not supported by --engine hf-assisted: its passes",
        ),
    ):
        config = RunConfig(
            LoadSpec("tiny-target", device="cpu"),
            **({"draft": "prompt-lookup", "task": "aclsum"} | over | {"bit_exact": True}),
        )
        with pytest.raises(SpecbenchError, match=says):
            check_config(config)


def test_cli_run_prints_the_bit_exact_identity_line(tmp_path):
    from typer.testing import CliRunner

    from specbench.cli import app

    models = {"target": save_tiny(tmp_path / "target", 0), "draft": save_tiny(tmp_path / "draft", 1)}
    task = tmp_path / "task.jsonl"
    task.write_text("\n".join(json.dumps({"prompt": p, "reference": p}) for p in CORPUS[:3]) + "\n")
    args = run_args(models, str(task), tmp_path, "--bit-exact", "--dtype", "bfloat16", "--gamma", "3")
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # rich wraps lines at the runner's 80 columns
    assert "greedy identity: bit-exact mode: 3/3 identical" in said
    assert "--bit-exact (verify passes run as one-token steps): its speedup is not a speed measurement" in said
    run_dir = next((tmp_path / "res").iterdir())
    assert run_dir.name.endswith(run_dir.name.split("-")[-1]) and "-bitexact-" in run_dir.name
    rows = [json.loads(line) for line in (run_dir / "examples.jsonl").read_text().splitlines()]
    assert all(r["numerics"]["mode"] == "bit-exact" for r in rows)


# ---- llama.cpp: the same mode on its kernels ------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not built")
@pytest.mark.parametrize("quant", ["F32", "Q8_0"])
def test_llama_cpp_bit_exact_identity(quant, tmp_path):
    """The tiny random GGUF (tests/tiny_gguf.py) on llama.cpp, prompt lookup at γ 2 and 4, 3 prompts × 48 tokens: under
    the mode every output equals plain decoding's, and stepwise rows after a rollback (seq_rm) are the plain steps'
    bit for bit. (Whether a 5-token pass differs from one-token steps here depends on the build and the CPU: on the
    AMX Xeon of 2026-12-06 F32 did and Q8_0 did not, so no control is asserted on llama.cpp; torch's is above.)"""
    from tiny_gguf import EOS_ID, VOCAB, write_tiny_gguf

    from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft
    from specbench.engines.llama_cpp import backend as lc

    lm = lc.LlamaCppModel(str(write_tiny_gguf(tmp_path / f"tiny-{quant}.gguf", quant=quant)), n_ctx=512, threads=1)
    prompt = [1] + [3 + b for b in b"the cat sat on the mat. the cat sat on the"]
    prompts = [prompt, prompt[:20], [1] + [3 + b for b in b"abc abd abc abd abc"]]
    eos = frozenset({EOS_ID})
    draft = PromptLookupDraft(VOCAB, torch.device("cpu"))
    for p in prompts:
        plain = decode_autoregressive(lm, p, max_new_tokens=48, sampling=GREEDY, generator=None, eos_ids=eos)
        for gamma in (2, 4):
            res = decode_speculative(
                lm,
                draft,
                p,
                gamma=gamma,
                max_new_tokens=48,
                sampling=GREEDY,
                generator=None,
                eos_ids=eos,
                stepwise=True,
            )
            assert res.drafted > 0 and res.token_ids == plain.token_ids, (quant, gamma)
    lm.start()
    lm.forward(prompt[:10])
    stepwise_rows = stepwise_forward(lm, torch.tensor(prompt[10:15]))
    lm.truncate(10)
    steps = torch.stack([lm.forward(prompt[10 + i : 11 + i], all_logits=True)[0] for i in range(5)])
    assert torch.equal(stepwise_rows, steps)
    lm.close()


@pytest.mark.parametrize("family", ["gpt2", "t5"])
def test_other_model_families_in_bf16(family):
    """GPT-2 (another decoder) and T5 (encoder-decoder: stepwise passes over the decoder's cache), bf16, a model draft:
    bit-exact identity on 2 prompts of 24 tokens."""
    from conftest import tiny_gpt2, tiny_t5

    make = {"gpt2": (lambda: tiny_gpt2(0), lambda: tiny_gpt2(1)), "t5": (lambda: tiny_t5(2), lambda: tiny_t5(5))}
    target, draft = (m().to(torch.bfloat16) for m in make[family])
    kw = dict(eos_ids=frozenset([1]), decoder_start_id=0) if family == "t5" else dict(eos_ids=EOS)
    for prompt in PROMPTS[:2]:
        plain = decode_autoregressive(
            CachedModel(target), prompt, max_new_tokens=24, sampling=GREEDY, generator=None, **kw
        ).token_ids
        res = decode_speculative(
            CachedModel(target),
            ModelDraft(draft, "d"),
            prompt,
            gamma=GAMMA,
            max_new_tokens=24,
            sampling=GREEDY,
            generator=None,
            stepwise=True,
            **kw,
        )
        assert res.token_ids == plain and res.drafted > 0

"""The step law on the real pair: many speculative steps from one context, each verified by the real rule.

The per-step accept/resample law has far more power per sample than whole sequences: a step costs one
verification, its target forwards are memoised per state, so 100,000 steps fit where a few hundred
sequences do. `sample_steps` runs the engine's step (the real proposer, the target's processed laws
p_1..p_{g+1} from one pass over prompt + emitted + drafted, `verify_sampling` or a control's variant);
`pair_step_checks` tests its first tokens against the target's exact chain-rule law with a stated power;
`pair_step_law` runs it at every γ plus the verify-side negative controls through the same path. For a model-free
(deterministic) proposer it also computes the steps' law exactly (`exact_steps_law`: every accept/reject outcome of
the implemented rule enumerated, no sampling) and compares it with the target's, a check with no sampling error.
A proposal with `parents` (a token tree, decoding/tree.py) gets its laws from the engine's own tree pass (the prefix
cached, then [cur, nodes] under the tree's mask and positions: `tree_logits`) and is verified by the tree rule
(`verify_tree_sampling`, or a control's variant of it).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch

from specbench.config import SamplingConfig
from specbench.decoding.accept import accepted_count, residual, verify_sampling, verify_tree_sampling
from specbench.decoding.base import Proposer
from specbench.decoding.cached_model import CachedModel, kept_hidden
from specbench.decoding.sampling import processed_probs, sample
from specbench.decoding.speculative import reads_hidden
from specbench.decoding.tree import TokenTree
from specbench.errors import SpecbenchError
from specbench.evidence.controls import CONTROLS, Control
from specbench.evidence.exact_laws import (
    CountFn,
    ResidualFn,
    RowsFn,
    TreeVerifyFn,
    VerifyFn,
    as_verified,
    f64,
    tree_step_law,
)
from specbench.evidence.sequence_law import (
    ProposerFactory,
    cached_tail,
    model_device,
    model_sequence_law,
    sampling_dict,
)
from specbench.evidence.stat_checks import ALT_TV, LEVEL, CheckResult, exact_check, sample_checks


@torch.inference_mode()
def tail_logits(
    model: torch.nn.Module, prompt_ids: list[int], seq: list[int], rows: int, decoder_start_id: int | None = None
) -> torch.Tensor:
    """[rows, V] logits of the last `rows` positions of prompt + seq (one forward, no cache): row i predicts
    seq[len(seq) − rows + 1 + i], so rows = g + 1 over seq = emitted + g drafted gives p_1..p_{g+1}. On a model
    with CachedModel's interface (llama.cpp's) the last `rows` tokens go in one pass after the rest (cached_tail):
    the engine's verify-pass shape, whose rounding (quantized kernels) the step law then includes."""
    if not isinstance(model, torch.nn.Module):
        return cached_tail(model, list(prompt_ids) + list(seq), rows)
    dev = model_device(model)
    if getattr(model.config, "is_encoder_decoder", False):
        enc = torch.tensor([prompt_ids], device=dev)
        dec = torch.tensor([[decoder_start_id] + seq], device=dev)
        return model(input_ids=enc, decoder_input_ids=dec).logits[0, -rows:]
    return model(input_ids=torch.tensor([list(prompt_ids) + seq], device=dev)).logits[0, -rows:]


@torch.inference_mode()
def tree_logits(model: torch.nn.Module, context: list[int], nodes: list[int], tree: TokenTree) -> torch.Tensor:
    """[n+1, V] logits at [cur, nodes] of a tree pass after `context` (its last token is cur), as the engine computes
    them: the context but cur in a fresh cache, then one masked pass over [cur, nodes] (CachedModel.forward_tree).
    Decoder-only torch targets only (a tree pass is theirs)."""
    if not isinstance(model, torch.nn.Module) or getattr(model.config, "is_encoder_decoder", False):
        raise SpecbenchError("a token-tree draft's step law needs a decoder-only torch target (--engine specbench)")
    cm = CachedModel(model)
    cm.start(capacity=len(context) + len(nodes))
    if len(context) > 1:
        cm.forward(torch.tensor(context[:-1], device=cm.device))
    return cm.forward_tree(torch.tensor(context[-1:] + nodes, device=cm.device), tree)


@torch.inference_mode()
def feed_hidden(model: torch.nn.Module, proposer: Proposer, tokens: list[int], max_new: int) -> None:
    """A draft that reads the target's hidden states (base.ReadsHidden: an EAGLE head) proposes from any state: it
    begins afresh and gets the target's final hidden states of tokens[:-1] (an EAGLE-3 head: its layers' outputs) from
    one plain pass, as the loop would have handed them over. Decoder-only torch targets (the factory refuses others)."""
    proposer.begin(list(tokens), max_new)
    ids = torch.tensor([tokens[:-1]], device=model_device(model))
    states = model(input_ids=ids, output_hidden_states=True).hidden_states
    proposer.observe_hidden(kept_hidden(states, tuple(getattr(proposer, "feature_layers", ()))))  # type: ignore[attr-defined]  # ReadsHidden


def sample_steps(
    target_model: torch.nn.Module,
    proposer: Proposer,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gamma: int,
    length: int,
    n: int,
    generator: torch.Generator,
    eos_ids: frozenset[int] = frozenset(),
    decoder_start_id: int | None = None,
    verify: VerifyFn = verify_sampling,
    verify_tree: TreeVerifyFn = verify_tree_sampling,
) -> tuple[Counter, dict]:
    """Counts of the first `length` tokens (ending early at EOS) of n runs of speculative steps from the prompt,
    and how often the steps drafted, accepted and rejected.

    Every step is the engine's: the real proposer drafts from the run's tokens, the target's processed laws
    p_1..p_{g+1} over prompt + emitted + drafted feed `verify` (the engine's `verify_sampling`, or a
    control's variant), which accepts or resamples. Only the target's forwards are shared: they are
    memoised per (emitted, drafted) state, and a model-free proposer (deterministic given the tokens)
    proposes once per state; a model draft proposes afresh for every run, from its own generator draws.
    A tree proposal's laws come from the engine's tree pass (`tree_logits`) and `verify_tree` judges it.
    """
    vocab = None
    memo_p: dict = {}
    memo_prop: dict = {}
    stats: Counter[str] = Counter()
    proposer.begin(list(prompt_ids), length + gamma)
    hidden_fed = reads_hidden(proposer)
    done: Counter = Counter()
    pending: Counter = Counter({(): n})
    while pending:
        nxt: Counter = Counter()
        for emitted, m in pending.items():
            for _ in range(m):
                tokens = list(prompt_ids) + list(emitted)
                if not proposer.is_model and emitted in memo_prop:
                    prop = memo_prop[emitted]
                else:
                    if hidden_fed:  # an EAGLE head drafts from the target's hidden states of the state's tokens
                        feed_hidden(target_model, proposer, tokens, length + gamma)
                    prop = proposer.propose(tokens, gamma, sampling, generator)
                    memo_prop[emitted] = prop
                drafted = tuple(prop.tokens.tolist())
                tree = None if prop.parents is None else TokenTree(tuple(prop.parents))
                key = (emitted, drafted, tree)
                if key not in memo_p:
                    if tree is None:
                        logits = tail_logits(
                            target_model, prompt_ids, list(emitted + drafted), len(drafted) + 1, decoder_start_id
                        )
                    else:
                        logits = tree_logits(target_model, tokens, list(drafted), tree)
                    memo_p[key] = processed_probs(logits, sampling).float()  # [g+1, V] (a tree: [n+1, V])
                    vocab = memo_p[key].shape[-1]
                p = memo_p[key]
                stats["steps"] += 1
                if drafted and tree is not None:
                    q = None if prop.q_probs is None else prop.q_probs.to(p.device)
                    v = verify_tree(tree, list(drafted), q, p, generator)
                    path = v.path or []
                    new = tuple(drafted[i] for i in path) + (v.next_token,)
                    stats["drafted_steps"] += 1
                    stats["tree_steps"] += 1
                    stats["accepted"] += v.n_accepted
                    stats["rejected"] += bool(tree.children(path[-1] if path else -1))  # the walk stopped at a node
                elif drafted:
                    v = verify(prop.tokens.to(p.device), prop.q_probs.to(p.device), p, generator)
                    new = drafted[: v.n_accepted] + (v.next_token,)
                    stats["drafted_steps"] += 1
                    stats["accepted"] += v.n_accepted
                    stats["rejected"] += v.n_accepted < len(drafted)
                else:
                    new = (int(sample(p[0], generator)),)
                out = emitted + new
                stop = next((i for i, t in enumerate(out) if t in eos_ids), None)
                if stop is not None and stop < length:
                    done[out[: stop + 1]] += 1
                elif len(out) >= length:
                    done[out[:length]] += 1
                else:
                    nxt[out] += 1
        pending = nxt
    stats["vocab"] = vocab or 0
    return done, dict(stats)


def pair_step_checks(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gamma: int,
    n: int,
    length: int = 2,
    eos_ids: frozenset[int] = frozenset(),
    decoder_start_id: int | None = None,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
    seed: int = 0,
    max_cells: int = 4096,
    control: Control | None = None,
) -> list[CheckResult]:
    """(a') The step law on the real pair: n runs of speculative steps from the prompt (sample_steps), their
    first `length` tokens tested against the target's exact chain-rule law, per position and jointly (G-test
    and TV bound, power against total variation `alt_tv`). A step costs no decode of its own, so n can be
    large where a whole-sequence sample cannot (sequence_checks). [] when the law is not enumerable
    (top-k/top-p leave more than max_cells sequences). `control` swaps the verifier for a known bug's.
    """
    law = model_sequence_law(
        target_model,
        prompt_ids,
        length,
        sampling,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        max_cells=max_cells,
    )
    if law is None:
        return []
    dev = model_device(target_model)
    counts, stats = sample_steps(
        target_model,
        proposer_factory(),
        prompt_ids,
        sampling,
        gamma=gamma,
        length=length,
        n=n,
        generator=torch.Generator(device=dev).manual_seed(seed),
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        verify=control.verify() if control else verify_sampling,
        verify_tree=control.verify_tree() if control else verify_tree_sampling,
    )
    label = f"pair-step/γ={gamma}" + (f"/control={control.name}" if control else "")
    out = sample_checks(label, counts, law, level=level, alt_tv=alt_tv)
    for r in out:
        r.detail.update({"gamma": gamma, "length": length, "sampling": sampling_dict(sampling), **stats})
    return out


MODEL_DRAFT_SHARE = 10  # a model draft runs its network γ times a step: its pair step law gets step_samples ÷ 10 runs


def pair_step_law(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gammas: Sequence[int],
    step_samples: int,
    control_samples: int,
    step_length: int,
    eos_ids: frozenset[int],
    decoder_start_id: int | None,
    level: float,
    alt_tv: float,
    seed: int,
    max_cells: int,
    say: Callable[[str], None],
) -> list[CheckResult]:
    """run_checks' step 3: the pair's step law at every γ, then the verify-side controls through the same path.

    A model-free proposer is deterministic given the tokens, so its steps share memoised forwards and cost a
    verification each: step_samples runs per γ and control_samples per control. A model draft must draw afresh
    for every run (γ forwards of its network): it gets step_samples ÷ MODEL_DRAFT_SHARE runs, and its controls
    run on the model-free battery only (where every control, draft-side or verify-side, is exercised)."""
    is_model = bool(getattr(proposer_factory(), "is_model", False))
    n = max(1, step_samples // MODEL_DRAFT_SHARE) if is_model else step_samples
    common: dict[str, Any] = dict(
        length=step_length,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        level=level,
        alt_tv=alt_tv,
        max_cells=max_cells,
    )
    out = []
    for gamma in gammas:
        say(f"step law on the pair, γ={gamma} ({n} steps)")
        out += pair_step_checks(
            target_model, proposer_factory, prompt_ids, sampling, gamma=gamma, n=n, seed=seed, **common
        )
        if not is_model and exact_law_applies(target_model):
            say(f"exact step law on the pair, γ={gamma}")
            out += exact_pair_step_check(
                target_model,
                proposer_factory,
                prompt_ids,
                sampling,
                gamma=gamma,
                length=step_length,
                eos_ids=eos_ids,
                max_cells=max_cells,
            )
    if is_model or control_samples <= 0:
        return out
    for name, control in CONTROLS.items():
        if control.verify_side:
            say(f"negative control {name} on the pair ({control_samples} steps)")
            found = pair_step_checks(
                target_model,
                proposer_factory,
                prompt_ids,
                sampling,
                gamma=max(gammas),
                n=control_samples,
                seed=seed + 1,
                control=control,
                **common,
            )
            if found:
                out.append(control_check(f"control/{name}/pair-step", found, required=False))
    return out


EXACT_TOL = 1e-4  # float32 logits of a tree (or verify-shaped) pass against plain passes: ~1e-7 on probabilities
MAX_EXACT_STATES = 256  # step states (emitted prefixes) an exact step law may visit before it is skipped


@torch.inference_mode()
def exact_steps_law(
    target_model: torch.nn.Module,
    proposer: Proposer,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gamma: int,
    length: int,
    eos_ids: frozenset[int] = frozenset(),
    count: CountFn = accepted_count,
    residual_fn: ResidualFn = residual,
    verified: RowsFn = as_verified,
    max_states: int = MAX_EXACT_STATES,
    laws: dict | None = None,
) -> dict[tuple[int, ...], float] | None:
    """Exact law of the first `length` tokens (ending early at EOS) of repeated speculative steps from the prompt, for
    a deterministic proposer: each state's proposal (a chain is its one-branch tree) verified on the target's laws
    from one tree pass (`tree_logits`) by every accept/reject outcome of the implemented rule (exact_laws.
    tree_step_law: the runner's walk_tree, `count` measured, `residual_fn` its residual, `verified` the rows it
    reads). Decoder-only torch targets; None past `max_states` states, or for a proposal that is not a point mass
    (a draft that samples: its law is not one proposal per state). `laws`: a memo of the target's laws per
    (state, proposal), shared by calls on the same pair (the controls' enumerations need no forwards of their own)."""
    laws = {} if laws is None else laws
    proposer.begin(list(prompt_ids), length + gamma)
    done: dict[tuple[int, ...], float] = defaultdict(float)
    pending: dict[tuple[int, ...], float] = {(): 1.0}
    states = 0
    while pending:
        nxt: dict[tuple[int, ...], float] = defaultdict(float)
        for emitted, weight in pending.items():
            states += 1
            if states > max_states:
                return None
            tokens = list(prompt_ids) + list(emitted)
            prop = proposer.propose(tokens, gamma, sampling, None)
            ids = prop.tokens.tolist()
            tree = TokenTree.chain(len(ids)) if prop.parents is None else TokenTree(tuple(prop.parents))
            key = (emitted, tuple(ids), tree)
            if key not in laws:
                laws[key] = f64(processed_probs(tree_logits(target_model, tokens, ids, tree), sampling).cpu())
            p = laws[key]  # [n+1, V]
            q = None if prop.q_probs is None else f64(prop.q_probs.cpu())
            if q is not None and not bool((q.max(-1).values == 1.0).all()):
                return None
            p = f64(verified(p))
            for new, w in tree_step_law(tree, ids, q, p, count=count, residual_fn=residual_fn).items():
                out = emitted + new
                stop = next((i for i, t in enumerate(out) if t in eos_ids), None)
                if stop is not None and stop < length:
                    done[out[: stop + 1]] += weight * w
                elif len(out) >= length:
                    done[out[:length]] += weight * w
                else:
                    nxt[out] += weight * w
        pending = nxt
    return dict(done)


def exact_pair_step_check(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gamma: int,
    length: int,
    eos_ids: frozenset[int],
    max_cells: int,
) -> list[CheckResult]:
    """(a'') The step law on the real pair, exactly, for a model-free proposer: `exact_steps_law` against the target's
    chain-rule law (model_sequence_law, plain passes) within EXACT_TOL. Beside it, in detail, how far each
    verify-side negative control (count and residual swapped through the same enumeration) moves the law: how
    much a verifier bug would show on this pair's proposals. [] when either law is not enumerable."""
    reference = model_sequence_law(target_model, prompt_ids, length, sampling, eos_ids=eos_ids, max_cells=max_cells)
    common: dict[str, Any] = dict(gamma=gamma, length=length, eos_ids=eos_ids, laws={})
    law = exact_steps_law(target_model, proposer_factory(), prompt_ids, sampling, **common)
    if reference is None or law is None:
        return []
    controls = {}
    for name, control in CONTROLS.items():
        if control.verify_side:
            broken = exact_steps_law(
                target_model,
                proposer_factory(),
                prompt_ids,
                sampling,
                count=control.count,
                residual_fn=control.residual_fn,
                verified=control.verified,
                **common,
            )
            if broken is not None:
                controls[name] = exact_check(name, broken, reference, tol=EXACT_TOL).statistic
    detail = {"gamma": gamma, "length": length, "sampling": sampling_dict(sampling), "controls_moved_law_by": controls}
    return [exact_check(f"pair-step/γ={gamma}/exact", law, reference, tol=EXACT_TOL, detail=detail)]


def exact_law_applies(model) -> bool:
    """exact_steps_law runs its tree pass on decoder-only torch targets (not llama.cpp's, not encoder-decoders)."""
    return isinstance(model, torch.nn.Module) and not getattr(model.config, "is_encoder_decoder", False)


def control_check(name: str, checks: list[CheckResult], *, required: bool = True) -> CheckResult:
    """A negative control's row: it passes when the control's joint G-test *fails* (the bug is caught), with that
    test's n and level. A required control (the model-free battery's, where every bug moves the law) that is
    not caught fails; an optional one (the pair's: whether a bug shows depends on what this pair's draft
    proposes and the target accepts) is inconclusive at power 0, with the steps' draft counts in detail."""
    joint = next(c for c in checks if c.kind == "gof" and "/joint" in c.name) if len(checks) > 2 else checks[0]
    caught = not joint.passed
    counted = ("steps", "drafted_steps", "tree_steps", "accepted", "rejected")
    stats = {k: joint.detail[k] for k in counted if k in joint.detail}
    return CheckResult(
        name=name,
        kind="control",
        statistic=joint.statistic,
        p_value=joint.p_value,
        n=joint.n,
        threshold=joint.threshold,
        power=None if caught or required else 0.0,  # a rejection needs no power; the test's own is in detail
        alternative=f"a known bug must be rejected by {joint.name}",
        passed=caught or not required,
        detail={
            "test": joint.name,
            "test_power": joint.power,
            "caught": caught,
            "failed_checks": [c.name for c in checks if not c.passed],
            **stats,
        },
    )

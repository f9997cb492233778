"""Evidence that speculative sampling emits exactly the target's law: the model-free battery of `specbench verify`.

Built from the runner's own pieces so that a bug there shows, on small tabulated laws:

1. Exact laws (evidence/exact_laws.py): `one_position_check` compares the law of one emitted token,
   by the implemented rule and by the closed form, with the target's; `step_checks` also compares the
   exact law of the first two emitted tokens of repeated steps with the target's chain-rule law.
2. Statistical tests of the implemented step: `sample_sequences` draws N outputs through the real
   `verify_sampling`; the G-test and the total-variation bound (evidence/stat_checks.py) compare the
   counts with the exact target law, per position and jointly. Every check states its N, level and power.
3. Negative controls (evidence/controls.py): the bugs peers made, as variants of the step fed through
   the same checks (`step_checks(control=...)`); the tests assert that each one fails.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from specbench.config import SamplingConfig
from specbench.decoding.accept import accepted_count, expected_acceptance, residual, verify_sampling
from specbench.evidence.controls import Control
from specbench.evidence.exact_laws import (
    CountFn,
    DraftFn,
    LawFn,
    Prefix,
    ResidualFn,
    RowsFn,
    TabulatedLM,
    VerifyFn,
    acceptance_measure,
    as_verified,
    closed_form_law,
    emitted_law,
    f64,
    honest_draft,
    sequence_law,
    target_laws,
    target_sequence_law,
)
from specbench.evidence.stat_checks import ALT_TV, LEVEL, CheckResult, exact_check, sample_checks


def _vector_law(v: torch.Tensor) -> dict[Prefix, float]:
    return {(x,): float(v[x]) for x in v.nonzero().flatten().tolist()}


def one_position_check(
    name: str,
    p: torch.Tensor,
    q: torch.Tensor,
    *,
    count: CountFn = accepted_count,
    residual_fn: ResidualFn = residual,
    drawn: torch.Tensor | None = None,
    tol: float = 1e-6,
    verified: RowsFn = as_verified,
) -> CheckResult:
    """The law of one emitted token equals p: closed form and implemented rule, compared in float64.

    Also checks that the implemented acceptance rate equals `expected_acceptance` (Σ min(p, q)),
    the figure the runner records as β.
    """
    p64, q64 = f64(p), f64(q)
    v64 = f64(verified(p64[None])[0])  # the row the verifier uses (one row: an off-by-one has no later row here)
    drawn64 = None if drawn is None else f64(drawn)
    implemented = emitted_law(v64, q64, drawn64, count=count, residual_fn=residual_fn)
    closed = closed_form_law(v64, q64, residual_fn)
    src = q64 if drawn64 is None else drawn64
    rate = sum(float(src[x]) * acceptance_measure(count, x, v64, q64)[0] for x in src.nonzero().flatten().tolist())
    beta = float(expected_acceptance(p64[None], q64[None])[0])
    res = exact_check(name, _vector_law(implemented), _vector_law(p64), tol=tol)
    closed_err = float((closed - p64).abs().max())
    rate_err = abs(rate - beta)
    res.statistic = max(res.statistic, closed_err, rate_err)
    res.passed = bool(res.statistic <= tol)
    res.detail.update(
        {
            "closed_form_error": closed_err,
            "acceptance_rate": rate,
            "expected_acceptance": beta,
            "acceptance_rate_error": rate_err,
        }
    )
    return res


# ---------------------------------------------------------------------------------------------
# Sampling the implemented step


def sample_sequences(
    target: LawFn,
    draft: DraftFn,
    *,
    gamma: int,
    length: int,
    n: int,
    generator: torch.Generator,
    verify: VerifyFn = verify_sampling,
    prefix: Prefix = (),
) -> Counter:
    """Counts of the first `length` tokens emitted in n independent runs of speculative steps.

    Every accept/reject decision and correction/bonus draw is one call of `verify` (the runner's
    `verify_sampling` by default) on float32 laws, as in decode_speculative. Only drafting is
    batched: runs in the same state draw their drafts with one multinomial per prefix, which
    is the same law as drawing them one by one.
    """
    done: Counter = Counter()
    pending: Counter = Counter({(): n})  # emitted so far → number of runs in that state
    tensors: dict = {}
    while pending:
        nxt: Counter = Counter()
        for emitted, m in pending.items():
            pre = prefix + emitted
            for xs, c in _draw_drafts(draft, pre, gamma, m, generator).items():
                key = (pre, xs)
                if key not in tensors:
                    ctx = [pre + xs[:i] for i in range(gamma + 1)]
                    tensors[key] = (
                        torch.tensor(xs),
                        torch.stack([draft(x)[1] for x in ctx[:gamma]]),
                        torch.stack([target(x) for x in ctx]),
                    )
                tokens, q, p = tensors[key]
                for _ in range(c):
                    v = verify(tokens, q, p, generator)
                    out = emitted + xs[: v.n_accepted] + (v.next_token,)
                    if len(out) >= length:
                        done[out[:length]] += 1
                    else:
                        nxt[out] += 1
        pending = nxt
    return done


def _draw_drafts(draft: DraftFn, pre: Prefix, gamma: int, m: int, generator: torch.Generator) -> Counter:
    """Counts of m drafts of γ tokens after `pre`, each token drawn from the draft's drawn law."""
    groups: Counter = Counter({(): m})
    for _ in range(gamma):
        nxt: Counter = Counter()
        for xs, c in groups.items():
            drawn = draft(pre + xs)[0]
            ids = torch.multinomial(drawn, c, replacement=True, generator=generator)
            for x, k in Counter(ids.tolist()).items():
                nxt[xs + (x,)] += k
        groups = nxt
    return groups


# ---------------------------------------------------------------------------------------------
# The model-free battery run by `specbench verify`


@dataclass(frozen=True)
class StepSetup:
    """A target/draft pair of tabulated models on a small vocabulary."""

    vocab: int = 12
    seed: int = 0
    noise: float = 1.0  # draft = target logits + noise·N(0, 1): acceptance well inside (0, 1)

    def models(self) -> tuple[TabulatedLM, TabulatedLM]:
        target = TabulatedLM(self.vocab, self.seed)
        return target, TabulatedLM(self.vocab, self.seed + 1, base=target, noise=self.noise)


def step_checks(
    sampling: SamplingConfig,
    *,
    setup: StepSetup = StepSetup(),
    gamma: int = 2,
    n: int = 100_000,
    exact_vocab: int = 5,
    seed: int = 0,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
    control: Control | None = None,
) -> list[CheckResult]:
    """Exact and statistical evidence for one sampling configuration, on tabulated laws.

    Exact: one-position law on `setup.vocab` tokens and the two-token joint law on
    `exact_vocab` tokens (enumeration grows as V^γ). Statistical (skipped when n = 0): n runs of
    the step through `verify_sampling` (or the control's variant), first two tokens, per
    position and joint.
    """
    label = f"step/{_sampling_label(sampling)}" + (f"/control={control.name}" if control else "")
    make_draft = control.draft if control else honest_draft
    count = control.count if control else accepted_count
    residual_fn = control.residual_fn if control else residual
    verified = control.verified if control else as_verified
    verify = control.verify() if control else verify_sampling

    target_lm, draft_lm = setup.models()
    p_fn, d_fn = target_laws(target_lm, sampling), make_draft(draft_lm, sampling)
    drawn, q = d_fn(())
    out = [
        one_position_check(
            f"{label}/exact/pos1", p_fn(()), q, drawn=drawn, count=count, residual_fn=residual_fn, verified=verified
        )
    ]
    out[0].detail.update({"vocab": setup.vocab})

    small = StepSetup(exact_vocab, setup.seed, setup.noise).models()
    sp, sd = target_laws(small[0], sampling), make_draft(small[1], sampling)
    law = sequence_law(sp, sd, gamma=gamma, length=2, count=count, residual_fn=residual_fn, verified=verified)
    out.append(
        exact_check(
            f"{label}/exact/joint2", law, target_sequence_law(sp, 2), detail={"vocab": exact_vocab, "gamma": gamma}
        )
    )
    stat_detail = {"vocab": setup.vocab, "gamma": gamma}

    if n <= 0:
        return out
    counts = sample_sequences(
        p_fn, d_fn, gamma=gamma, length=2, n=n, verify=verify, generator=torch.Generator().manual_seed(seed)
    )
    for r in sample_checks(label, counts, target_sequence_law(p_fn, 2), level=level, alt_tv=alt_tv):
        r.detail.update(stat_detail)
        out.append(r)
    return out


def _sampling_label(s: SamplingConfig) -> str:
    parts = [f"T={s.temperature:g}"]
    if s.top_k:
        parts.append(f"k={s.top_k}")
    if s.top_p < 1.0:
        parts.append(f"p={s.top_p:g}")
    return ",".join(parts)

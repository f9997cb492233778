"""The sequence-level evidence of `specbench verify`: does a whole decode emit the target's law?

The runner's engines (baseline and speculative at each γ) as prompt → tokens functions; K short
continuations of one prompt from each; a chi-square homogeneity test of each γ against the baseline
and, when top-k/top-p make the support enumerable, a G-test of every engine against the target's exact
sequence law, enumerated by forwards without a KV cache. These exercise the whole runner (drafting,
KV-cache rollback, EOS and length clipping) but have little power per sample; the step law
(evidence/pair_step.py) has far more. The logit helpers here take a torch module or a model that already
has CachedModel's interface (llama.cpp's LlamaCppModel), so the same tests run on either engine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import Proposer
from specbench.decoding.cached_model import as_cached
from specbench.decoding.sampling import processed_probs
from specbench.decoding.speculative import decode_speculative
from specbench.evidence.stat_checks import LEVEL, CheckResult, gof_check, homogeneity_check

Engine = Callable[[list[int], torch.Generator | None], list[int]]  # (prompt ids, generator) → generated ids
ProposerFactory = Callable[[], Proposer]  # a fresh proposer; called once per engine so no state crosses cells


def sampling_dict(s: SamplingConfig) -> dict:
    """The sampling configuration as a check's detail records it."""
    return {"temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p}


def engines(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    gammas: Sequence[int],
    *,
    max_new_tokens: int,
    sampling: SamplingConfig,
    eos_ids: frozenset[int],
    decoder_start_id: int | None = None,
    results: dict | None = None,
    stepwise: bool = False,
) -> dict[str, Engine]:
    """{"baseline": ..., "γ=2": ...}: the runner's engines as prompt → tokens functions.

    `results`, when given, receives each speculative engine's last DecodeResult under its name
    (its pass record lets the numerics classifier replay it exactly); `stepwise` (verify --bit-exact): the
    speculative engines' passes after the prefill as one-token passes (decoding/stepwise.py)."""
    target = as_cached(target_model)  # a torch module's fresh CachedModel, or llama.cpp's model itself
    common: dict[str, Any] = dict(
        max_new_tokens=max_new_tokens, sampling=sampling, eos_ids=eos_ids, decoder_start_id=decoder_start_id
    )
    out: dict[str, Engine] = {
        "baseline": lambda prompt, gen: decode_autoregressive(target, prompt, generator=gen, **common).token_ids
    }
    for gamma in gammas:
        proposer = proposer_factory()

        def run(prompt, gen, pr=proposer, g=gamma, name=f"γ={gamma}"):
            res = decode_speculative(target, pr, prompt, gamma=g, generator=gen, stepwise=stepwise, **common)
            if results is not None:
                results[name] = res
            return res.token_ids

        out[f"γ={gamma}"] = run
    return out


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model's logits live: a torch module's parameters, or a cache wrapper's device (llama.cpp: the host)."""
    return next(model.parameters()).device if isinstance(model, torch.nn.Module) else model.device


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype of the logits: a torch module's parameters', float32 for llama.cpp (its weights stay quantized)."""
    return next(model.parameters()).dtype if isinstance(model, torch.nn.Module) else torch.float32


def cached_tail(lm, ids: list[int], rows: int) -> torch.Tensor:
    """[rows, V] logits of the last `rows` positions of `ids` on a model with CachedModel's interface (llama.cpp's):
    the prefix in one pass from an empty cache, then the last `rows` tokens in one pass of their own, the shapes
    the engine runs (a verify pass over γ + 1 tokens for the step law; one token for the baseline's law)."""
    lm.start(capacity=len(ids))
    if len(ids) > rows:
        lm.forward(ids[:-rows])
    return lm.forward(ids[-rows:], all_logits=True)


def sample_continuations(engine: Engine, prompt_ids: list[int], k: int, generator: torch.Generator) -> Counter:
    """Counts of k continuations (token tuples; shorter when they end at EOS)."""
    return Counter(tuple(engine(list(prompt_ids), generator)) for _ in range(k))


@torch.inference_mode()
def last_logits(
    model: torch.nn.Module, prompt_ids: list[int], continuations: list[list[int]], decoder_start_id: int | None = None
) -> torch.Tensor:
    """[B, V] logits after prompt + each continuation (all of one length), one full forward, no cache; on a
    model with CachedModel's interface (llama.cpp's), each continuation from an empty cache (cached_tail)."""
    if not isinstance(model, torch.nn.Module):
        return torch.stack([cached_tail(model, list(prompt_ids) + list(c), 1)[0] for c in continuations])
    dev = model_device(model)
    if getattr(model.config, "is_encoder_decoder", False):
        enc = torch.tensor([prompt_ids] * len(continuations), device=dev)
        dec = torch.tensor([[decoder_start_id] + c for c in continuations], device=dev)
        return model(input_ids=enc, decoder_input_ids=dec).logits[:, -1]
    ids = torch.tensor([list(prompt_ids) + c for c in continuations], device=dev)
    return model(input_ids=ids).logits[:, -1]


def model_sequence_law(
    model: torch.nn.Module,
    prompt_ids: list[int],
    length: int,
    sampling: SamplingConfig,
    *,
    eos_ids: frozenset[int],
    decoder_start_id: int | None = None,
    max_cells: int = 4096,
    batch: int = 64,
) -> dict[tuple[int, ...], float] | None:
    """Exact law of the first `length` generated tokens (stopping at EOS) under the processed target law;
    None when more than max_cells sequences have positive probability (top-k/top-p keep it small)."""
    done: dict[tuple[int, ...], float] = {}
    live: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        seqs = list(live)
        nxt: dict[tuple[int, ...], float] = {}
        for i in range(0, len(seqs), batch):
            chunk = seqs[i : i + batch]
            logits = last_logits(model, prompt_ids, [list(s) for s in chunk], decoder_start_id)  # [B, V]
            probs = processed_probs(logits, sampling)
            probs = probs.double().cpu()
            for s, row in zip(chunk, probs):
                for x in row.nonzero().flatten().tolist():
                    w = live[s] * float(row[x])
                    (done if x in eos_ids else nxt)[s + (x,)] = w
            if len(done) + len(nxt) > max_cells:
                return None
        live = nxt
    done.update(live)
    return done


def sequence_checks(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gammas: Sequence[int] = (1, 2, 4),
    n_samples: int = 2000,
    length: int = 4,
    eos_ids: frozenset[int] = frozenset(),
    decoder_start_id: int | None = None,
    level: float = LEVEL,
    alt_tv: float = 0.05,
    seed: int = 0,
    max_cells: int = 4096,
) -> list[CheckResult]:
    """(a) K = n_samples continuations of `length` tokens per engine; homogeneity of each γ against the
    baseline and, when enumerable, a G-test of every engine against the exact target law.

    The first token comes from the prefill in both engines; the first step drafts
    min(γ, length − 2) tokens, so `length` ≥ γ + 2 exercises the full γ.
    """
    if sampling.greedy:
        raise ValueError("sequence_checks needs a sampling configuration (temperature > 0); use greedy_checks at T = 0")
    runs = engines(
        target_model,
        proposer_factory,
        gammas,
        max_new_tokens=length,
        sampling=sampling,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
    )
    dev = model_device(target_model)
    counts = {
        name: sample_continuations(run, prompt_ids, n_samples, torch.Generator(device=dev).manual_seed(seed + i))
        for i, (name, run) in enumerate(runs.items())
    }
    law = model_sequence_law(
        target_model,
        prompt_ids,
        length,
        sampling,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        max_cells=max_cells,
    )
    info = {
        "length": length,
        "sampling": sampling_dict(sampling),
        "prompt_tokens": len(prompt_ids),
        "exact_law": "enumerated" if law is not None else f"skipped: more than {max_cells} sequences",
    }
    out = []
    for name, c in counts.items():
        if name != "baseline":
            r = homogeneity_on_prefixes(
                f"sequence/{name}/vs-baseline", counts["baseline"], c, length, level=level, alt_tv=alt_tv
            )
            r.detail.update(info)
            out.append(r)
        if law is not None:
            r = gof_check(f"sequence/{name}/exact", c, law, level=level, alt_tv=alt_tv)
            r.detail.update(info)
            out.append(r)
    return out


def truncated(counts: Counter, tokens: int) -> Counter:
    """Counts of the first `tokens` tokens of each sequence."""
    out: Counter = Counter()
    for seq, k in counts.items():
        out[seq[:tokens]] += k
    return out


def homogeneity_on_prefixes(
    name: str, counts_a: Counter, counts_b: Counter, length: int, *, level: float, alt_tv: float
) -> CheckResult:
    """Homogeneity on the joint of the first ℓ tokens, ℓ the longest ≤ length that leaves ≥ 1 degree of
    freedom after pooling: full continuations of a large-vocabulary model are nearly all distinct, their
    beginnings are not. ℓ ≥ 2 (the first token comes from the prefill in both engines)."""
    for tokens in range(length, 1, -1):
        r = homogeneity_check(
            name, truncated(counts_a, tokens), truncated(counts_b, tokens), level=level, alt_tv=alt_tv
        )
        if r.detail["df"] >= 1:
            break
    r.detail["tokens_compared"] = tokens
    return r

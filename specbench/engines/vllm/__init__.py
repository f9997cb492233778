"""`--engine vllm`: vLLM, the decoder GPU users deploy (and the fastest plain decoder on a CPU, issue 39), measured
on the same records as specbench's own loop. vLLM runs out of process, in its own venv (`make setup-vllm` builds
.venv-vllm: it pins its own torch and transformers), driven over JSON lines by client.py; the worker holds a plain
engine (the baseline) and a speculative one running vLLM's own method (the speculative arm).

This face imports neither torch nor vLLM: the registry reads SPEC to list and validate, and `vllm_method` (what a
--draft becomes in vLLM) is pure, so its tests run everywhere.

--draft on this engine: prompt-lookup[:max_ngram=<n>,min_ngram=<n>] → vLLM's `ngram` (γ → num_speculative_tokens,
max_ngram/min_ngram → prompt_lookup_max/min); a draft model (preset, folder, `distilled`) → `draft_model` on its
folder; `suffix` → vLLM's suffix decoding (arctic-inference, built by `make setup-vllm`); `eagle:<folder>`,
`eagle3:<folder>`, `medusa:<folder>` → that method with the head in <folder>. vLLM's ngram matcher chooses among
matches by its own rule (a `rule=` option is refused). The last two forms parse as model specs (run_specs.py), so
planning's check of model sources must let them through (OWN_METHODS names them).
"""

from __future__ import annotations

from collections.abc import Callable

from specbench.config import AUTO, RunConfig
from specbench.engines.contract import OWN_LOOP, EngineSpec
from specbench.errors import SpecbenchError
from specbench.run_specs import DraftSpec

ENGINE_NAME = "vllm"
SETUP_HINT = "make setup-vllm"
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_LOOKUP = {"max_ngram": 3, "min_ngram": 1}  # specbench's prompt lookup defaults (run_specs.py)
HEAD_METHODS = ("eagle", "eagle3", "medusa")  # --draft <method>:<head folder>
OWN_METHODS = ("suffix", *HEAD_METHODS)  # vLLM's methods named by --draft that are not a model spec


def own_method(draft: DraftSpec) -> tuple[str, str | None] | None:
    """`suffix` → ("suffix", None); `eagle:<folder>` (eagle3, medusa) → (method, folder); None for any other draft."""
    if draft.kind != "model" or not draft.model:
        return None
    name, colon, folder = draft.model.partition(":")
    if draft.model == "suffix":
        return "suffix", None
    if name in HEAD_METHODS:
        if not colon or not folder:
            raise SpecbenchError(f"--draft {draft.text}: {name} needs its head's folder, e.g. {name}:/path/to/head")
        return name, folder
    return None


def vllm_rules(config: RunConfig) -> None:
    """What vLLM decodes here: one request at a time, an integer γ, its own methods; the torch-side choices that have
    no vLLM counterpart are refused with the fix."""
    load, draft = config.load, config.draft
    refusals = [
        (load.dtype == AUTO, "--dtype auto", "pass --dtype float32 or bfloat16 (auto calibrates in specbench's loop)"),
        (load.dtype not in DTYPES + (AUTO,), f"--dtype {load.dtype}", f"use one of {', '.join(DTYPES)}"),
        (load.backend == "static", "--backend static", "use eager (enforce_eager) or compiled (vLLM's compile)"),
        (load.device_map is not None, "--device-map", "drop it (vLLM places the model itself)"),
        (load.device not in ("auto", "cpu", "cuda"), f"--device {load.device}", "use auto, cpu or cuda"),
        (config.gamma.fixed is None, f"--gamma {config.gamma}", "pass an integer γ (num_speculative_tokens)"),
        (draft.auto, "--draft auto", "name a draft (prompt-lookup or a draft model)"),
        (config.draft_confidence > 0, "--draft-confidence", "drop it (vLLM drafts a fixed γ)"),
    ]
    for hit, option, fix in refusals:
        if hit:
            raise SpecbenchError(f"{option} is not supported by --engine {ENGINE_NAME}; {fix}")
    if not draft.auto:
        check_draft(draft)


def check_draft(draft: DraftSpec) -> None:
    """Only drafts vLLM has a method for (one line otherwise)."""
    if draft.kind not in ("prompt-lookup", "model"):  # the model-free kinds vLLM has no method for, the hybrid
        raise SpecbenchError(
            f"--draft {draft.text} has no vLLM method; --engine {ENGINE_NAME} takes prompt-lookup (ngram), a "
            f"draft model (draft_model), suffix, or eagle:/eagle3:/medusa:<head folder>"
        )
    if draft.kind == "prompt-lookup" and "rule" in dict(draft.options):
        raise SpecbenchError(
            f"--draft {draft.text}: vLLM's ngram matcher has its own rule; drop rule= for --engine {ENGINE_NAME}"
        )
    own_method(draft)  # a head method without its folder


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


SPEC = EngineSpec(
    name=ENGINE_NAME,
    summary="vLLM out of process (its own venv): vLLM plain against vLLM's own ngram / draft_model speculation",
    capabilities=OWN_LOOP,
    session_kind=ENGINE_NAME,
    runtime="specbench.engines.vllm.engine:ENGINE",
    rules=vllm_rules,
    setup=SETUP_HINT,
    own_draft_names=OWN_METHODS,
)

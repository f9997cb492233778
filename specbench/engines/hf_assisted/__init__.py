"""`--engine hf-assisted`: Hugging Face's own assisted generation (`generate(assistant_model=...)`) as the
speculative arm, against specbench's plain torch loop on the same session: the decoder many users already have.
transformers reports no acceptance counts, so those fields stay 0 and what derives from them is NaN."""

from __future__ import annotations

from specbench.config import RunConfig
from specbench.engines.contract import OWN_LOOP, EngineSpec
from specbench.errors import SpecbenchError

NEEDS_MODEL = "--engine hf-assisted needs a model draft (HF's assistant_model); pick a model for --draft"


def hf_rules(config: RunConfig) -> None:
    """HF's loop takes a model draft and an integer γ (or auto, resolved to one), one sequence at a time, unpadded."""
    if config.exact_shapes:
        raise SpecbenchError(
            "--exact-shapes pads our engines' passes; HF's assisted generation cannot be padded "
            "(drop one of the two options)"
        )
    if config.bit_exact:
        raise SpecbenchError(
            "--bit-exact runs our loop's verify passes as one-token steps; HF's assisted generation runs its own "
            "multi-token passes, which cannot be split (drop --bit-exact, or use --engine specbench)"
        )
    if config.gamma.policy in ("adaptive", "heuristic"):
        raise SpecbenchError(
            f"--gamma {config.gamma} drives our decode loop; --engine hf-assisted runs HF's own "
            f"(pass an integer or auto for --gamma, or drop --engine)"
        )
    if config.batch_size > 1:
        raise SpecbenchError(
            "--engine hf-assisted decodes one sequence at a time: HF's assisted generation does not "
            "support batches (use --batch-size 1, or the specbench engine)"
        )
    if not config.draft.auto and not config.draft.uses_model:
        raise SpecbenchError(NEEDS_MODEL)


SPEC = EngineSpec(
    name="hf-assisted",
    summary="HF transformers' assisted generation (assistant_model) against specbench's plain torch loop",
    capabilities=OWN_LOOP,
    session_kind="torch",
    runtime="specbench.engines.hf_assisted.engine:ENGINE",
    rules=hf_rules,
)

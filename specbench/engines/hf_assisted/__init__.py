"""`--engine hf-assisted`: Hugging Face's own assisted generation (`generate(assistant_model=...)`) as the
speculative arm, against specbench's plain torch loop on the same session: the decoder many users already have.
transformers reports no acceptance counts, so those fields stay 0 and what derives from them is NaN."""

from __future__ import annotations

from specbench.config import RunConfig
from specbench.engines.contract import OWN_LOOP, EngineSpec
from specbench.errors import SpecbenchError

NEEDS_MODEL = "--engine hf-assisted needs a model draft (HF's assistant_model); pick a model for --draft"


def hf_rules(config: RunConfig) -> None:
    """What HF's loop needs beyond its capabilities (registry.capability_rules: one sequence at a time, unpadded, an
    integer γ): a model draft, HF's assistant_model."""
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

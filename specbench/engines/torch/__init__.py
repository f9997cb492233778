"""`--engine specbench`: specbench's own decode loop in PyTorch (the default). Both arms, every draft, batches, γ
policies, --exact-shapes, --bit-exact and the exact laws of `verify` run here; the other engines are measured against
the same records. This face imports no torch: the registry reads SPEC to list and validate."""

from __future__ import annotations

from specbench.config import RunConfig
from specbench.engines.contract import Capabilities, EngineSpec


def torch_rules(config: RunConfig) -> None:
    """Nothing beyond the capabilities: specbench's loop runs every option RunConfig accepts."""


SPEC = EngineSpec(
    name="specbench",
    summary="specbench's loop in PyTorch: plain decoding and Algorithm 1 with every --draft",
    capabilities=Capabilities(
        plain=True,
        specbench_drafts=True,
        own_drafts=False,
        exactness_replay=True,
        per_step_timing=True,
        batches=True,
        sampling=True,
        exact_shapes=True,
        gamma_policies=True,
        threads=False,
        bit_exact=True,
    ),
    session_kind="torch",
    runtime="specbench.engines.torch.engine:ENGINE",
    rules=torch_rules,
)

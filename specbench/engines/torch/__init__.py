"""`--engine specbench`: specbench's own decode loop in PyTorch (the default). Both arms, every draft, batches, γ
policies, --exact-shapes, --bit-exact and the exact laws of `verify` run here; the other engines are measured against
the same records. This face imports no torch: the registry reads SPEC to list and validate."""

from __future__ import annotations

from specbench.config import RunConfig
from specbench.engines.contract import Capabilities, EngineSpec
from specbench.errors import SpecbenchError


def torch_rules(config: RunConfig) -> None:
    """Beyond the capabilities, specbench's loop runs every option RunConfig accepts; an EAGLE head's folder
    (`--draft eagle:<folder>`) is checked here, before any model loads."""
    folder, method = config.draft.eagle_head, config.draft.head_method
    if folder is not None:
        from specbench.models.eagle_layout import check_head_method, read_head_config

        if not folder:
            raise SpecbenchError(
                f"--draft {config.draft.text}: {method} needs its head's folder, e.g. {method}:/path/to/head"
            )
        check_head_method(read_head_config(folder, config.draft.text), method or "eagle", config.draft.text)
        if config.batch_size > 1:
            raise SpecbenchError(f"--draft {config.draft.text} drafts one sequence at a time; use --batch-size 1")
        if config.draft.head_top > 1 and config.gamma.policy is not None:  # the policies price chains
            raise SpecbenchError(
                f"--gamma {config.gamma.value} prices chains, and --draft {config.draft.text} proposes a tree; pass "
                "an integer --gamma (its depth)"
            )


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

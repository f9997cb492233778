"""`--engine llama-cpp`: specbench's loop on llama.cpp's kernels, the target's GGUF run as quantized, one sequence at a
time on the CPU build's threads (`make setup-llama-cpp` builds llama-cpp-python). The same drafts, γ policies,
calibration, noise probes and numerics replays run on it as on torch; a draft model given as a GGUF runs in llama.cpp
too. This face imports neither torch nor llama_cpp: the registry reads SPEC to list and validate."""

from __future__ import annotations

from specbench.config import RunConfig
from specbench.engines.contract import Capabilities, EngineSpec
from specbench.errors import SpecbenchError

ENGINE_NAME = "llama-cpp"
SETUP_HINT = "make setup-llama-cpp"


def llama_rules(config: RunConfig) -> None:
    """llama.cpp runs the target's GGUF as quantized, one sequence at a time on the CPU build's threads: the
    torch-side choices (dtype, backend, placement, batches) do not apply to it."""
    load = config.load
    for given, default, name in (
        (load.dtype, "float32", "--dtype"),
        (load.backend, "eager", "--backend"),
        (load.device_map, None, "--device-map"),
    ):
        if given != default:
            raise SpecbenchError(
                f"{name} {given} does not apply to --engine {ENGINE_NAME} (it runs the GGUF as quantized, one "
                f"sequence at a time); drop {name}"
            )
    if not config.draft.auto and config.draft.proposes_trees:
        raise SpecbenchError(
            f"--draft {config.draft.text} proposes token trees, which need a masked target pass that --engine "
            f"{ENGINE_NAME} does not run; use --engine specbench"
            + (" (or --draft suffix:tree=0, its chain)" if config.draft.kind == "suffix" else "")
        )
    if load.device not in ("auto", "cpu"):
        raise SpecbenchError(
            f"--engine {ENGINE_NAME} places itself (a CUDA build offloads to the GPU); drop --device {load.device}"
        )


SPEC = EngineSpec(
    name=ENGINE_NAME,
    summary="specbench's loop on llama.cpp's kernels (the GGUF as quantized, CPU threads or a CUDA build)",
    capabilities=Capabilities(
        plain=True,
        specbench_drafts=True,
        own_drafts=False,
        exactness_replay=True,
        per_step_timing=True,
        batches=False,
        sampling=True,
        exact_shapes=True,
        gamma_policies=True,
        threads=True,
        bit_exact=True,  # stepwise passes use forward and truncate only (tests/test_bit_exact.py, tiny F32 and Q8_0)
    ),
    session_kind="llama-cpp",
    runtime="specbench.engines.llama_cpp.engine:ENGINE",
    rules=llama_rules,
    setup=SETUP_HINT,
)

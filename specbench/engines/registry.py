"""The one list of engines. Adding an engine: its package under specbench/engines/ with a SPEC, and one line here.

Everything that names engines reads this list: `--engine`'s choices and check, `specbench list engines`, the sweep's
engine axis, which session a sweep cell reuses, `verify`'s engines and the docs' table.
"""

from __future__ import annotations

from specbench.config import RunConfig
from specbench.engines import hf_assisted, llama_cpp
from specbench.engines import torch as torch_engine
from specbench.engines.contract import Engine, EngineSpec
from specbench.errors import SpecbenchError

ENGINES: dict[str, EngineSpec] = {
    spec.name: spec
    for spec in (
        torch_engine.SPEC,
        hf_assisted.SPEC,
        llama_cpp.SPEC,
    )
}
DEFAULT_ENGINE = torch_engine.SPEC.name


def engine_names() -> tuple[str, ...]:
    return tuple(ENGINES)


def engine_spec(name: str) -> EngineSpec:
    """The registered engine `name`, or a one-line error listing them."""
    if name not in ENGINES:
        raise SpecbenchError(f"--engine must be one of {', '.join(ENGINES)} (got {name!r})")
    return ENGINES[name]


def runtime(name: str) -> Engine:
    """The engine's runtime object (imports its package's heavy modules: torch, llama_cpp)."""
    return engine_spec(name).engine()


def capability_rules(spec: EngineSpec, config: RunConfig) -> None:
    """What an engine's capabilities rule out, whatever its own rules say first."""
    can = spec.capabilities
    refused = [
        (config.batch_size > 1 and not can.batches, f"--batch-size {config.batch_size}", "use --batch-size 1"),
        (config.exact_shapes and not can.exact_shapes, "--exact-shapes", "drop --exact-shapes"),
        (
            config.gamma.policy in ("adaptive", "heuristic") and not can.gamma_policies,
            f"--gamma {config.gamma}",
            "pass an integer or auto",
        ),
        (not config.sampling.greedy and not can.sampling, f"--temperature {config.sampling.temperature:g}", "use 0"),
        (bool(config.load.threads) and not can.threads, "--threads", f"use it with --engine {threaded_engines()}"),
    ]
    for hit, option, fix in refused:
        if hit:
            raise SpecbenchError(f"{option} is not supported by --engine {spec.name}; {fix}")


def threaded_engines() -> str:
    return " or ".join(name for name, spec in ENGINES.items() if spec.capabilities.threads)


def check_config(config: RunConfig) -> RunConfig:
    """RunConfig.validate (what holds for every engine), then the engine's own rules and its capabilities."""
    spec = engine_spec(config.engine)
    config.validate()
    spec.rules(config)
    capability_rules(spec, config)
    return config


def same_session(session_kind: str, config: RunConfig) -> bool:
    """Whether a session of `session_kind` can decode `config` (a sweep reuses it across such cells)."""
    return engine_spec(config.engine).session_kind == session_kind


def verify_engines() -> tuple[str, ...]:
    """The engines whose own passes `verify`'s exact laws can test."""
    return tuple(name for name, spec in ENGINES.items() if spec.capabilities.exactness_replay)


def engine_rows() -> list[dict]:
    """One row per engine: its name, session kind, each capability (yes / no) and its summary."""
    return [
        {"name": name, "session": spec.session_kind}
        | {cap: "yes" if can else "no" for cap, can in spec.capabilities.rows()}
        | {"summary": spec.summary}
        for name, spec in ENGINES.items()
    ]

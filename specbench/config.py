"""Frozen run configuration, validated once at the edge.

Everything downstream (models, runner, results) receives these dataclasses and trusts them;
each check here raises a one-line `SpecbenchError` that names the bad value and the fix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from specbench.errors import SpecbenchError

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("float32", "bfloat16", "float16")
ENGINES = ("specbench", "hf-assisted")
BACKENDS = ("eager", "static", "compiled")  # see decoding/backend.py
MODEL_FREE_DRAFTS = ("prompt-lookup", "unigram", "bigram")  # --draft names (before any ":options") that run no model


LATER_DEFAULTS = {"draft_confidence": 0.0}  # fields added after results existed → their defaults


def omit_later_defaults(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if not (k in LATER_DEFAULTS and v == LATER_DEFAULTS[k])}


def check_backend(name: str) -> None:
    if name not in BACKENDS:
        raise SpecbenchError(f"--backend must be one of {', '.join(BACKENDS)} (got {name!r})")


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a distribution; applied identically to target and draft."""

    temperature: float = 0.0  # 0 means greedy (argmax); > 0 scales logits by 1/T
    top_k: int = 0  # keep the k most likely tokens; 0 disables
    top_p: float = 1.0  # keep the smallest set whose mass reaches p; 1.0 disables

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> "SamplingConfig":
        if not self.temperature >= 0.0:
            raise SpecbenchError(f"--temperature must be >= 0 (got {self.temperature}); use 0 for greedy")
        if self.top_k < 0:
            raise SpecbenchError(f"--top-k must be >= 0 (got {self.top_k}); use 0 to disable it")
        if not 0.0 < self.top_p <= 1.0:
            raise SpecbenchError(f"--top-p must be in (0, 1] (got {self.top_p}); use 1.0 to disable it")
        return self


@dataclass(frozen=True)
class RunConfig:
    """One `specbench run`: a target/draft pair, γ, sampling and a task."""

    target: str  # preset name, hub id, local directory or .gguf file
    draft: str  # model spec as for target, or a model-free draft name (e.g. prompt-lookup)
    task: str  # task name from tasks/ or a JSONL file of {"prompt": ...}
    gamma: int = 4  # draft tokens proposed per target pass
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    limit: int = 8  # number of examples
    seed: int = 0
    max_new_tokens: int | None = None  # None: the task's default
    device: str = "auto"
    dtype: str = "float32"
    engine: str = "specbench"  # our loop, or HF assisted generation for comparison
    trust_remote_code: bool = False
    backend: str = "eager"  # how every model's forward runs: eager, static (KV cache) or compiled (decoding/backend.py)
    draft_confidence: float = 0.0  # > 0: a model draft stops a proposal early below this confidence (γ is the most)

    def validate(self) -> "RunConfig":
        self.sampling.validate()
        if self.gamma < 1:
            raise SpecbenchError(f"--gamma must be >= 1 (got {self.gamma}); the draft proposes gamma tokens per step")
        if self.limit < 1:
            raise SpecbenchError(f"--limit must be >= 1 (got {self.limit})")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise SpecbenchError(f"--max-new-tokens must be >= 1 (got {self.max_new_tokens})")
        if self.device not in DEVICES:
            raise SpecbenchError(f"--device must be one of {', '.join(DEVICES)} (got {self.device!r})")
        if self.dtype not in DTYPES:
            raise SpecbenchError(f"--dtype must be one of {', '.join(DTYPES)} (got {self.dtype!r})")
        if self.engine not in ENGINES:
            raise SpecbenchError(f"--engine must be one of {', '.join(ENGINES)} (got {self.engine!r})")
        check_backend(self.backend)
        if not 0.0 <= self.draft_confidence < 1.0:
            raise SpecbenchError(f"--draft-confidence must be in [0, 1) (got {self.draft_confidence}); "
                                 f"0 turns early stopping off")
        if self.draft_confidence and self.draft.partition(":")[0] in MODEL_FREE_DRAFTS:
            raise SpecbenchError(f"--draft-confidence needs a model draft; {self.draft!r} has no confidence to check "
                                 f"(drop the option, or use a model or lookup+<model>)")
        return self

    def to_dict(self) -> dict:
        """The fields as a dict, leaving out those added later while they keep their defaults: run
        ids hash this and resumption compares it, so configurations that existed before such a
        field keep their ids and folders (from_dict restores the default)."""
        return omit_later_defaults(dataclasses.asdict(self))

    @staticmethod
    def from_dict(d: dict) -> "RunConfig":
        d = dict(d)
        d["sampling"] = SamplingConfig(**d["sampling"])
        return RunConfig(**d)

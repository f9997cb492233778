"""Frozen run configuration, validated once at the edge.

Everything downstream (models, runner, results) receives these dataclasses and trusts them;
each check here raises a one-line `SpecbenchError` that names the bad value and the fix. A run is a RunConfig:
its draft and γ specs (run_specs.py), its SamplingConfig and its LoadSpec (the target and how it loads and runs,
shared with the sweep's grid and the Session that holds the models).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.placement import check_placement  # pure string parsing: no torch
from specbench.run_specs import (  # noqa: F401 (GAMMA_POLICIES, MAX_GAMMA: read from here too); no torch
    GAMMA_POLICIES,
    MAX_GAMMA,
    DraftSpec,
    GammaSpec,
    parse_draft,
    parse_gamma,
)

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("float32", "bfloat16", "float16")
# --draft auto, --dtype auto, --gamma auto: chosen on this machine by calibration + pilot (measure/auto/choose.py)
AUTO = "auto"
PILOTED_GAMMA = ("auto", "adaptive")  # the γ policies chosen before timing from a pilot's replay (measure/auto)
BACKENDS = ("eager", "static", "compiled")  # see decoding/backend.py
# per-row advance, or every row by the batch's minimum (decoding/batched/speculative.py)
BATCH_POLICIES = ("ragged", "min")
MAX_BATCH_SIZE = 1024  # a batch beyond this is a typo; caches and masks are sized by it
PROMPT_LENGTHS = (
    "all",
    "short",
    "medium",
    "long",
)  # --prompt-length: every example, or a tertile of prompt tokens (measure/run/buckets.py)


MAX_CONCURRENCY = 1024  # requests in flight at once; beyond this it is a typo
# goodput's latency bound: a request counts when its time per output token after the first is at most this; 100 ms
# (10 tokens/s, about twice a fast reader's pace) is a bound a chat user still reads as streaming
DEFAULT_SLO_TPOT_MS = 100.0
RATE_NEEDS_CONCURRENCY = (
    "--request-rate needs --concurrency (the most requests in flight); pass --concurrency N, e.g. the --limit for "
    "no cap"
)

LATER_DEFAULTS = {
    "draft_confidence": 0.0,
    "gamma_max": 8,
    "repeats": 1,
    "exact_shapes": False,
    "batch_size": 1,
    "batch_policy": "ragged",
    "device_map": None,
    "max_memory": None,
    "prompt_length": "all",
    "threads": 0,
    "bit_exact": False,
    "concurrency": 0,
    "request_rate": None,
    "slo_tpot_ms": DEFAULT_SLO_TPOT_MS,
}  # fields added after results existed → their defaults


def omit_later_defaults(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if not (k in LATER_DEFAULTS and v == LATER_DEFAULTS[k])}


# one folder name (255 bytes at most): no separator, no leading dot
FOLDER_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")


def check_id(value: str, option: str) -> str:
    """--run-id / --sweep-id: one folder name directly under --results-dir, never a path.

    Letters, digits, '.', '_' and '-', at most 255 characters (a file system's limit for a name), not
    starting with '.' (so no '..', no hidden folder); a slash, an absolute path or an empty id would put
    results somewhere else."""
    if not isinstance(value, str) or not FOLDER_ID.fullmatch(value):
        raise SpecbenchError(
            f"{option} {value!r} must be a folder name of letters, digits, '.', '_' or '-' (at most "
            f"255, not starting with '.'); it names one folder inside --results-dir"
        )
    return value


def check_results_dir(value: str | Path) -> Path:
    """--results-dir: a folder path; an empty one would silently mean the current directory."""
    text = str(value) if isinstance(value, Path) else value
    if not isinstance(text, str) or not text.strip() or "\0" in text:
        raise SpecbenchError(f"--results-dir {value!r} is not a folder path; pass one, e.g. --results-dir results")
    return Path(text)


MAX_SEED = 2**62  # torch's generators take 64-bit seeds; verify adds a sample's index to the seed


def check_seed(value: int) -> int:
    """--seed: an integer a torch generator can take (issue 41: --seed 2**70 ended verify in a traceback)."""
    if isinstance(value, bool) or not isinstance(value, int) or not -MAX_SEED < value < MAX_SEED:
        raise SpecbenchError(f"--seed must be an integer between -2**62 and 2**62 (got {value}); pass a smaller seed")
    return value


def check_finite(value: float, option: str, low: float = 0.0, hint: str = "") -> float:
    """A number that must be finite and >= low (NaN and infinities cannot be sampled with or written as JSON)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value >= low and math.isfinite(value)):
        raise SpecbenchError(f"{option} must be >= {low:g} and finite (got {value}){hint}")
    return float(value)


def check_temperature(value: float) -> float:
    """--temperature, for `run` and every value of a sweep's list."""
    return check_finite(value, "--temperature", 0.0, "; use 0 for greedy")


def check_gamma_budget(gamma: GammaSpec, max_new_tokens: int) -> None:
    """An integer γ above the run's token budget is refused, not clamped: a step drafts at most the tokens
    still to come (γ' = min(γ, room - 1)), so such a γ measures the same run as γ = max_new_tokens
    under a misleading label; the fix is in the message."""
    if gamma.fixed is not None and gamma.fixed > max_new_tokens:
        raise SpecbenchError(
            f"--gamma {gamma} is more than the {max_new_tokens} new tokens of the run: a step never "
            f"drafts past the budget; pass --gamma {max_new_tokens} or less, or raise --max-new-tokens"
        )


def check_gamma_context(k_max: int, max_positions: int | None) -> None:
    """The largest pass the run makes (γ + 1 tokens, or gamma_max + 1 under a policy) must fit the target's context."""
    if max_positions and k_max >= max_positions:
        raise SpecbenchError(
            f"passes of {k_max} tokens (γ + 1) do not fit the target's context of {max_positions}; "
            f"lower --gamma / --gamma-max below {max_positions - 1}"
        )


def check_batch_size(batch_size: int, n_examples: int | None = None) -> int:
    """--batch-size: an integer 1..MAX_BATCH_SIZE, and (once the examples are known) no more than them.

    A batch larger than the run's examples is refused, not clamped: a clamped run would measure
    batch n under the label of batch B, and a speedup-against-batch curve would plot it at the wrong B."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise SpecbenchError(
            f"--batch-size must be an integer between 1 and {MAX_BATCH_SIZE} (got {batch_size!r}); "
            f"1 decodes one example at a time"
        )
    if n_examples is not None and batch_size > n_examples:
        raise SpecbenchError(
            f"--batch-size {batch_size} is more than the {n_examples} examples of the run; raise "
            f"--limit to at least {batch_size} or lower --batch-size"
        )
    return batch_size


def check_batch_options(config: RunConfig) -> None:
    """What a batch of B > 1 rules out: HF's assisted generation (it refuses batches) and the γ choices made
    per example (auto's pilot and calibration, the adaptive and heuristic per-row schedules)."""
    check_batch_size(config.batch_size)
    if config.batch_policy not in BATCH_POLICIES:
        raise SpecbenchError(f"--batch-policy must be one of {', '.join(BATCH_POLICIES)} (got {config.batch_policy!r})")
    if config.batch_size == 1:
        return
    if config.load.backend != "eager":
        raise SpecbenchError(
            f"--backend {config.load.backend} is for one sequence at a time; batches run eager "
            f"(drop --backend, or use --batch-size 1)"
        )
    if config.gamma.policy is not None:
        raise SpecbenchError(
            f"--gamma {config.gamma} chooses γ per example at batch 1; with --batch-size "
            f"{config.batch_size} pass an integer γ (a sweep over --gamma at this batch size finds "
            f"the best)"
        )
    if config.draft.auto or config.load.dtype == AUTO:
        raise SpecbenchError(
            f"--draft auto and --dtype auto are chosen at batch 1; with --batch-size "
            f"{config.batch_size} name the draft and dtype (a sweep compares them)"
        )
    if config.exact_shapes:
        raise SpecbenchError("--exact-shapes pads single-sequence passes; it does not apply to --batch-size > 1")
    if config.draft.proposes_trees:
        raise SpecbenchError(
            f"--draft {config.draft.text} proposes token trees, which the batched engine does not verify; "
            "use --batch-size 1"
        )
    if config.draft.learns_outputs:
        raise SpecbenchError(
            f"--draft {config.draft.text} learns from the run's earlier outputs, one example after another, which "
            "rows decoded together cannot; use --batch-size 1"
        )
    if config.bit_exact:
        raise SpecbenchError(
            "--bit-exact splits single-sequence verify passes into one-token steps; it does not apply to "
            "--batch-size > 1 (use --batch-size 1)"
        )
    if config.draft_confidence:
        raise SpecbenchError(
            "--draft-confidence stops one sequence's proposal early; the batched engine drafts γ for "
            "every row (drop the option at --batch-size > 1)"
        )


def check_load(config: RunConfig) -> None:
    """--concurrency / --request-rate / --slo-tpot-ms: a load run serves the run's examples together (which engine
    can is its capability, engines/registry.py); each value on its own here."""
    c, rate = config.concurrency, config.request_rate
    if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_CONCURRENCY:
        raise SpecbenchError(
            f"--concurrency must be an integer between 1 and {MAX_CONCURRENCY} (got {c!r}); it caps the requests in "
            "flight at once"
        )
    if rate is not None:
        check_finite(rate, "--request-rate", 0.0, "; pass requests per second, or inf for all at once")
        if rate <= 0:
            raise SpecbenchError(f"--request-rate must be > 0 (got {rate:g}); pass requests per second, or inf")
        if not c:
            raise SpecbenchError(RATE_NEEDS_CONCURRENCY)
    check_finite(config.slo_tpot_ms, "--slo-tpot-ms", 0.0, "; it is goodput's bound on time per output token")
    if c and config.batch_size > 1:
        raise SpecbenchError("--concurrency serves examples as requests; drop --batch-size (use --batch-size 1)")


def load_suffix(config: RunConfig) -> str:
    """'-c<C>' (and '-r<R>' for a request rate) in run and cell ids of a load run; '' otherwise, so old ids stay."""
    if not config.concurrency:
        return ""
    return f"-c{config.concurrency}" + (f"-r{config.request_rate:g}" if config.request_rate is not None else "")


def parse_request_rate(value: str | float | None) -> float | None:
    """--request-rate: requests per second, or inf (or absent) for all at once → None."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("inf", "infinity", "+inf"):
        return None
    try:
        return float(text)
    except ValueError:
        raise SpecbenchError(
            f"--request-rate {value!r} is not a number; pass requests per second (e.g. 2.5) or inf"
        ) from None


def batch_suffix(config: RunConfig) -> str:
    """'-b<B>' (and '-min' under the min-advance policy) in run and cell ids; '' at batch 1, so old ids stay."""
    if config.batch_size == 1:
        return ""
    return f"-b{config.batch_size}" + ("-min" if config.batch_policy == "min" else "")


def check_prompt_length(value: str) -> str:
    """--prompt-length: all (every example, as before buckets) or one tertile bucket of prompt token counts."""
    if value not in PROMPT_LENGTHS:
        raise SpecbenchError(
            f"--prompt-length must be one of {', '.join(PROMPT_LENGTHS)} (got {value!r}); short, "
            f"medium and long are the task's prompt-token tertiles, all is every example"
        )
    return value


def prompt_length_suffix(config: RunConfig) -> str:
    """'-p<bucket>' in run and cell ids for a bucketed run; '' for all, so old ids stay."""
    return "" if config.prompt_length == "all" else f"-p{config.prompt_length}"


def check_backend(name: str) -> None:
    if name not in BACKENDS:
        raise SpecbenchError(f"--backend must be one of {', '.join(BACKENDS)} (got {name!r})")


@dataclass(frozen=True)
class LoadSpec:
    """How the target is loaded and run, all an engine's Session (engines/session.py) needs to hold a run's models.

    RunConfig, SweepGrid and Session embed one instead of re-declaring these fields, so a new load option is one
    field here, its check in `validate`, its CLI option and its use. RunConfig.to_dict writes the fields flat, as
    they were before this spec existed, so run ids and config JSON keep their bytes."""

    target: str  # preset name, hub id, local directory or .gguf file
    device: str = "auto"
    dtype: str = "float32"  # or auto: chosen on this machine by calibration (measure/auto/choose.py)
    trust_remote_code: bool = False
    backend: str = "eager"  # how every model's forward runs: eager, static (KV cache) or compiled (decoding/backend.py)
    # the target's layers placed by accelerate: auto, balanced, … or JSON (specbench/placement.py)
    device_map: str | None = None
    max_memory: str | None = None  # per-device caps for device_map, e.g. 0=20GiB,cpu=60GiB
    threads: int = 0  # --engine llama-cpp: llama.cpp's CPU threads (0: every core this process may use)

    def validate(self) -> LoadSpec:
        """Each value on its own; what an engine rules out (llama.cpp's own placement) is its rules (engines/)."""
        if not isinstance(self.target, str) or not self.target.strip():
            raise SpecbenchError(
                f"--target {self.target!r} is empty; pass a preset (`specbench list models`), a model folder, "
                f"a .gguf file or a hub id"
            )
        if self.device not in DEVICES:
            raise SpecbenchError(f"--device must be one of {', '.join(DEVICES)} (got {self.device!r})")
        if self.dtype not in DTYPES + (AUTO,):
            raise SpecbenchError(f"--dtype must be one of {', '.join(DTYPES + (AUTO,))} (got {self.dtype!r})")
        check_backend(self.backend)
        check_placement(self.device_map, self.max_memory)
        if self.threads < 0:
            raise SpecbenchError(f"--threads must be >= 0 (got {self.threads}); 0 uses every core")
        return self


LOAD_KEYS = tuple(f.name for f in dataclasses.fields(LoadSpec))  # written flat in config JSON, beside the run's own
# config JSON's keys in the order they have always had (new fields go after them): manifests keep their bytes
CONFIG_KEYS = tuple(
    "target draft task gamma sampling limit seed max_new_tokens device dtype engine trust_remote_code backend "
    "draft_confidence gamma_max repeats exact_shapes device_map max_memory batch_size batch_policy prompt_length "
    "threads bit_exact concurrency request_rate slo_tpot_ms".split()
)


def flat_load(fields: dict, order: tuple[str, ...] = CONFIG_KEYS) -> dict:
    """asdict() of a RunConfig (or SweepGrid) with its "load" entry written flat, keys in `order` (then any others):
    the dict it wrote before LoadSpec existed."""
    flat = {k: v for k, v in fields.items() if k != "load"} | fields["load"]
    return {k: flat[k] for k in order if k in flat} | flat


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a distribution; applied identically to target and draft."""

    temperature: float = 0.0  # 0 means greedy (argmax); > 0 scales logits by 1/T
    top_k: int = 0  # keep the k most likely tokens; 0 disables
    top_p: float = 1.0  # keep the smallest set whose mass reaches p; 1.0 disables

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> SamplingConfig:
        check_temperature(self.temperature)
        if self.top_k < 0:
            raise SpecbenchError(f"--top-k must be >= 0 (got {self.top_k}); use 0 to disable it")
        if not 0.0 < self.top_p <= 1.0:
            raise SpecbenchError(f"--top-p must be in (0, 1] (got {self.top_p}); use 1.0 to disable it")
        return self


@dataclass(frozen=True)
class RunConfig:
    """One `specbench run`: a target/draft pair, γ, sampling and a task."""

    load: LoadSpec  # the target and how it loads and runs; a target string given here is LoadSpec(target)
    draft: DraftSpec  # what --draft asks for (run_specs.py); a string given here is parsed into it, once
    task: str  # task name from tasks/ or a JSONL file of {"prompt": ...}
    gamma: GammaSpec = GammaSpec(4)  # γ per target pass, or a policy; an int or a name given here is parsed into it
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    limit: int = 8  # number of examples
    seed: int = 0
    max_new_tokens: int | None = None  # None: the task's default
    engine: str = "specbench"  # an engine registered in engines/registry.py (checked there: engines.check_config)
    draft_confidence: float = 0.0  # > 0: a model draft stops a proposal early below this confidence (γ is the most)
    gamma_max: int = 8  # the largest γ that auto / adaptive / heuristic consider (calibrated up to γ+1 tokens)
    repeats: int = 1  # timed decodes per engine and example, interleaved A B B A …; times are their median
    exact_shapes: bool = (
        False  # pad every target pass of both engines to γ+1 tokens: identical kernels, identity in bf16
    )
    batch_size: int = 1  # examples decoded together, in the task's seeded order (1: one at a time, as before batches)
    batch_policy: str = (
        "ragged"  # B > 1: each row keeps its own accepted prefix (ragged) or all advance by the minimum (min)
    )
    prompt_length: str = (
        "all"  # all examples, or the short / medium / long tertile of prompt tokens (measure/run/buckets.py)
    )
    # every verify pass of the speculative arm as one-token passes (the baseline's decoding step): greedy identity
    # is then exact in any dtype, and any divergence is a bug (decoding/stepwise.py; not a speed measurement)
    bit_exact: bool = False
    # a load run (serving): the examples submitted together to one engine per arm, at most `concurrency` in flight
    # (0: no load run, each example alone), arriving at `request_rate` per second (None: all at once); goodput
    # counts the requests whose time per output token is at most slo_tpot_ms (measure/stats/load.py)
    concurrency: int = 0
    request_rate: float | None = None
    slo_tpot_ms: float = DEFAULT_SLO_TPOT_MS

    def __post_init__(self) -> None:
        if isinstance(self.load, str):  # a bare target (tests, the bench): every other load setting at its default
            object.__setattr__(self, "load", LoadSpec(self.load))
        object.__setattr__(self, "gamma", parse_gamma(self.gamma))  # an int or a name from callers and JSON
        object.__setattr__(self, "draft", parse_draft(self.draft))  # a malformed spec fails here, before any load

    @property
    def draft_gamma(self) -> int:
        """The most tokens a step may draft: γ itself, or gamma_max under a policy (before auto is resolved)."""
        return self.gamma.draft_gamma(self.gamma_max)

    def validate(self) -> RunConfig:
        self.sampling.validate()
        self.gamma.check_range()
        if not 1 <= self.gamma_max <= 32:
            raise SpecbenchError(f"--gamma-max must be between 1 and 32 (got {self.gamma_max})")
        if not 1 <= self.repeats <= 20:
            raise SpecbenchError(f"--repeats must be between 1 and 20 (got {self.repeats})")
        if self.limit < 1:
            raise SpecbenchError(f"--limit must be >= 1 (got {self.limit})")
        check_seed(self.seed)
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise SpecbenchError(f"--max-new-tokens must be >= 1 (got {self.max_new_tokens})")
        self.load.validate()
        if self.bit_exact and self.exact_shapes:
            raise SpecbenchError(
                "--bit-exact and --exact-shapes are two exactness modes; pass one (--bit-exact is the exact one: "
                "one-token verify passes; --exact-shapes pads every pass to γ+1 tokens)"
            )
        check_batch_options(self)
        check_load(self)
        check_prompt_length(self.prompt_length)
        if not 0.0 <= self.draft_confidence < 1.0:
            raise SpecbenchError(
                f"--draft-confidence must be in [0, 1) (got {self.draft_confidence}); 0 turns early stopping off"
            )
        draft = None if self.draft.auto else self.draft
        if draft is not None and draft.recycles and (self.gamma.policy in PILOTED_GAMMA or self.load.dtype == AUTO):
            raise SpecbenchError(
                f"--draft {draft.text} grows trees from earlier passes, which the pilot of --gamma auto/adaptive and "
                "--dtype auto does not replay; give --gamma <n> and --dtype <name>"
            )
        if self.draft_confidence and draft is not None and draft.model_free:
            raise SpecbenchError(
                f"--draft-confidence needs a model draft; {self.draft.text!r} has no confidence to check "
                f"(drop the option, or use a model or lookup+<model>)"
            )
        return self

    def to_dict(self) -> dict:
        """The fields as a dict, leaving out those added later while they keep their defaults: run
        ids hash this and resumption compares it, so configurations that existed before such a
        field keep their ids and folders (from_dict restores the default). The load spec's fields are written
        flat, among the others, as before it existed."""
        fields = dataclasses.asdict(self) | {"gamma": self.gamma.value, "draft": self.draft.text}
        return omit_later_defaults(flat_load(fields))

    @staticmethod
    def from_dict(d: dict) -> RunConfig:
        """The config of a to_dict (a manifest's, a sweep cell's; an older one lacks the fields added later)."""
        d = dict(d)
        load = LoadSpec(**{k: d.pop(k) for k in LOAD_KEYS if k in d})
        return RunConfig(load=load, sampling=SamplingConfig(**d.pop("sampling")), **d)

"""A sweep's grid: the configurations to compare (γ × draft × temperature × task × budget × prompt length ×
batch × load (concurrency, request rate), per target), parsed from the command line into one SweepGrid whose cells
are RunConfigs.

Parsing and validating the grid touches no model and no folder, so a bad grid fails at once; how the
cells are named, measured and resumed in a sweep folder is measure/run/sweep_run.py.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace

from specbench.config import (
    BATCH_POLICIES,
    DEFAULT_SLO_TPOT_MS,
    GAMMA_POLICIES,
    LOAD_KEYS,
    PROMPT_LENGTHS,
    LoadSpec,
    RunConfig,
    SamplingConfig,
    check_finite,
    check_temperature,
    flat_load,
    omit_later_defaults,
    parse_request_rate,
)
from specbench.engines import check_config, engine_spec
from specbench.errors import SpecbenchError
from specbench.run_specs import DraftSpec, parse_draft, parse_gamma

MAX_CELLS = 10_000  # a typo like --gamma 1-100000 should fail fast, not plan a year of decoding
# sweep.json's grid keys in the order they have always had (the load spec's fields among them, flat)
GRID_KEYS = tuple(
    "target drafts gammas temperatures tasks top_k top_p limit seed max_new_tokens device dtype engine threads "
    "trust_remote_code backend draft_confidence gamma_max repeats batch_size batch_policy device_map max_memory "
    "prompt_length pairs concurrency request_rate slo_tpot_ms".split()
)


# --------------------------------------------------------------------------- grid specs


def _items(spec: str, option: str) -> list[str]:
    items = [s.strip() for s in str(spec).split(",")]
    if not spec or not str(spec).strip() or any(not s for s in items):
        raise SpecbenchError(f"{option}: empty value in {spec!r}; write a comma-separated list like 1,2,3")
    return items


def parse_int_list(spec: str, option: str = "--gamma", low: int = 1) -> list[int]:
    """'1,2,3,5,7', '1-8' or '1-3,5' → sorted unique integers, each >= low."""
    values: set[int] = set()
    for item in _items(spec, option):
        m = re.fullmatch(r"(\d{1,18})\s*-\s*(\d{1,18})", item)  # 18 digits: int() refuses 4,300 with a traceback
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if a > b:
                raise SpecbenchError(f"{option}: range {item!r} is empty; write low-high with low <= high (e.g. 1-8)")
            if b - a + 1 > MAX_CELLS:  # checked before expanding: 1-1000000000 would fill memory first
                raise SpecbenchError(f"{option}: range {item!r} holds {b - a + 1} values (more than {MAX_CELLS})")
            values.update(range(a, b + 1))
        elif re.fullmatch(r"[+-]?\d{1,18}", item):
            values.add(int(item))
        else:
            raise SpecbenchError(f"{option}: {item!r} is not an integer or a range like 1-8")
    bad = sorted(v for v in values if v < low)
    if bad:
        raise SpecbenchError(f"{option}: values must be >= {low} (got {bad[0]})")
    return sorted(values)


def parse_gamma_list(spec: str) -> list[int | str]:
    """'1-8,adaptive,heuristic' → the integers (sorted) then the policies (auto, adaptive, heuristic) named."""
    items = _items(spec, "--gamma")
    policies = [p for p in GAMMA_POLICIES if p in {i.lower() for i in items}]
    numbers = [i for i in items if i.lower() not in GAMMA_POLICIES]
    return (parse_int_list(",".join(numbers), "--gamma") if numbers else []) + policies


def parse_float_list(spec: str, option: str = "--temperature", low: float = 0.0) -> list[float]:
    """'0,0.7,1' → sorted unique floats, each >= low (no ranges: 0-1 has no natural step)."""
    values: set[float] = set()
    for item in _items(spec, option):
        try:
            value = float(item)
        except ValueError:
            raise SpecbenchError(f"{option}: {item!r} is not a number; write a list like 0,0.7,1 (no ranges)") from None
        value = check_temperature(value) if option == "--temperature" else check_finite(value, option, low)
        values.add(value + 0.0)  # -0.0 → 0.0
    return sorted(values)


def parse_rate_list(spec: str) -> list[float | None]:
    """--request-rate for a sweep: '1,2.5,inf' → the rates, sorted, then None (inf: all at once) if named."""
    values = {parse_request_rate(item) for item in _items(spec, "--request-rate")}
    rates = sorted(check_finite(v, "--request-rate", 0.0) for v in values if v is not None)
    if any(r <= 0 for r in rates):
        raise SpecbenchError("--request-rate: rates must be > 0 requests per second (or inf for all at once)")
    return [*rates, *([None] if None in values else [])]


def parse_policy_list(spec: str) -> list[str]:
    """'ragged,min' → the batch policies named, in BATCH_POLICIES order."""
    items = {i.lower() for i in _items(spec, "--batch-policy")}
    bad = sorted(items - set(BATCH_POLICIES))
    if bad:
        raise SpecbenchError(f"--batch-policy: {bad[0]!r} is not one of {', '.join(BATCH_POLICIES)}")
    return [p for p in BATCH_POLICIES if p in items]


def parse_prompt_lengths(spec: str) -> list[str]:
    """'short,medium,long' (or all, or any of them with all) → the buckets named, in PROMPT_LENGTHS order."""
    items = {i.lower() for i in _items(spec, "--prompt-length")}
    bad = sorted(items - set(PROMPT_LENGTHS))
    if bad:
        raise SpecbenchError(
            f"--prompt-length: {bad[0]!r} is not one of {', '.join(PROMPT_LENGTHS)}; write e.g. short,medium,long"
        )
    return [p for p in PROMPT_LENGTHS if p in items]


def parse_budgets(spec: str | None) -> int | None | tuple[int, ...]:
    """--max-new-tokens for a sweep: absent (each task's default), one integer (as before: no axis), or a list
    16,64,256 (an axis)."""
    if spec is None:
        return None
    values = parse_int_list(spec, "--max-new-tokens")
    return values[0] if len(values) == 1 else tuple(values)


def parse_pair(spec: str) -> tuple[str, str]:
    """--pair TARGET:DRAFT → (target, draft), split on the first colon only: a draft may hold ':' and ',' of its
    own (prompt-lookup:rule=hf,max_ngram=2), so it is never split on commas."""
    target, sep, draft = str(spec).partition(":")
    if not sep or not target.strip() or not draft.strip():
        raise SpecbenchError(
            f"--pair {spec!r} must be TARGET:DRAFT, e.g. --pair smollm2-135m:prompt-lookup "
            f"(the draft may hold its own ':' and ',')"
        )
    return target.strip(), draft.strip()  # the grid parses the draft (SweepGrid.draft_specs)


def parse_str_list(spec: str, option: str) -> list[str]:
    """'a,b' → sorted unique names (sorted so the sweep id does not depend on the order typed)."""
    return sorted(set(_items(spec, option)))


def parse_draft_list(spec: str) -> list[str]:
    """--draft 'a,b' → sorted unique draft specs, where a draft's own options stay with it: an item of the form
    key=value after a draft with options ('prompt-lookup:rule=hf,max_ngram=2,distilled') continues that draft."""
    drafts: list[str] = []
    for item in _items(spec, "--draft"):
        if drafts and ":" in drafts[-1] and re.fullmatch(r"[A-Za-z_]\w*=[^:+]*", item):
            drafts[-1] += "," + item
        else:
            drafts.append(item)
    return sorted(set(drafts))


# --------------------------------------------------------------------------- the grid


def as_axis(value) -> tuple:
    """A grid field's values: the tuple an axis holds, or the one value a fixed setting holds."""
    return value if isinstance(value, tuple) else (value,)


@dataclass(frozen=True)
class SweepGrid:
    """One `specbench sweep`: the axes swept and the settings every cell shares."""

    load: LoadSpec  # what every cell loads (target "" when `pairs` name the targets; threads: llama-cpp cells only)
    drafts: tuple[str, ...]  # draft specs, sorted (() when `pairs` name the drafts)
    gammas: tuple[int | str, ...]  # γ values, sorted, then policies (auto, adaptive, heuristic)
    temperatures: tuple[float, ...]  # sorted
    tasks: tuple[str, ...]  # task names or files, sorted
    top_k: int = 0
    top_p: float = 1.0
    limit: int = 8  # examples per cell
    seed: int = 0
    max_new_tokens: int | None | tuple[int, ...] = None  # None: each task's default; a tuple is an axis (16,64,256)
    engine: str | tuple[str, ...] = "specbench"  # a tuple is an axis (--engine specbench,llama-cpp)
    draft_confidence: float | tuple[float, ...] = (
        0.0  # a model draft's early-stop confidence (0 = off); a tuple is an axis
    )
    gamma_max: int = 8  # the largest γ of the auto / adaptive / heuristic cells
    repeats: int = 1  # timed decodes per engine and example (as RunConfig.repeats)
    batch_size: int | tuple[int, ...] = 1  # examples decoded together; a tuple is an axis (--batch-size 1,2,4,8,16)
    batch_policy: str | tuple[str, ...] = "ragged"  # ragged / min at B > 1; a tuple is an axis (B = 1 cells run once)
    prompt_length: str | tuple[str, ...] = (
        "all"  # all, or prompt-length buckets; a tuple is an axis (short,medium,long)
    )
    pairs: tuple[tuple[str, str], ...] = ()  # (target, draft) pairs, sorted, instead of target × drafts (--pair)
    concurrency: int | tuple[int, ...] = 0  # a load run's cap on requests in flight (0: none); a tuple is an axis
    request_rate: float | None | tuple[float | None, ...] = None  # a load run's arrivals/s (None: all at once); axis
    slo_tpot_ms: float = DEFAULT_SLO_TPOT_MS  # goodput's TPOT bound in the load cells

    @staticmethod
    def from_specs(
        *,
        target: str,
        draft: str,
        gamma: str,
        temperature: str,
        task: str,
        pairs: tuple[str, ...] = (),
        max_cells: int = MAX_CELLS,
        **shared,
    ) -> SweepGrid:
        """Parse the CLI's comma/range strings (and --pair TARGET:DRAFT values); every error is a one-line
        SpecbenchError. With pairs, target and draft are not used (the CLI refuses both at once). The load options
        (device, dtype, …: LoadSpec's fields) come flat, as the CLI has them, and become the grid's LoadSpec."""
        parsed = tuple(sorted(set(parse_pair(p) for p in pairs)))
        load = LoadSpec("" if parsed else target, **{k: shared.pop(k) for k in LOAD_KEYS if k in shared})
        grid = SweepGrid(
            load=load,
            drafts=() if parsed else tuple(parse_draft_list(draft)),
            pairs=parsed,
            gammas=tuple(parse_gamma_list(gamma)),
            temperatures=tuple(parse_float_list(temperature, "--temperature")),
            tasks=tuple(parse_str_list(task, "--task")),
            **shared,
        )
        return grid.validate(max_cells)

    def validate(self, max_cells: int = MAX_CELLS) -> SweepGrid:
        """Every cell valid, and no more than max_cells of them (--max-cells), checked before any load."""
        if not (self.target_drafts() and self.gammas and self.temperatures and self.tasks):
            raise SpecbenchError("a sweep needs at least one draft, γ, temperature and task")
        self.draft_specs()  # a malformed draft (listed or paired) fails here, before any load
        if "auto" in (self.load.dtype, *self.all_drafts):
            raise SpecbenchError(
                "--dtype auto and --draft auto choose one configuration for `specbench run`; a sweep "
                "compares configurations: list the dtypes (one sweep each) and drafts to compare"
            )
        n = (
            len(self.target_drafts())
            * len(self.engines)
            * len(self.gammas)
            * len(self.temperatures)
            * len(self.tasks)
            * len(self.confidences)
            * len(self.batch_sizes)
            * len(self.batch_policies)
            * len(self.budgets)
            * len(self.prompt_lengths)
            * len(self.concurrencies)
            * len(self.request_rates)
        )
        if n > max_cells:
            raise SpecbenchError(
                f"the grid has {n} cells (more than {max_cells}); narrow --gamma/--draft/--temperature/--task, "
                f"or pass --max-cells {n} to run them all"
            )
        configs = self.configs()
        if not configs:
            raise SpecbenchError(
                f"every γ of --gamma is more than every --max-new-tokens ({self.max_new_tokens}); a "
                f"step never drafts past the budget: lower --gamma or raise --max-new-tokens"
            )
        for cfg in configs:
            check_config(cfg)
        return self

    def target_drafts(self) -> list[tuple[str, str]]:
        """(target, draft) of every cell: the pairs, or the one target with each draft."""
        return list(self.pairs) if self.pairs else [(self.load.target, d) for d in self.drafts]

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets, sorted: cells are grouped by them so each target model loads once."""
        return tuple(sorted({t for t, _ in self.target_drafts()}))

    @property
    def all_drafts(self) -> tuple[str, ...]:
        return tuple(sorted({d for _, d in self.target_drafts()}))

    def draft_specs(self) -> dict[str, DraftSpec]:
        """Each draft of the grid → its DraftSpec, parsed once here (a malformed one fails, naming itself); the
        cells carry these specs."""
        return {d: parse_draft(d) for d in self.all_drafts}

    @property
    def budgets(self) -> tuple[int | None, ...]:
        return as_axis(self.max_new_tokens)

    @property
    def prompt_lengths(self) -> tuple[str, ...]:
        return as_axis(self.prompt_length)

    @property
    def engines(self) -> tuple[str, ...]:
        return as_axis(self.engine)

    @property
    def confidences(self) -> tuple[float, ...]:
        return as_axis(self.draft_confidence)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return as_axis(self.batch_size)

    @property
    def batch_policies(self) -> tuple[str, ...]:
        return as_axis(self.batch_policy)

    @property
    def concurrencies(self) -> tuple[int, ...]:
        return as_axis(self.concurrency)

    @property
    def request_rates(self) -> tuple[float | None, ...]:
        return as_axis(self.request_rate)

    def to_dict(self) -> dict:
        """The grid as sweep.json holds it and its id hashes: the load spec's fields flat, as before it existed."""
        d = flat_load(asdict(self), GRID_KEYS)
        for key in (
            "draft_confidence",
            "batch_size",
            "batch_policy",
            "max_new_tokens",
            "prompt_length",
            "engine",
            "concurrency",
            "request_rate",
        ):
            if isinstance(getattr(self, key), tuple) and len(getattr(self, key)) == 1:
                d[key] = getattr(self, key)[0]  # one value: the id it always had
        if not self.pairs:
            del d["pairs"]  # a grid without pairs keeps the id it always had
        return omit_later_defaults(
            {
                k: [list(x) if isinstance(x, tuple) else x for x in v] if isinstance(v, tuple) else v
                for k, v in d.items()
            }
        )

    def cell_load(self, target: str, engine: str) -> LoadSpec:
        """A cell's load spec: the grid's for the cell's target; llama.cpp's threads in the llama-cpp cells only."""
        return replace(
            self.load, target=target, threads=self.load.threads if engine_spec(engine).capabilities.threads else 0
        )

    def base_config(self, draft: DraftSpec) -> RunConfig:
        """The first cell's config, with `draft`: the settings every cell shares (configs() sets each cell's axes)."""
        return RunConfig(
            load=self.cell_load(self.target_drafts()[0][0], self.engines[0]),
            draft=draft,
            task=self.tasks[0],
            gamma=parse_gamma(self.gammas[0]),
            sampling=SamplingConfig(self.temperatures[0], self.top_k, self.top_p),
            limit=self.limit,
            seed=self.seed,
            max_new_tokens=self.budgets[0],
            engine=self.engines[0],
            draft_confidence=self.confidences[0],
            gamma_max=self.gamma_max,
            repeats=self.repeats,
            batch_size=self.batch_sizes[0],
            batch_policy=self.batch_policies[0],
            prompt_length=self.prompt_lengths[0],
            concurrency=self.concurrencies[0],
            request_rate=self.request_rates[0],
            slo_tpot_ms=self.slo_tpot_ms,
        )

    def configs(self) -> list[RunConfig]:
        """Every cell, ordered target → task → temperature → budget → prompt length → draft → γ → batch size →
        policy → concurrency → request rate, so each target loads once and cells sharing a baseline run together; the
        min policy only at B > 1 (at B = 1 it is the ragged cell)."""
        spec_of = self.draft_specs()
        base = self.base_config(spec_of[self.target_drafts()[0][1]])
        drafts_of = {t: [spec_of[d] for tt, d in self.target_drafts() if tt == t] for t in self.targets}
        return [
            replace(
                base,
                load=self.cell_load(target, engine),
                task=task,
                draft=draft,
                gamma=parse_gamma(gamma),
                draft_confidence=conf,
                sampling=SamplingConfig(t, self.top_k, self.top_p),
                batch_size=b,
                batch_policy=policy,
                max_new_tokens=budget,
                prompt_length=bucket,
                engine=engine,
                concurrency=c,
                request_rate=rate,
            )
            for target in self.targets
            for engine in self.engines  # each engine's session loads once per target
            for task in self.tasks
            for t in self.temperatures
            for budget in self.budgets
            for bucket in self.prompt_lengths
            for draft in drafts_of[target]
            for gamma in self.gammas
            for conf in self.confidences
            for b in self.batch_sizes
            for policy in self.batch_policies
            for c in self.concurrencies
            for rate in self.request_rates
            if not (conf and draft.model_free)  # no confidence to check there
            and not (b == 1 and policy != self.batch_policies[0])  # B = 1: one policy (they agree there)
            and not self.over_budget(gamma, budget)
        ]  # skipped, one line says so (skipped_gammas)

    def over_budget(self, gamma: int | str, budget: int | None) -> bool:
        """A budget axis skips its cells whose integer γ exceeds the cell's budget (they would measure γ = budget
        under another label); a single budget refuses such a γ instead (config.check_gamma_budget), as `run` does."""
        fixed = parse_gamma(gamma).fixed
        return len(self.budgets) > 1 and fixed is not None and budget is not None and fixed > budget

    def skipped_gammas(self) -> list[tuple[int, int]]:
        """(γ, budget) of every γ the budget axis skips: the sweep prints them in one line."""
        return [(g, b) for b in self.budgets for g in self.gammas if self.over_budget(g, b)]  # type: ignore[misc]  # over_budget: g fixed, b set

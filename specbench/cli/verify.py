"""`specbench verify`: does speculative decoding emit the target's distribution on this pair?

specbench.evidence.verification.verify_pair does the work (validation, the writability
check, loading, every check, checks.json); this command renders the table and exits 1 when
any check fails. A check that did not reject says "pass" only at power >= 0.8 against the
stated alternative (--alt-tv); with less it is inconclusive, with the samples that would do.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from specbench.cli.options import (
    DEFAULT_TASK,
    AsJson,
    Device,
    Draft,
    Dtype,
    ResultsDir,
    Seed,
    Target,
    Task,
    Temperature,
    TopK,
    TopP,
    TrustRemote,
    VerifyEngine,
)
from specbench.cli.output import fmt, options_checked, out, phase_status, quiet_transformers
from specbench.config import LoadSpec, SamplingConfig, check_seed
from specbench.engines import DEFAULT_ENGINE
from specbench.errors import SpecbenchError
from specbench.models import DEFAULT_DRAFT, DEFAULT_TARGET

Gammas = Annotated[str, typer.Option("--gamma", help="γ values for the sequence and identity checks, comma-separated.")]
Prompts = Annotated[int, typer.Option("--limit", help="Prompts for the greedy-identity check.")]
Samples = Annotated[
    Optional[int],
    typer.Option(
        "--n-samples",
        help="Continuations per engine for the sequence-level tests (default 300; on an engine verified as a black "
        "box, vLLM, what reaches power 0.8 against --alt-tv where top-k/top-p make the law enumerable).",
    ),
]
Length = Annotated[int, typer.Option("--length", help="Tokens per sampled continuation.")]
StepSamples = Annotated[
    int, typer.Option("--step-samples", help="Draws for the model-free step law's tests (0 skips every step law).")
]
PairStepSamples = Annotated[
    int,
    typer.Option(
        "--pair-step-samples",
        help="Steps of the step law on the real pair, per γ and per verify-side control there (each costs target "
        "forwards; ~2,600 reach power 0.8 at top-k 3); 0 skips it.",
    ),
]
ControlSamples = Annotated[
    int, typer.Option("--control-samples", help="Draws per negative control (each must fail); 0 skips them.")
]
AltTV = Annotated[
    float,
    typer.Option("--alt-tv", help="Alternative for every stated power: total variation on the tested law."),
]

Threads = Annotated[int, typer.Option("--threads", help="--engine llama-cpp: llama.cpp's CPU threads (0: every core).")]
BitExact = Annotated[
    bool,
    typer.Option(
        "--bit-exact",
        help="Greedy identity with every verify pass of speculative decoding as one-token passes (the baseline's "
        "decoding step), as `run --bit-exact`: each output, and every position teacher-forced past its first "
        "divergence, must equal the baseline's in any dtype; any divergence fails (no margin gate, no HF row).",
    ),
]

TABLE_COLUMNS = ("check", "statistic", "p-value", "N", "level", "power", "result")
VERDICT_STYLE = {"pass": "green", "fail": "red", "inconclusive": "yellow"}


def verify(
    target: Target = DEFAULT_TARGET,
    draft: Draft = DEFAULT_DRAFT,
    temperature: Temperature = 1.0,
    top_k: TopK = 3,
    top_p: TopP = 1.0,
    gammas: Gammas = "1,3",
    task: Task = DEFAULT_TASK,
    limit: Prompts = 4,
    n_samples: Samples = None,
    length: Length = 3,
    step_samples: StepSamples = 100_000,
    control_samples: ControlSamples = 20_000,
    pair_step_samples: PairStepSamples = 10_000,
    alt_tv: AltTV = 0.05,
    seed: Seed = 0,
    device: Device = "auto",
    dtype: Dtype = "float32",
    results_dir: ResultsDir = "results",
    as_json: AsJson = False,
    trust_remote_code: TrustRemote = False,
    engine: VerifyEngine = DEFAULT_ENGINE,
    threads: Threads = 0,
    bit_exact: BitExact = False,
):
    """Check that speculative decoding emits the target's distribution: exact laws, statistical tests, greedy identity.

    Example: specbench verify --temperature 0.7 --top-k 3   (small top-k makes the exact sequence law enumerable)
    Example: specbench verify --temperature 0 --dtype bfloat16 --bit-exact   (greedy identity with no excuse left)
    Example: specbench verify --engine llama-cpp   (the same checks on llama.cpp's kernels, the GGUF as quantized)
    Example: specbench verify --engine vllm --draft prompt-lookup --top-k 0 --top-p 0.3   (vLLM as a black box)
    """
    from specbench.evidence.verification import VerifyRequest, verify_pair
    from specbench.measure.run import parse_int_list

    with options_checked():  # what the request's checks refuse is a bad command line (exit code 2)
        request = VerifyRequest(
            load=LoadSpec(target, device=device, dtype=dtype, trust_remote_code=trust_remote_code, threads=threads),
            draft=draft,
            sampling=SamplingConfig(temperature, top_k, top_p),
            gammas=tuple(parse_int_list(gammas, "--gamma")),
            task=task,
            limit=limit,
            n_samples=n_samples,
            length=length,
            step_samples=step_samples,
            control_samples=control_samples,
            pair_step_samples=pair_step_samples,
            alt_tv=alt_tv,
            seed=seed,
            engine=engine.lower(),
            bit_exact=bit_exact,
        ).validate()
        check_sizes(n_samples, length)
        check_seed(seed)
    quiet_transformers()
    with phase_status("checking the output folder") as status:
        outcome = verify_pair(request, results_dir, on_status=status)
    if as_json:
        out.print_json(outcome.json_path.read_text())
    else:
        print_checks(request, outcome)
    if not outcome.passed:
        raise typer.Exit(1)


MAX_SAMPLES = 1_000_000  # continuations per engine: a few thousand reach power 0.8; a million already takes days
MAX_LENGTH = 64  # tokens per continuation: the tests compare the first few; more only lengthens every decode


def check_sizes(n_samples: int | None, length: int) -> None:
    """A sample count or length no check could finish is refused with the options (issue 41: --n-samples 10**15
    and --length 10**9 ran until killed)."""
    if n_samples is not None and n_samples > MAX_SAMPLES:
        raise SpecbenchError(f"--n-samples must be <= {MAX_SAMPLES:,} (got {n_samples:,}); lower it")
    if length > MAX_LENGTH:
        raise SpecbenchError(f"--length must be <= {MAX_LENGTH} (got {length:,}); the tests compare the first tokens")


def print_checks(request, outcome) -> None:
    s = request.sampling
    on = "" if request.engine == DEFAULT_ENGINE else f" on {request.engine}"
    pair = f"{request.load.target} + {request.draft}{on}"
    exact = ", --bit-exact" if request.bit_exact else ""
    table = Table(title=f"verify: {pair}, T={s.temperature:g}, top-k {s.top_k}, top-p {s.top_p:g}{exact}")
    for col in TABLE_COLUMNS:
        table.add_column(col, justify="left" if col == "check" else "right", no_wrap=col == "check")
    for c in outcome.checks:
        table.add_row(
            c.name,
            fmt(c.statistic, 4),
            fmt(c.p_value, 4),
            fmt(c.n),
            fmt(c.threshold, 4),
            fmt(c.power, 3),
            f"[{VERDICT_STYLE[c.verdict]}]{c.verdict_text()}[/{VERDICT_STYLE[c.verdict]}]",
        )
    out.print(table)
    counts = {v: sum(c.verdict == v for c in outcome.checks) for v in VERDICT_STYLE}
    out.print(
        f"{len(outcome.checks)} checks: {counts['pass']} pass, {counts['fail']} fail, {counts['inconclusive']} "
        f"inconclusive (power < 0.8 against total variation {request.alt_tv:g} on the tested law)",
        highlight=False,
    )
    for c in outcome.checks:
        if c.kind == "identity" and c.detail.get("identity_line"):  # --bit-exact: run --bit-exact's own line
            out.print(f"{c.name}: {c.detail['identity_line']}", highlight=False)
        elif c.kind == "identity" and c.detail.get("divergences"):
            d = c.detail
            out.print(
                f"{c.name}: {c.n - len(d['divergences'])}/{c.n} identical; {len(d['divergences'])} diverged: "
                f"{d.get('numerics', 0)} numerics (a near-tie the verify-shaped pass flips by itself), "
                f"{d.get('unexplained', 0)} unexplained",
                highlight=False,
            )
        past = c.detail.get("past_divergence") if c.kind == "identity" else None
        if past:  # every position, teacher-forced along the baseline (evidence/greedy_identity.past_divergence)
            out.print(
                f"{c.name} past the first divergence: {past['positions']} positions compared, {past['divergences']} "
                f"diverged: {past['explained']} numerics, {past['unexplained']} unexplained"
                + (" (bit-exact mode: every pass a one-token step)" if c.detail.get("mode") == "bit-exact" else ""),
                highlight=False,
            )
    if outcome.taught:
        out.print(
            f"{request.draft} learns from earlier outputs: before the checks it decoded {outcome.taught} other "
            f"examples of the task greedily (every verify pass handed over, each output remembered), so the checks "
            f"test its proposals with what it learnt, fixed (the checks hand it no passes)",
            highlight=False,
        )
    out.print(f"checks: {outcome.json_path}")

"""Shared `Annotated` option aliases: one definition (flag name and help) per option.

run, sweep, verify and distill share most of their options; defining each once keeps their
names and help texts from drifting apart. Defaults stay at the command, where a reader of
that command looks for them. An option with a fixed set of values is a `Literal`: click lists
the choices in `--help`, completes them in the shell and refuses anything else (exit code 2).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

import typer

from specbench.engines import ENGINES, engine_names, verify_engines

DEFAULT_TASK = "ding-de-en"


def engines_help(names: tuple[str, ...]) -> str:
    """`--engine`'s help, one clause per registered engine (engines/registry.py)."""
    return "; ".join(f"{name}: {ENGINES[name].summary}" for name in names) + " (`specbench list engines`)."


def one_of(names: tuple[str, ...]):
    """A check for an option whose values come from a registry: case-insensitive, anything else a usage error
    (exit 2) that lists the values, as click's Choice does for a Literal. A callback, not a parser: click turns a
    BadParameter raised there into its one-line usage error."""

    def check(value: str) -> str:
        if value.lower() in names:
            return value.lower()
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(names)}.")

    return check


def engine_option(names: tuple[str, ...], purpose: str):
    """`--engine` taking one of `names` (the registry's, or the subset a command runs on), each listed in --help."""
    return typer.Option(
        "--engine", callback=one_of(names), metavar="[" + "|".join(names) + "]", help=f"{purpose} {engines_help(names)}"
    )


Engine = Annotated[str, engine_option(engine_names(), "The engine that decodes both arms.")]
VerifyEngine = Annotated[str, engine_option(verify_engines(), "The engine whose passes the checks run on.")]
Engines = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Engines, comma-separated, of " + ", ".join(engine_names()) + ". Several make an axis: does a speedup "
        "carry from one engine to another (`specbench list engines`).",
    ),
]

Target = Annotated[
    str,
    typer.Option(
        "--target", "--model", help="Target model: preset, hub id, local dir or .gguf file (--model: vLLM's name)."
    ),
]
Draft = Annotated[
    str,
    typer.Option(
        "--draft",
        help="Draft: a model spec as for --target, prompt-lookup, tree-lookup, suffix, lookahead, unigram, bigram, "
        "lookup+<model spec>, or auto (the fastest available for the target, measured here).",
    ),
]
Gamma = Annotated[
    str,
    typer.Option(
        "--gamma",
        "--num-speculative-tokens",
        help="Draft tokens per target pass (--num-speculative-tokens: vLLM's name for a fixed γ): an integer "
        ">= 1; auto (the best γ "
        "predicted from this machine's calibrated pass costs and a pilot's α); adaptive (each "
        "step's γ from the example's running α and the same costs); heuristic (HF's +2/−1 schedule).",
    ),
]
GammaMax = Annotated[int, typer.Option("--gamma-max", help="Largest γ that auto, adaptive and heuristic consider.")]
Repeats = Annotated[
    int,
    typer.Option(
        "--repeats",
        help="Timed decodes per engine and example, interleaved A B B A; "
        "times are their medians (2 cancels drift between the engines).",
    ),
]
Temperature = Annotated[float, typer.Option("--temperature", help="0 = greedy; > 0 samples.")]
TopK = Annotated[int, typer.Option("--top-k", help="Keep the k most likely tokens (0 = off).")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus mass in (0, 1] (1 = off).")]
Task = Annotated[
    str, typer.Option("--task", help='Task name (see `specbench list tasks`) or a JSONL file of {"prompt": ...}.')
]
Limit = Annotated[int, typer.Option("--limit", help="Number of examples.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed for example choice and sampling.")]
MaxNew = Annotated[Optional[int], typer.Option("--max-new-tokens", help="Tokens to generate (default: the task's).")]
Device = Annotated[
    Literal["auto", "cpu", "cuda", "mps"],
    typer.Option("--device", case_sensitive=False, help="Where the models run (auto: cuda, else mps, else cpu)."),
]
Dtype = Annotated[
    Literal["float32", "bfloat16", "float16", "auto"],
    typer.Option(
        "--dtype",
        case_sensitive=False,
        help="float32, bfloat16, float16, or auto (float32 vs bfloat16 "
        "where the hardware has native bf16, chosen by calibrated speed; printed, never silent).",
    ),
]
Backend = Annotated[
    Literal["eager", "static", "compiled"],
    typer.Option(
        "--backend",
        case_sensitive=False,
        help="How every model's forward runs: eager (dynamic KV cache), "
        "static (preallocated KV cache) or compiled (static + torch.compile; CUDA graphs on a GPU).",
    ),
]
DraftConfidence = Annotated[
    float,
    typer.Option(
        "--draft-confidence",
        help="A model draft stops a proposal early once its probability of the token it just "
        "drafted is below this (γ stays the most; 0 = always γ). Exact either way; "
        "as HF's assistant_confidence_threshold.",
    ),
]
BatchSize = Annotated[
    int,
    typer.Option(
        "--batch-size",
        help="Examples decoded together, in the task's seeded order "
        "(left-padded, each row stopping on its own; 1 = one at a time). Larger than "
        "the examples is refused; at > 1 γ must be an integer.",
    ),
]
BatchPolicy = Annotated[
    Literal["ragged", "min"],
    typer.Option(
        "--batch-policy",
        case_sensitive=False,
        help="At --batch-size > 1: ragged (each row keeps its own "
        "accepted prefix) or min (every row advances by the batch's minimum; an ablation).",
    ),
]
PromptLength = Annotated[
    Literal["all", "short", "medium", "long"],
    typer.Option(
        "--prompt-length",
        case_sensitive=False,
        help="all (every example; the default), or short, "
        "medium or long: the first --limit examples whose prompt falls in that "
        "tertile of the task's prompt tokens under the target's tokenizer.",
    ),
]
Concurrency = Annotated[
    Optional[int],
    typer.Option(
        "--concurrency",
        help="Serve the run's examples as one load (--engine vllm): at most this many requests in flight, the next "
        "submitted as soon as one finishes; both arms get the same prompts, order and schedule (docs/run.md).",
    ),
]
RequestRate = Annotated[
    Optional[str],
    typer.Option(
        "--request-rate",
        help="With --concurrency: requests arrive as a Poisson process at this many per second (seeded by --seed); "
        "inf (the default) submits them all at once up to the cap.",
    ),
]
SloTpotMs = Annotated[
    float,
    typer.Option(
        "--slo-tpot-ms",
        help="Goodput's latency bound for a load run: a request counts when its time per output token after the "
        "first is at most this many ms.",
    ),
]
ResultsDir = Annotated[
    str, typer.Option("--results-dir", help="Where run folders are written.")
]  # str: '' must reach config.check_results_dir (a Path would be '.')
AsJson = Annotated[bool, typer.Option("--json", help="Print the result as JSON (for machines).")]
TrustRemote = Annotated[bool, typer.Option("--trust-remote-code", help="Allow model repos to run their own code.")]
DeviceMap = Annotated[
    Optional[str],
    typer.Option(
        "--device-map",
        help="Place the target over several devices with accelerate: auto, balanced, balanced_low_0, "
        'sequential, or JSON {"module prefix": device} (device: GPU index, cpu, mps or disk). Decoder-only targets.',
    ),
]
MaxMemory = Annotated[
    Optional[str],
    typer.Option(
        "--max-memory", help="Per-device caps for --device-map: 0=20GiB,1=20GiB,cpu=60GiB (or the same as JSON)."
    ),
]
Executor = Annotated[
    Literal["local", "ray"],
    typer.Option(
        "--executor",
        case_sensitive=False,
        help="Where sweep cells run: local (here, one after another) or "
        "ray (each cell on a Ray worker; pip install specbench-sd[ray]).",
    ),
]
Address = Annotated[
    Optional[str],
    typer.Option(
        "--address",
        help="--executor ray: the cluster, auto (the one `ray start` made on this machine) or "
        "ray://host:port / host:port (default: a one-node cluster started for this sweep).",
    ),
]
GpusPerCell = Annotated[
    float,
    typer.Option(
        "--gpus-per-cell", help="--executor ray: GPUs each cell's worker holds (0 = CPU only; fractions share a GPU)."
    ),
]
CpusPerCell = Annotated[
    float,
    typer.Option(
        "--cpus-per-cell", help="--executor ray: CPUs each cell's worker holds (Ray sets its torch threads to match)."
    ),
]

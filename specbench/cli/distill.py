"""`specbench distill`: train a small draft for a target from the target's own distributions.

specbench.distill (teacher data, training, export) is imported only when this command runs:
every other command starts without the trainer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from specbench.cli.options import AsJson, Device, Target
from specbench.cli.output import options_checked, out, progress_bar, quiet_transformers
from specbench.config import DEVICES, check_seed
from specbench.errors import SpecbenchError
from specbench.models import DEFAULT_TARGET
from specbench.tasks.specs import check_task_named

if TYPE_CHECKING:  # the trainer imports torch: loaded once the options are checked
    from specbench.distill.pipeline import Outcome

DraftDir = Annotated[
    str,  # not Path: typer would turn an empty --out into "." (the current folder)
    typer.Option(
        "--out",
        metavar="PATH",
        show_default=False,
        help="Folder of the draft: model, tokenizer, manifest.json (work/ holds teacher data and the checkpoint).",
    ),
]
Preset = Annotated[
    str,
    typer.Option("--preset", help="small (tests, about a minute) or full (the shipped draft, hours on a 2-core CPU)."),
]
Steps = Annotated[Optional[int], typer.Option("--steps", help="Training steps (default: the preset's).")]
DistillSeed = Annotated[int, typer.Option("--seed", help="Seed for the draft's initialisation and the data order.")]
TeacherTasks = Annotated[
    str, typer.Option("--task", help="Tasks whose text the target scores, comma-separated (names or JSONL files).")
]
Resume = Annotated[
    bool, typer.Option("--resume", help="Require a checkpoint in --out (one is always resumed when present).")
]
SessionSteps = Annotated[
    Optional[int],
    typer.Option("--max-session-steps", help="Stop after this many steps (checkpointed); rerun to continue."),
]
Threads = Annotated[int, typer.Option("--threads", help="torch CPU threads (0 = torch's default).")]
Kind = Annotated[
    str,
    typer.Option(
        "--kind",
        help="draft (a small model sharing the tokenizer), eagle (an EAGLE head on the target's final hidden state, "
        "vLLM's eagle layout: --draft eagle:<out>) or eagle3 (an EAGLE-3 head on three of its layers' outputs, "
        "vLLM's eagle3 layout: --draft eagle3:<out>); docs/distill.md.",
    ),
]

TeacherDtype = Annotated[
    str,
    typer.Option(
        "--teacher-dtype",
        help="The target's dtype while it makes the teacher data: float32, or bfloat16 (its labels are then the bf16 "
        "target's; 1.6x faster generation, 2.8x faster scoring on a 2-core AMD EPYC with avx512_bf16: "
        "docs/distill.md). Training is float32 either way.",
    ),
]

TrainDtype = Annotated[
    str,
    typer.Option(
        "--train-dtype",
        help="A head's training step: float32, or bfloat16 (autocast: bf16 matmuls, float32 weights and laws; its "
        "output-layer KL 1.9x faster on a 2-core AMD EPYC with avx512_bf16: docs/distill.md). Held-out checks run in "
        "float32.",
    ),
]

Unroll = Annotated[
    int,
    typer.Option(
        "--unroll",
        help="An EAGLE-3 head's training-time test: train it chained this many steps, each fed its own previous "
        "output as it is while drafting (EAGLE-3's; 1: the first drafted token only). Each step runs the head N times.",
    ),
]

DraftVocab = Annotated[
    Optional[int],
    typer.Option(
        "--draft-vocab",
        help="Export an EAGLE-3 head over this many target ids only (EAGLE-3's reduced draft vocabulary, with its d2t "
        "map): the ids the target most often predicts in the training documents. Its output layer shrinks to those "
        "rows; training is unchanged, so rerunning a finished folder with it only re-exports.",
        show_default=False,
    ),
]

PHASE_NAMES = {"teacher": "teacher data (shards)", "train": "training (steps)", "export": "export + checks"}


def distill_command(
    out_dir: DraftDir,
    target: Target = DEFAULT_TARGET,
    preset: Preset = "full",
    steps: Steps = None,
    seed: DistillSeed = 0,
    task: TeacherTasks = "ding-de-en,aclsum",
    resume: Resume = False,
    max_session_steps: SessionSteps = None,
    device: Device = "auto",
    threads: Threads = 0,
    kind: Kind = "draft",
    teacher_dtype: TeacherDtype = "float32",
    train_dtype: TrainDtype = "float32",
    unroll: Unroll = 1,
    draft_vocab: DraftVocab = None,
    as_json: AsJson = False,
):
    """Train a small draft for --target by distillation from the target's top-k distributions; resumable.

    Example: specbench distill --target smollm2-135m --out drafts/smollm2-135m-distilled --preset full

    Example: specbench distill --kind eagle --target smollm2-135m --out drafts/smollm2-135m-eagle --preset full
    """
    from specbench.distill import DistillConfig, get_preset

    with options_checked():  # what these checks refuse is a bad command line (exit code 2)
        if threads < 0:
            raise SpecbenchError(f"--threads must be >= 0 (got {threads})")
        check_seed(seed)
        if not out_dir.strip():
            raise SpecbenchError("--out is empty; pass the draft's folder")
        if device not in DEVICES:  # as run and verify refuse it, before the trainer loads
            raise SpecbenchError(f"--device must be one of {', '.join(DEVICES)} (got {device!r})")
        out_path = Path(out_dir)
        config = DistillConfig(
            target=target,
            out=out_path,
            preset=get_preset(preset, kind),
            tasks=tuple(t.strip() for t in task.split(",") if t.strip()),
            steps=steps,
            seed=seed,
            device=device,
            resume=resume,
            max_session_steps=max_session_steps,
            teacher_dtype=teacher_dtype,
            train_dtype=train_dtype,
            unroll=unroll,
            draft_vocab=draft_vocab,
        ).validate()
        for name in config.tasks:
            check_task_named(name)  # a misspelt --task or a missing file: a bad command line, before the target loads
    if threads:
        import torch

        torch.set_num_threads(threads)
    quiet_transformers()
    outcome = distill_with_progress(config)
    if as_json:
        out.print_json(json.dumps(outcome.manifest, default=str))
    else:
        out.print(outcome_line(outcome, out_path, config.kind), highlight=False)


def distill_with_progress(config) -> Outcome:
    """The trainer under one progress bar per phase (teacher data, training, export)."""
    from specbench.distill import distill as run_distill

    with progress_bar() as bar:
        jobs: dict[str, int] = {}

        def on_event(event) -> None:
            if event.phase not in jobs:
                jobs[event.phase] = bar.add_task(PHASE_NAMES.get(event.phase, event.phase), total=event.total, info="")
            bar.update(jobs[event.phase], completed=event.done, total=event.total, info=event.info)  # type: ignore[arg-type]  # rich's TaskID is an int NewType

        return run_distill(config, progress=on_event)


def outcome_line(outcome, out_dir: Path, kind: str = "eagle") -> str:
    if not outcome.finished:
        steps = outcome.manifest["steps"]
        return f"stopped at step {steps['done']} of {steps['total']} (checkpointed); rerun the same command to continue"
    checks = outcome.manifest["checks"]
    if checks.get("cost") is None:  # an EAGLE head: run --draft eagle:<out> times it
        agreement = checks["heldout_after_export"]["agreement_reply"]
        tasks = ", ".join(f"{t} {ev['agreement_reply']:.3f}" for t, ev in (checks.get("heldout_by_task") or {}).items())
        chained = checks["heldout_after_export"].get("agreement_chained")  # EAGLE-3 heads
        second = f", its second chained token's {chained:.3f}" if chained is not None else ""
        tasks = f": {tasks}" if tasks else ""
        vocab = checks.get("draft_vocab") or {}  # --draft-vocab N
        cover = vocab.get("coverage_reply")
        over = f" over {vocab['size']} ids" if vocab else ""
        over += f" (held-out reply coverage {cover:.3f})" if cover is not None else ""
        return (
            f"{kind} head{over}: {out_dir}  (held-out top-1 agreement {agreement:.3f}{tasks}{second}, "
            f"α(γ={checks['speculative']['gamma']}) = {checks['speculative']['alpha']:.3f}; manifest.json; "
            f"--draft {kind}:{out_dir})"
        )
    return (
        f"draft: {out_dir}  (c = {checks['cost']['c']:.3f}, "
        f"held-out α≈{checks['heldout_after_export']['agreement_reply']:.3f}, "
        f"α(γ={checks['speculative']['gamma']}) = {checks['speculative']['alpha']:.3f}; manifest.json)"
    )

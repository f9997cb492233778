"""What decides a distillation run: the presets (data, draft architecture, training, checks), one
invocation's settings, and the progress events the pipeline reports."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from specbench.config import DTYPES
from specbench.errors import SpecbenchError

DEFAULT_TASKS = ("ding-de-en", "aclsum")
WORK = "work"  # DIR/work holds the teacher data and the checkpoint; never shipped


@dataclass(frozen=True)
class DistillPreset:
    """Everything that decides the data, the draft and the training, under one name."""

    name: str
    # data
    heldout_rows: int  # held-out prompts per task: the first the runner picks with --seed 0
    exclude_seeds: int  # never train on what `specbench run --seed 0..exclude_seeds-1 ...` picks
    exclude_limit: int  # ... with --limit up to this
    max_train_rows: int | None  # training rows per task (None: all), taken in a fixed hashed order
    max_new_tokens: int | None  # cap on the task's max_new_tokens for on-policy continuations
    reference_docs: bool  # also score the human reference reply after each prompt
    sampled_docs: bool  # also continue each prompt with a T = 1 sample from the target
    top_k: int  # soft-label width: teacher log-probs kept per position
    job_tokens: int  # prompt+reference tokens per teacher batch (memory and padding)
    gen_batch: int  # most rows per teacher batch
    # draft architecture (LlamaForCausalLM, tied embeddings)
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    svd_init: bool  # start the embedding from the target's output embedding on its top principal directions
    # training
    steps: int
    batch_tokens: int  # padded input tokens per step
    max_len: int  # documents are cut to this many tokens
    lr: float
    warmup: int
    weight_decay: float
    eval_every: int
    checkpoint_every: int
    save_dtype: str  # dtype of the exported safetensors
    # final checks
    c_reps: int  # interleaved timing repetitions for c
    check_prompts: int  # held-out prompts decoded speculatively at T = 0 to measure α
    check_gamma: int


PRESETS: dict[str, DistillPreset] = {
    # Tests and smoke runs: a few rows, a tiny draft, ~1 minute even on the real target.
    "small": DistillPreset(
        name="small",
        heldout_rows=3,
        exclude_seeds=1,
        exclude_limit=3,
        max_train_rows=12,
        max_new_tokens=8,
        reference_docs=True,
        sampled_docs=True,
        top_k=8,
        job_tokens=512,
        gen_batch=8,
        layers=2,
        hidden=32,
        intermediate=64,
        heads=4,
        kv_heads=2,
        svd_init=True,
        steps=24,
        batch_tokens=256,
        max_len=512,
        lr=3e-3,
        warmup=4,
        weight_decay=0.01,
        eval_every=8,
        checkpoint_every=8,
        save_dtype="float32",
        c_reps=2,
        check_prompts=2,
        check_gamma=3,
    ),
    # The shipped draft: all rows of the offline tasks (~1.2M teacher positions for SmolLM2) and a 3-layer
    # width-128 draft. Its cost is the 49k × 128 head plus ~0.3 ms of overhead per layer, while FFN width
    # is nearly free: c = 0.044 against SmolLM2 on one CPU thread (4 layers: 0.048-0.050; 2: 0.035);
    # 7.6M parameters, 15.2 MB in fp16. No T = 1 sampled continuations and 3,000 steps: with them and
    # 4,000 steps the build took ~3.4 h on this 2-core CPU; the default runs are greedy, where the
    # greedy continuations are exactly what gets drafted.
    "full": DistillPreset(
        name="full",
        heldout_rows=48,
        exclude_seeds=4,
        exclude_limit=128,
        max_train_rows=None,
        max_new_tokens=None,
        reference_docs=True,
        sampled_docs=False,
        top_k=32,
        job_tokens=3072,
        gen_batch=64,
        layers=3,
        hidden=128,
        intermediate=1024,
        heads=4,
        kv_heads=2,
        svd_init=True,
        steps=3000,
        batch_tokens=4096,
        max_len=512,
        lr=2e-3,
        warmup=100,
        weight_decay=0.01,
        eval_every=100,
        checkpoint_every=50,
        save_dtype="float16",
        c_reps=5,
        check_prompts=8,
        check_gamma=3,
    ),
}


# --kind: a small draft model, an EAGLE head on the target's final hidden state, or an EAGLE-3 head on three of its
# layers' outputs fused (models/eagle3_head.py)
KINDS = ("draft", "eagle", "eagle3")
HEAD_KINDS = ("eagle", "eagle3")  # the kinds that train a head on the target's own features


@dataclass(frozen=True)
class EaglePreset(DistillPreset):
    """An EAGLE head's preset (--kind eagle): the same data and training fields; the head's shape is the target's
    (`head_layers` of its decoder layers and fc [H, 2H]), so the draft-architecture fields above are unused (0)."""

    head_layers: int = 1  # decoder layers in the head (EAGLE: 1; vLLM's eagle method builds any number)
    reg_weight: float = 1.0  # smooth-L1 regression of the next position's hidden state (EAGLE's feature loss)
    kl_weight: float = 0.1  # KL(teacher top-k || lm_head(predicted hidden)) (EAGLE's classification loss weight)
    # "final": EAGLE-1 (vLLM's eagle) on the final hidden state; "fused": EAGLE-3 (vLLM's eagle3) on three layers'
    # outputs, trained on the KL alone through its own output layer (reg_weight and head_layers unused)
    features: str = "final"


_NO_DRAFT = {"layers": 0, "hidden": 0, "intermediate": 0, "heads": 0, "kv_heads": 0, "svd_init": False}

EAGLE_PRESETS: dict[str, EaglePreset] = {
    # Tests and smoke runs: the small draft preset's data, a few steps.
    "small": EaglePreset(
        **(dataclasses.asdict(PRESETS["small"]) | _NO_DRAFT | {"name": "small", "lr": 2e-3, "save_dtype": "float32"})
    ),
    # The full head for SmolLM2-135M: the full draft preset's data (~810k teacher positions, their hidden states in
    # fp16: ~0.9 GB), two epochs of 4,096-token batches (each step: one head layer forward and backward, and the
    # 49k-wide output layer forward and backward for the KL); docs/distill.md has the time estimate.
    "full": EaglePreset(
        **(
            dataclasses.asdict(PRESETS["full"])
            | _NO_DRAFT
            | {"name": "full", "steps": 600, "lr": 1e-3, "warmup": 30, "eval_every": 50, "checkpoint_every": 25}
        )
    ),
}

# The same data and schedules with EAGLE-3's fused features (vLLM's eagle3 layout; --kind eagle3). KL weight 1.0: the
# loss is the KL alone (EAGLE-3 drops the feature regression), so its weight only scales the learning rate's effect.
EAGLE3_PRESETS: dict[str, EaglePreset] = {
    name: dataclasses.replace(p, features="fused", reg_weight=0.0, kl_weight=1.0) for name, p in EAGLE_PRESETS.items()
}


def get_preset(name: str, kind: str = "draft") -> DistillPreset:
    if kind not in KINDS:
        raise SpecbenchError(f"unknown distill kind {kind!r}; use one of {', '.join(KINDS)}")
    presets: Mapping[str, DistillPreset] = {"eagle": EAGLE_PRESETS, "eagle3": EAGLE3_PRESETS}.get(kind, PRESETS)
    if name not in presets:
        raise SpecbenchError(f"unknown distill preset {name!r}; use one of {', '.join(presets)}")
    return presets[name]


TRAIN_DTYPES = ("float32", "bfloat16")  # bf16: autocast (a head's output-layer KL 1.9x faster: docs/distill.md)


@dataclass(frozen=True)
class DistillConfig:
    """One `specbench distill` invocation."""

    target: str  # model spec, as for `specbench run --target`
    out: Path  # the draft's folder (model, tokenizer, manifest.json; work/ for data and checkpoint)
    preset: DistillPreset
    tasks: tuple[str, ...] = DEFAULT_TASKS
    steps: int | None = None  # None: the preset's
    seed: int = 0
    device: str = "auto"
    resume: bool = False  # insist on an existing checkpoint (a checkpoint is always resumed when present)
    max_session_steps: int | None = None  # stop (checkpointed) after this many steps in this invocation
    teacher_dtype: str = "float32"  # the target's dtype while it scores and continues the text (training: float32)
    train_dtype: str = "float32"  # a head's training matmuls: bfloat16 runs them under autocast (weights stay float32)
    unroll: int = 1  # an EAGLE-3 head's chained training steps (EAGLE-3's training-time test; 1: the first only)
    draft_vocab: int | None = None  # an EAGLE-3 head exported over this many target ids (None: all); not trained on

    @property
    def kind(self) -> str:
        """ "draft" (a small LlamaForCausalLM), "eagle" or "eagle3" (a head: distill/eagle_training.py), by preset."""
        if not isinstance(self.preset, EaglePreset):
            return "draft"
        return "eagle3" if self.preset.features == "fused" else "eagle"

    @property
    def total_steps(self) -> int:
        return self.steps if self.steps is not None else self.preset.steps

    def validate(self) -> DistillConfig:
        if self.total_steps < 1:
            raise SpecbenchError(f"--steps must be >= 1 (got {self.total_steps})")
        if self.max_session_steps is not None and self.max_session_steps < 1:
            raise SpecbenchError(f"--max-session-steps must be >= 1 (got {self.max_session_steps})")
        if not self.tasks:
            raise SpecbenchError("--task needs at least one task name or .jsonl file")
        if self.teacher_dtype not in DTYPES:  # the dtypes `run --dtype` loads a target in
            raise SpecbenchError(f"--teacher-dtype must be one of {', '.join(DTYPES)} (got {self.teacher_dtype!r})")
        if self.train_dtype not in TRAIN_DTYPES:
            raise SpecbenchError(f"--train-dtype must be one of {', '.join(TRAIN_DTYPES)} (got {self.train_dtype!r})")
        if self.train_dtype != "float32" and self.kind not in HEAD_KINDS:
            raise SpecbenchError(
                f"--train-dtype {self.train_dtype} trains a head (--kind eagle or eagle3); a draft trains in float32"
            )
        if self.unroll < 1:
            raise SpecbenchError(f"--unroll must be >= 1 (got {self.unroll})")
        if self.unroll > 1 and self.kind != "eagle3":
            raise SpecbenchError(f"--unroll {self.unroll} chains an EAGLE-3 head's training steps: use --kind eagle3")
        if self.draft_vocab is not None and (self.draft_vocab < 1 or self.kind != "eagle3"):
            raise SpecbenchError(
                f"--draft-vocab {self.draft_vocab}: a reduced draft vocabulary is an EAGLE-3 head's; "
                "use --kind eagle3 and a size >= 1"
            )
        if self.preset.save_dtype not in ("float32", "float16", "bfloat16"):
            raise SpecbenchError(f"preset {self.preset.name}: save_dtype must be float32, float16 or bfloat16")
        return self

    def command(self) -> str:
        """The command line that rebuilds this draft from nothing."""
        kind = f" --kind {self.kind}" if self.kind in HEAD_KINDS else ""  # a draft's reads as before kinds existed
        return (
            f"specbench distill{kind} --target {self.target} --out {self.out} --preset {self.preset.name} "
            f"--task {','.join(self.tasks)} --steps {self.total_steps} --seed {self.seed}"
            + (f" --teacher-dtype {self.teacher_dtype}" if self.teacher_dtype != "float32" else "")
            + (f" --train-dtype {self.train_dtype}" if self.train_dtype != "float32" else "")
            + (f" --unroll {self.unroll}" if self.unroll != 1 else "")
            + (f" --draft-vocab {self.draft_vocab}" if self.draft_vocab is not None else "")
        )

    def training_key(self) -> dict:
        """What must match for a checkpoint to be resumed (the step count may grow)."""
        key = {
            "target": self.target,
            "tasks": list(self.tasks),
            "seed": self.seed,
            "preset": {k: v for k, v in dataclasses.asdict(self.preset).items() if k != "steps"},
        }
        for name in ("teacher_dtype", "train_dtype"):  # a float32 run's key is as before these options existed
            key |= {name: getattr(self, name)} if getattr(self, name) != "float32" else {}
        key |= {"unroll": self.unroll} if self.unroll != 1 else {}  # likewise
        return key | ({"kind": self.kind} if self.kind in HEAD_KINDS else {})  # a draft's key as before kinds existed


@dataclass
class Event:
    """A progress report: phase 'teacher' (done/total shards), 'train' (done/total steps) or 'export' (0/1, 1/1)."""

    phase: str
    done: int
    total: int
    info: str = ""  # one short human line: loss, held-out agreement, throughput


Progress = Callable[[Event], None]

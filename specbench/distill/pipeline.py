"""`distill()`: the three stages in order, each resumed from what is on disk.

DIR/work/teacher holds the teacher shards (a rerun runs only the missing ones), DIR/work/checkpoint.pt
the training state (a rerun continues from it), and DIR/manifest.json says how far the run got: "training"
after every checkpoint, "done" once the draft is exported and checked.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specbench.distill.save_draft import build_manifest, export_draft, final_checks
from specbench.distill.settings import HEAD_KINDS, WORK, DistillConfig, Event, Progress
from specbench.distill.shards import TeacherData, load_teacher_data
from specbench.distill.teacher import build_teacher_data
from specbench.distill.training import (
    Schedule,
    checkpoint_path,
    evaluate,
    load_checkpoint,
    lr_at,
    make_batch,
    make_optimizer,
    new_draft,
    save_checkpoint,
    train_step,
)
from specbench.errors import SpecbenchError, UsageError
from specbench.files import atomic_write_json

if TYPE_CHECKING:  # --kind eagle's trainer, imported when a run needs it
    from specbench.distill.eagle_training import EagleTrainer


@dataclass
class Outcome:
    manifest: dict
    finished: bool  # False when this session stopped early (--max-session-steps); rerun to continue


def distill(
    cfg: DistillConfig, progress: Progress = lambda e: None, on_step: Callable[[int], None] | None = None
) -> Outcome:
    """Build (or resume) the teacher data, train (or resume) the draft, export and check it.

    `on_step(step)` runs after every optimizer step (tests use it to simulate a kill).
    """
    cfg = cfg.validate()
    check_out_folder(cfg.out)
    with _removed_if_left_empty(cfg.out):
        ckpt = _open_checkpoint(cfg)
        t_start = time.perf_counter()
        target = _load_target(cfg, "float32")
        if cfg.draft_vocab is not None and cfg.draft_vocab > target.vocab_size:
            raise UsageError(
                f"--draft-vocab {cfg.draft_vocab} exceeds the target's {target.vocab_size} ids; pass a smaller size"
            )
        teacher = target if cfg.teacher_dtype == "float32" else _load_target(cfg, cfg.teacher_dtype)
        index = build_teacher_data(cfg, teacher, progress)
        del teacher
        run = TrainingRun(cfg, target, index, _load_teacher(index, target), ckpt)
        if not run.train(progress, on_step):
            return Outcome(run.checkpoint(), finished=False)
        return _export_and_check(run, progress, t_start)


def is_distill_manifest(path: Path) -> bool:
    """Whether `path` is the manifest.json a distillation writes (its command is `specbench distill ...`)."""
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(doc, dict) and str(doc.get("command", "")).startswith("specbench distill ")


def check_out_folder(out: Path) -> None:
    """Refuse an --out that holds anything but a distillation: distill writes manifest.json, config.json and the
    model there, and would replace a benchmark run's manifest (or any other folder's files) with its own."""
    if out.exists() and not out.is_dir():
        raise SpecbenchError(f"--out {out} is not a folder; pass a new or empty folder for the draft")
    if not out.exists() or not any(out.iterdir()):
        return
    manifest = out / "manifest.json"
    if manifest.exists() or manifest.is_symlink():
        if not manifest.is_symlink() and is_distill_manifest(manifest):
            return
        raise SpecbenchError(
            f"--out {out} holds a manifest.json that is not a distillation's (a benchmark run?); "
            "distill would replace it: pass a new or empty folder"
        )
    if not (out / WORK).is_dir():
        raise SpecbenchError(
            f"--out {out} is not empty and holds no distillation (no {WORK}/ or manifest.json); "
            "pass a new or empty folder"
        )


@contextlib.contextmanager
def _removed_if_left_empty(out: Path):
    """On any failure (a refusal, Ctrl-C), remove the folders this call created that are still empty
    (out/work/teacher, out/work, out and any parent it made): a refused distill leaves nothing behind. rmdir
    never removes a file or a folder that holds one."""
    teacher = out / WORK / "teacher"
    made = [p for p in (teacher, *teacher.parents) if not p.exists()]  # parents too: --out new/deeper/d
    try:
        yield
    except BaseException:
        for folder in made:  # innermost first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _open_checkpoint(cfg: DistillConfig) -> dict | None:
    """Make DIR/work; the checkpoint there, when there is one and it was made with these settings."""
    out = cfg.out
    try:
        (out / WORK).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecbenchError(f"cannot write to {out}: {exc.strerror}; pass a writable --out") from exc
    path = checkpoint_path(out)
    ckpt = load_checkpoint(path) if path.exists() else None
    if cfg.resume and ckpt is None:
        raise SpecbenchError(f"--resume: no checkpoint in {out / WORK}; drop --resume to start a new run there")
    if ckpt is not None and ckpt["key"] != json.loads(json.dumps(cfg.training_key())):
        raise SpecbenchError(
            f"{out} holds a run with other settings (target, tasks, seed, preset or teacher dtype); "
            f"use a new --out, or the settings in {out / 'manifest.json'}"
        )
    return ckpt


def _load_target(cfg: DistillConfig, dtype: str):
    """The target in `dtype`: float32 for training (its frozen embedding and output layer, the held-out checks),
    --teacher-dtype for the teacher data."""
    from specbench.models import load_model

    target = load_model(cfg.target, cfg.device, dtype)
    if target.is_seq2seq:
        raise SpecbenchError(f"distill trains decoder-only drafts; {cfg.target} is an encoder-decoder model")
    return target


def _load_teacher(index: dict, target) -> TeacherData:
    data = load_teacher_data(index)
    if data.topk_idx.shape[0] and int(data.topk_idx.max()) >= target.vocab_size:
        raise SpecbenchError("teacher data holds ids beyond the target's vocabulary; delete DIR/work/teacher")
    return data


class TrainingRun:
    """The draft, its optimizer and where training stands (from the checkpoint when there is one)."""

    def __init__(self, cfg: DistillConfig, target, index: dict, data: TeacherData, ckpt: dict | None):
        p = cfg.preset
        self.cfg, self.target, self.index, self.data = cfg, target, index, data
        self.device = target.device
        self.train_docs = torch.nonzero(~data.heldout).view(-1)
        self.heldout_docs = torch.nonzero(data.heldout).view(-1).tolist()
        self.pad_id = target.pad_id
        self.trainer: EagleTrainer | None = None  # --kind eagle: the head's loss and evaluation (eagle_training.py)
        if cfg.kind in HEAD_KINDS:
            from specbench.distill.eagle_training import EagleTrainer, make_head_optimizer, new_eagle_head
            from specbench.models import TORCH_DTYPES

            self.model = new_eagle_head(target, cfg.seed, p).to(self.device)
            autocast = None if cfg.train_dtype == "float32" else TORCH_DTYPES[cfg.train_dtype]
            self.trainer = EagleTrainer(self.model, target, p, data, autocast, cfg.unroll)
            self.opt = make_head_optimizer(self.model, p)
        else:
            self.model = new_draft(p, target, cfg.seed).to(self.device)
            self.opt = make_optimizer(self.model, p)
        self.step, self.seconds = 0, 0.0
        self.curve: list[list] = []
        self.heldout_curve: list[list] = []
        self.consistent = (
            True  # model, optimizer and `step` agree (False inside a step): only then is a checkpoint exact
        )
        if ckpt is not None:
            self._restore(ckpt)
        if self.step > cfg.total_steps:
            raise SpecbenchError(
                f"{cfg.out} is already trained to step {self.step} > --steps {cfg.total_steps}; "
                f"pass --steps >= {self.step}"
            )
        self.schedule = Schedule(data, self.train_docs, p, cfg.seed)

    def _restore(self, ckpt: dict) -> None:
        self.model.load_state_dict(ckpt["model"])
        self.opt.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["rng"])
        self.step, self.curve, self.heldout_curve = ckpt["step"], ckpt["curve"], ckpt["heldout"]
        self.seconds = ckpt["train_seconds"]

    def state(self) -> dict:
        """Progress, as the checkpoint stores it beside the model, optimizer and RNG (and the manifest reads it)."""
        return {
            "key": self.cfg.training_key(),
            "curve": self.curve,
            "heldout": self.heldout_curve,
            "train_seconds": self.seconds,
            "data_sha256": self.index["sha256"],
        }

    def info(self) -> str:
        last = self.curve[-1] if self.curve else None
        ho = self.heldout_curve[-1] if self.heldout_curve else None
        parts = [f"loss {last[1]:.3f}" if last else "", f"held-out α≈{ho[1]:.3f}" if ho else ""]
        return "  ".join(x for x in parts if x)

    def train(self, progress: Progress, on_step: Callable[[int], None] | None) -> bool:
        """Train up to the configured steps → True, or stop at this session's step limit → False.

        Ctrl-C keeps what is done: a checkpoint between steps, the last periodic one mid-step."""
        cfg, total = self.cfg, self.cfg.total_steps
        progress(Event("train", self.step, total, self.info() or "starting"))
        session = 0
        try:
            while self.step < total:
                if cfg.max_session_steps is not None and session >= cfg.max_session_steps:
                    return False
                self._train_one_step()
                session += 1
                self._after_step()
                progress(Event("train", self.step, total, self.info()))
                if on_step is not None:
                    on_step(self.step)
        except KeyboardInterrupt:
            if self.consistent:
                self._save_checkpoint()
            raise
        return True

    def _train_one_step(self) -> None:
        p, t0 = self.cfg.preset, time.perf_counter()
        for g in self.opt.param_groups:
            g["lr"] = lr_at(self.step, p, self.cfg.total_steps)
        epoch, docs = self.schedule.docs_at(self.step)
        self.consistent = False
        if self.trainer is not None:
            loss, agree = self.trainer.train_step(self.opt, docs)
        else:
            loss, agree = train_step(
                self.model, self.opt, self.data, make_batch(self.data, docs, p.max_len, self.pad_id), self.device
            )
        self.step += 1
        self.curve.append([self.step, loss, agree, epoch])
        self.consistent = True
        self.seconds += time.perf_counter() - t0

    def _after_step(self) -> None:
        """Evaluate on the held-out documents and checkpoint, each at its period and at the last step."""
        p, step, last = self.cfg.preset, self.step, self.step == self.cfg.total_steps
        if step % p.eval_every == 0 or last:
            if self.trainer is not None:
                ev = self.trainer.evaluate(self.heldout_docs)
            else:
                ev = evaluate(self.model, self.data, self.heldout_docs, p, self.pad_id, self.device)
            self.heldout_curve.append([step, ev["agreement_reply"], ev["agreement_all"], ev["kl"]])
        if step % p.checkpoint_every == 0 or last:
            self.checkpoint()

    def _save_checkpoint(self) -> None:
        save_checkpoint(checkpoint_path(self.cfg.out), self.model, self.opt, self.step, self.state())

    def checkpoint(self) -> dict:
        """Save the checkpoint and a "training" manifest → the manifest."""
        self._save_checkpoint()
        return self.write_manifest(None, "training")

    def write_manifest(self, checks: dict | None, status: str) -> dict:
        manifest = build_manifest(
            self.cfg, self.index, self.target, self.model, self.state(), self.step, checks, status
        )
        atomic_write_json(self.cfg.out / "manifest.json", manifest)
        return manifest


def _export_and_check(run: TrainingRun, progress: Progress, t_start: float) -> Outcome:
    """Export the trained draft, measure it, and write the "done" manifest."""
    cfg = run.cfg
    progress(Event("export", 0, 1, "saving and checking the draft"))
    if cfg.kind in HEAD_KINDS:  # vLLM's eagle/eagle3 layout, reloaded as --draft <kind>:<out> (save_head.py)
        from specbench.distill.save_head import draft_vocab_ids, export_head, head_checks

        ids = draft_vocab_ids(run.data, cfg.draft_vocab) if cfg.draft_vocab is not None else None
        export_head(run.model, cfg.out, cfg.preset.save_dtype, ids)
        checks = head_checks(cfg, run.target, run.data, run.heldout_docs, run.index)
    else:
        export_draft(run.model, run.target, cfg.out, cfg.preset.save_dtype)
        checks = final_checks(cfg, run.target, run.data, run.heldout_docs, run.index, run.pad_id)
    checks["total_seconds_this_session"] = time.perf_counter() - t_start
    manifest = run.write_manifest(checks, "done")
    cost = f"c = {checks['cost']['c']:.3f}, " if checks.get("cost") else ""
    progress(Event("export", 1, 1, f"{cost}α(γ={cfg.preset.check_gamma}) = {checks['speculative']['alpha']:.3f}"))
    return Outcome(manifest, finished=True)

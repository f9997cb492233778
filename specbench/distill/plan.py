"""The teacher's plan: which task examples it reads (training rows, held-out rows, never the
benchmark's picks), as the token ids the runner feeds, grouped into jobs (one batch, one shard each).

Held-out rows are the first `heldout_rows` examples `specbench run --seed 0` picks. Training rows
are the task's other rows minus everything `specbench run --seed 0..exclude_seeds-1 --limit <=
exclude_limit` picks; for an offline source with other splits (aclsum), the other splits are the
training data and the benchmark split is never trained on. So measurements on those picks are on
prompts the draft never saw.

The plan (`Plan.record`, written as plan.json) names everything that decides the teacher data; its
hash ties the shards on disk to it, so a resumed build never mixes data from other settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specbench.distill.settings import HEAD_KINDS, DistillConfig, DistillPreset
from specbench.errors import SpecbenchError


@dataclass
class TeacherRow:
    """One task example as token ids, ready for the teacher."""

    task: int  # index into the config's tasks
    row_id: str  # the example's id in the task
    prompt: list[int]  # exactly the ids the runner feeds (chat template applied)
    reply: list[int]  # reference reply + end-of-turn id; [] when the task has no reference
    max_new: int  # on-policy continuation budget


@dataclass
class Job:
    """A teacher batch: rows of one task sharing the task's prompt prefix; one shard file."""

    index: int
    task: int
    heldout: bool
    prefix_doc: bool  # also emit the shared prefix as a document (once per task)
    rows: list[TeacherRow]


# --------------------------------------------------------------------------- rows of a task


def _row_order(n: int, salt: str) -> list[int]:
    return sorted(range(n), key=lambda i: hashlib.sha256(f"{salt}:{i}".encode()).digest())


def _excluded_indices(n: int, seeds: int, limit: int) -> set[int]:
    """Row indices `specbench run` picks with --seed 0..seeds-1 and --limit <= limit (select_examples' order)."""
    out: set[int] = set()
    for seed in range(seeds):
        order = sorted(range(n), key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).digest())
        out.update(order[:limit])
    return out


def _training_candidates(spec, rows: Sequence[dict], preset: DistillPreset) -> list[tuple[str, dict]]:
    """(key, raw row) of every row training may use: the source's other splits when it has some, else the
    task's rows minus the benchmark's picks. The key's last ':'-part is the row's index in its split."""
    from specbench.tasks import sources as data
    from specbench.tasks.offline import OFFLINE_SOURCES

    source = spec.source
    other_splits = []
    if source["type"] == "offline" and source["split"] != "all":
        other_splits = [s for s in OFFLINE_SOURCES[source["name"]].splits if s not in ("all", source["split"])]
    if other_splits:
        return [(f"{s}:{i}", r) for s in other_splits for i, r in enumerate(data.load_rows({**source, "split": s}))]
    excluded = _excluded_indices(len(rows), preset.exclude_seeds, preset.exclude_limit)
    return [(str(i), rows[i]) for i in range(len(rows)) if i not in excluded]


def task_rows(spec, preset: DistillPreset, task_index: int, tokenizer, eos_id: int | None):
    """(training rows, held-out rows) of one task (see the module's docstring for which rows are which)."""
    from specbench.tasks import sources as data
    from specbench.tasks.examples import check_fields, make_example, render_for_model, select_examples

    max_new = min(spec.max_new_tokens, preset.max_new_tokens or spec.max_new_tokens)

    def to_row(example) -> TeacherRow:
        text = render_for_model(spec, example.prompt, tokenizer)
        templated = text != example.prompt
        prompt = tokenizer(text, add_special_tokens=not templated)["input_ids"]
        reply: list[int] = []
        if example.reference and example.reference.strip():
            ref = example.reference if templated or text[-1:].isspace() else " " + example.reference
            reply = tokenizer(ref, add_special_tokens=False)["input_ids"] + ([eos_id] if eos_id is not None else [])
        return TeacherRow(task=task_index, row_id=example.id, prompt=prompt, reply=reply, max_new=max_new)

    rows = data.load_rows(spec.source)
    n = len(rows)
    if n == 0:
        raise SpecbenchError(f"task {spec.name}: its source has no rows")
    check_fields(spec, rows[0])
    heldout = [to_row(e) for e in select_examples(spec, min(preset.heldout_rows, n), 0)]
    candidates = _training_candidates(spec, rows, preset)
    order = _row_order(len(candidates), f"distill:{spec.name}")
    if preset.max_train_rows is not None:
        order = order[: preset.max_train_rows]
    train = []
    for k in order:
        key, raw = candidates[k]
        example = make_example(spec, raw, int(key.split(":")[-1]))
        train.append(dataclasses.replace(to_row(example), row_id=f"{key}/{example.id}"))
    if not train:
        raise SpecbenchError(
            f"task {spec.name}: no rows left for training after holding out the benchmark's "
            f"picks ({n} rows); use a larger task or the small preset"
        )
    return train, heldout


# --------------------------------------------------------------------------- rows → jobs


def common_prefix(seqs: list[list[int]]) -> int:
    """Length of the longest common prefix, leaving every sequence at least one token of its own."""
    if not seqs:
        return 0
    first, p = seqs[0], min(len(s) for s in seqs) - 1
    for s in seqs[1:]:
        k = 0
        while k < p and s[k] == first[k]:
            k += 1
        p = k
    return max(p, 0)


def make_jobs(
    rows_by_task: list[tuple[list[TeacherRow], list[TeacherRow]]], preset: DistillPreset
) -> tuple[list[Job], list[int]]:
    """Held-out jobs first, then training jobs; rows sorted by length within a task to limit padding."""
    prefixes = [common_prefix([r.prompt for r in train + held]) for train, held in rows_by_task]
    jobs: list[Job] = []
    for heldout in (True, False):
        for t, (train, held) in enumerate(rows_by_task):
            rows = sorted(held if heldout else train, key=lambda r: (len(r.prompt), r.row_id))
            batch: list[TeacherRow] = []
            first = not heldout
            for r in rows:
                cost = len(r.prompt) - prefixes[t] + len(r.reply)
                used = sum(len(x.prompt) - prefixes[t] + len(x.reply) for x in batch)
                if batch and (len(batch) >= preset.gen_batch or used + cost > preset.job_tokens):
                    jobs.append(Job(len(jobs), t, heldout, first, batch))
                    batch, first = [], False
                batch.append(r)
            if batch:
                jobs.append(Job(len(jobs), t, heldout, first, batch))
    return jobs, prefixes


# --------------------------------------------------------------------------- the whole plan


def target_fingerprint(model: torch.nn.Module) -> str:
    """sha256 of the target's output embedding: ties teacher data to the exact weights that made it."""
    w = model.get_output_embeddings().weight.detach().float().cpu().contiguous()  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
    return hashlib.sha256(w.numpy().tobytes()).hexdigest()


@dataclass
class Plan:
    task_names: list[str]  # in the config's order (a row's and a job's `task` index into it)
    jobs: list[Job]
    prefixes: list[int]  # per task: prompt tokens all its rows share (run once per job, then its cache repeated)
    record: dict  # plan.json: everything that decides the teacher data

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.record, sort_keys=True).encode()).hexdigest()


def make_plan(cfg: DistillConfig, target) -> Plan:
    """Read the tasks' rows through the target's tokenizer and group them into jobs."""
    from specbench.tasks.specs import load_task

    tok = target.tokenizer
    eos_id = tok.eos_token_id if tok.eos_token_id is not None else (min(target.eos_ids) if target.eos_ids else None)
    specs = [load_task(t) for t in cfg.tasks]
    rows_by_task = [task_rows(spec, cfg.preset, i, tok, eos_id) for i, spec in enumerate(specs)]
    jobs, prefixes = make_jobs(rows_by_task, cfg.preset)
    p = cfg.preset
    record = {
        "target": cfg.target,
        "target_fingerprint": target_fingerprint(target.model),
        "vocab_size": target.vocab_size,
        "tasks": [s.name for s in specs],
        "prefix_tokens": prefixes,
        "top_k": p.top_k,
        "reference_docs": p.reference_docs,
        "sampled_docs": p.sampled_docs,
        "job_tokens": p.job_tokens,
        "gen_batch": p.gen_batch,
        "jobs": [[j.task, j.heldout, j.prefix_doc, [r.row_id for r in j.rows]] for j in jobs],
        "rows": {
            s.name: {"train": len(tr), "heldout": len(he), "max_new_tokens": (tr or he)[0].max_new}
            for s, (tr, he) in zip(specs, rows_by_task)
        },
    }
    # the shards also hold hidden states: never mixed with a draft's (whose plan is as before)
    if cfg.kind in HEAD_KINDS:
        record["hidden_states"] = "float16"
    if cfg.teacher_dtype != "float32":  # labels from a bf16 or fp16 target are not a float32 one's
        record["teacher_dtype"] = cfg.teacher_dtype
    layers = feature_layers(cfg, target)
    if layers:  # an EAGLE-3 head's fused layers (an EAGLE head's plan is as before)
        record["feature_layers"] = list(layers)
    return Plan([s.name for s in specs], jobs, prefixes, record)


def feature_layers(cfg: DistillConfig, target) -> tuple[int, ...]:
    """The target layers whose outputs the teacher keeps for an EAGLE-3 head (--kind eagle3: vLLM's default three,
    models/eagle3_head.py); () for every other kind (an EAGLE head keeps the final hidden state)."""
    if cfg.kind != "eagle3":
        return ()
    from specbench.models.eagle3_head import default_aux_layers

    return default_aux_layers(int(target.model.config.num_hidden_layers))

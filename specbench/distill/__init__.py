"""Distil a small draft model for a target: `specbench distill --target T --out DIR`.

No small model shares SmolLM2's tokenizer (shared/ASSETS.md), so a useful model draft has to
be trained. Three stages, each resumable:

1. **Teacher data.** The target reads the offline tasks' text the way the runner feeds it:
   the chat-templated prompt, then (a) its own greedy continuation ("on-policy": exactly the
   tokens speculative decoding drafts at T = 0), (b) a T = 1 sample from its own law (what
   sampled runs draft on) and (c) the human reference reply. Every position keeps the
   target's top-k log-probabilities (fp16) and ids (int32) as a soft label. Prompts of a
   task share a long chat-template prefix: it is run once and its KV cache is repeated over
   the batch, so per-row work starts at the example's own text. Prompts and references are
   scored in batched forward passes; continuations are batched steps (greedy and sampled
   rows together) that drop finished rows. Jobs are written as safetensors shards (atomic,
   sha256 in an index), so a killed build resumes at the next shard.
2. **Training.** A LlamaForCausalLM with tied embeddings of width 128: the output layer is
   the cost that matters on a CPU (a 49k × d product per drafted token), and tying it to a
   128-wide embedding makes it a rank-128 factorised head that still returns logits over the
   full vocabulary, loads with `AutoModelForCausalLM` and works in HF assisted generation.
   The embedding starts from the target's output embedding projected on its top principal
   directions, and the final norm's gain (the head's logit scale) where logits have unit
   spread, which Adam would otherwise take thousands of steps to reach. Loss: KL(p̃ ‖ q)
   with p̃ the top-k teacher law renormalised; the vocabulary product runs in chunks with a
   manual backward so memory does not grow with the batch.
   Held-out top-1 agreement on on-policy positions of prompts never trained on is the
   greedy-α proxy (at T = 0 a drafted token is accepted iff it is the target's argmax).
   Checkpoints (model, optimizer, RNG, step) are atomic; the batch at step s is a pure
   function of (seed, s), so a resumed run retraces the uninterrupted one exactly.
3. **Export and checks.** The draft is saved with `save_pretrained` (safetensors) and the
   target's tokenizer, reloaded through `specbench.models.load_model`, timed against the
   target (c), run in `decode_speculative` on held-out prompts (α at T = 0), and described
   in manifest.json together with the command that rebuilds it.

Training excludes every example that `specbench run` picks with `--seed 0..3 --limit <= 128`
(and the whole aclsum test split), so measurements on those are on unseen prompts.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import inspect
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.errors import SpecbenchError
from specbench.files import atomic_write_bytes, atomic_write_json, file_sha256

SCHEMA_VERSION = 1
DEFAULT_TASKS = ("ding-de-en", "aclsum")
KIND_PREFIX, KIND_ON_POLICY, KIND_REFERENCE, KIND_SAMPLED = 0, 1, 2, 3  # what a teacher document is:
# the shared prompt prefix; prompt + greedy continuation; prompt + human reference; prompt + T = 1 sample
WORK = "work"  # DIR/work holds the teacher data and the checkpoint; never shipped


# --------------------------------------------------------------------------- presets and config


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
        name="small", heldout_rows=3, exclude_seeds=1, exclude_limit=3, max_train_rows=12, max_new_tokens=8,
        reference_docs=True, sampled_docs=True, top_k=8, job_tokens=512, gen_batch=8,
        layers=2, hidden=32, intermediate=64, heads=4, kv_heads=2, svd_init=True,
        steps=24, batch_tokens=256, max_len=512, lr=3e-3, warmup=4, weight_decay=0.01, eval_every=8,
        checkpoint_every=8, save_dtype="float32", c_reps=2, check_prompts=2, check_gamma=3),
    # The shipped draft: all rows of the offline tasks (~1.2M teacher positions for SmolLM2) and a 3-layer
    # width-128 draft. Its cost is the 49k × 128 head plus ~0.3 ms of overhead per layer, while FFN width
    # is nearly free: c = 0.044 against SmolLM2 on one CPU thread (4 layers: 0.048-0.050; 2: 0.035);
    # 7.6M parameters, 15.2 MB in fp16. No T = 1 sampled continuations and 3,000 steps: with them and
    # 4,000 steps the build took ~3.4 h on this 2-core CPU; the default runs are greedy, where the
    # greedy continuations are exactly what gets drafted.
    "full": DistillPreset(
        name="full", heldout_rows=48, exclude_seeds=4, exclude_limit=128, max_train_rows=None, max_new_tokens=None,
        reference_docs=True, sampled_docs=False, top_k=32, job_tokens=3072, gen_batch=64,
        layers=3, hidden=128, intermediate=1024, heads=4, kv_heads=2, svd_init=True,
        steps=3000, batch_tokens=4096, max_len=512, lr=2e-3, warmup=100, weight_decay=0.01, eval_every=100,
        checkpoint_every=50, save_dtype="float16", c_reps=5, check_prompts=8, check_gamma=3),
}


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
        if self.preset.save_dtype not in ("float32", "float16", "bfloat16"):
            raise SpecbenchError(f"preset {self.preset.name}: save_dtype must be float32, float16 or bfloat16")
        return self

    def command(self) -> str:
        """The command line that rebuilds this draft from nothing."""
        return (f"specbench distill --target {self.target} --out {self.out} --preset {self.preset.name} "
                f"--task {','.join(self.tasks)} --steps {self.total_steps} --seed {self.seed}")

    def training_key(self) -> dict:
        """What must match for a checkpoint to be resumed (the step count may grow)."""
        return {"target": self.target, "tasks": list(self.tasks), "seed": self.seed,
                "preset": {k: v for k, v in dataclasses.asdict(self.preset).items() if k != "steps"}}


def get_preset(name: str) -> DistillPreset:
    if name not in PRESETS:
        raise SpecbenchError(f"unknown distill preset {name!r}; use one of {', '.join(PRESETS)}")
    return PRESETS[name]


@dataclass
class Event:
    """A progress report: phase 'teacher' (done/total shards) or 'train' (done/total steps)."""

    phase: str
    done: int
    total: int
    info: str = ""  # one short human line: loss, held-out agreement, throughput


Progress = Callable[[Event], None]


# --------------------------------------------------------------------------- atomic files


def atomic_torch_save(obj, path: Path) -> None:
    atomic_write_bytes(path, lambda tmp: torch.save(obj, tmp))


_write_json = atomic_write_json


# --------------------------------------------------------------------------- the plan: rows → jobs


@dataclass
class Row:
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
    rows: list[Row]


def _row_order(n: int, salt: str) -> list[int]:
    return sorted(range(n), key=lambda i: hashlib.sha256(f"{salt}:{i}".encode()).digest())


def _excluded_indices(n: int, seeds: int, limit: int) -> set[int]:
    """Row indices `specbench run` picks with --seed 0..seeds-1 and --limit <= limit (select_examples' order)."""
    out: set[int] = set()
    for seed in range(seeds):
        order = sorted(range(n), key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).digest())
        out.update(order[:limit])
    return out


def task_rows(spec, preset: DistillPreset, task_index: int, tokenizer, eos_id: int | None):
    """(training rows, held-out rows) of one task.

    Held-out: the first `heldout_rows` examples `specbench run --seed 0` picks. Training: the
    task's other rows minus everything runs with --seed < exclude_seeds and --limit <=
    exclude_limit pick; for an offline source with other splits (aclsum), the other splits
    are training data and the benchmark split is never trained on.
    """
    from specbench.tasks import sources as data
    from specbench.tasks.specs import check_fields, make_example, render_for_model, select_examples

    max_new = min(spec.max_new_tokens, preset.max_new_tokens or spec.max_new_tokens)

    def to_row(example) -> Row:
        text = render_for_model(spec, example.prompt, tokenizer)
        templated = text != example.prompt
        prompt = tokenizer(text, add_special_tokens=not templated)["input_ids"]
        reply: list[int] = []
        if example.reference and example.reference.strip():
            ref = example.reference if templated or text[-1:].isspace() else " " + example.reference
            reply = tokenizer(ref, add_special_tokens=False)["input_ids"] + ([eos_id] if eos_id is not None else [])
        return Row(task=task_index, row_id=example.id, prompt=prompt, reply=reply, max_new=max_new)

    rows = data.load_rows(spec.source)
    n = len(rows)
    if n == 0:
        raise SpecbenchError(f"task {spec.name}: its source has no rows")
    check_fields(spec, rows[0])
    heldout = [to_row(e) for e in select_examples(spec, min(preset.heldout_rows, n), 0)]
    source = spec.source
    other_splits = []
    if source["type"] == "offline" and source["split"] != "all":
        other_splits = [s for s in data.OFFLINE_SOURCES[source["name"]].splits if s not in ("all", source["split"])]
    if other_splits:
        candidates = [(f"{s}:{i}", r) for s in other_splits for i, r in enumerate(data.load_rows({**source, "split": s}))]
    else:
        excluded = _excluded_indices(n, preset.exclude_seeds, preset.exclude_limit)
        candidates = [(str(i), rows[i]) for i in range(n) if i not in excluded]
    order = _row_order(len(candidates), f"distill:{spec.name}")
    if preset.max_train_rows is not None:
        order = order[:preset.max_train_rows]
    train = []
    for k in order:
        key, raw = candidates[k]
        example = make_example(spec, raw, int(key.split(":")[-1]))
        train.append(dataclasses.replace(to_row(example), row_id=f"{key}/{example.id}"))
    if not train:
        raise SpecbenchError(f"task {spec.name}: no rows left for training after holding out the benchmark's "
                             f"picks ({n} rows); use a larger task or the small preset")
    return train, heldout


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


def make_jobs(rows_by_task: list[tuple[list[Row], list[Row]]], preset: DistillPreset) -> tuple[list[Job], list[int]]:
    """Held-out jobs first, then training jobs; rows sorted by length within a task to limit padding."""
    prefixes = [common_prefix([r.prompt for r in train + held]) for train, held in rows_by_task]
    jobs: list[Job] = []
    for heldout in (True, False):
        for t, (train, held) in enumerate(rows_by_task):
            rows = sorted(held if heldout else train, key=lambda r: (len(r.prompt), r.row_id))
            batch: list[Row] = []
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


# --------------------------------------------------------------------------- the teacher


class Teacher:
    """The target, run batched with a shared-prefix KV cache, reduced to top-k soft labels."""

    def __init__(self, model: torch.nn.Module, top_k: int, eos_ids: frozenset[int], pad_id: int):
        self.model = model
        self.base = model.base_model
        self.head = model.get_output_embeddings()
        self.top_k = top_k
        self.eos = torch.tensor(sorted(eos_ids) or [-1])
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        params = inspect.signature(self.base.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def _hidden(self, ids: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor | None, cache) -> torch.Tensor:
        out = self.base(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **{self._cache_kw: cache})
        return out.last_hidden_state

    def labels(self, hidden: torch.Tensor, chunk: int = 1024, generator: torch.Generator | None = None,
               sample: torch.Tensor | None = None):
        """hidden [M, H] → (top-k ids [M, k] int32, top-k log-probs [M, k] fp16, next [M]) via the output layer
        in chunks; next is the argmax, except rows flagged in `sample` [M] bool, drawn from the full law."""
        ids, logps, nxt = [], [], []
        for c in range(0, hidden.shape[0], chunk):
            logits = self.head(hidden[c:c + chunk]).float()  # [m, V]
            vals, idx = logits.topk(self.top_k, dim=-1)
            logps.append((vals - logits.logsumexp(-1, keepdim=True)).half())
            ids.append(idx.int())
            pick = idx[:, 0].clone()
            rows = sample[c:c + chunk].to(pick.device) if sample is not None else None
            if rows is not None and rows.any():  # multinomial on a CPU generator: the same draws on every machine
                probs = logits[rows].softmax(-1).cpu()
                pick[rows] = torch.multinomial(probs, 1, generator=generator)[:, 0].to(pick.device)
            nxt.append(pick)
        if not ids:
            empty = torch.zeros(0, self.top_k)
            return empty.int(), empty.half(), torch.zeros(0, dtype=torch.long)
        return torch.cat(ids).cpu(), torch.cat(logps).cpu(), torch.cat(nxt).long()

    @torch.inference_mode()
    def run_job(self, job: Job, prefix_len: int, with_reference: bool, sampled: bool) -> tuple[dict[str, torch.Tensor], dict]:
        """Score one job → shard tensors (see `Docs`) and counts {score_tokens, gen_tokens, score_seconds, gen_seconds}."""
        from transformers import DynamicCache

        dev, rows, P = self.device, job.rows, prefix_len
        B = len(rows)
        t0 = time.perf_counter()
        docs = Docs()
        cache = DynamicCache()
        prefix = torch.tensor(rows[0].prompt[:P], device=dev)
        score_tokens = 0
        if P:
            h = self._hidden(prefix[None], None, None, cache)[0]  # [P, H]
            if job.prefix_doc:
                idx, lp, _ = self.labels(h)
                docs.add(rows[0].prompt[:P], KIND_PREFIX, 0, P, P, idx, lp)
                score_tokens += P
            cache.batch_repeat_interleave(B)
        # prompts after the prefix, left-padded: mask = [prefix | pads | prompt]
        suffixes = [r.prompt[P:] for r in rows]
        S = max(len(s) for s in suffixes)
        ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        mask = torch.zeros(B, P + S, dtype=torch.long)
        mask[:, :P] = 1
        for i, s in enumerate(suffixes):
            ids[i, S - len(s):] = torch.tensor(s)
            mask[i, P + S - len(s):] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        h = self._hidden(ids, mask, pos[:, P:], cache)  # [B, S, H]
        valid = torch.cat([torch.arange(S - len(s), S) + i * S for i, s in enumerate(suffixes)])
        p_idx, p_lp, _ = self.labels(h.reshape(B * S, -1)[valid.to(dev)])
        h_last = h[:, -1]  # [B, H] each row's last prompt position (left padding)
        score_tokens += len(valid)
        bounds = [0]
        for s in suffixes:
            bounds.append(bounds[-1] + len(s))
        last = pos[:, -1:]  # [B, 1] position of each row's last prompt token

        if with_reference and any(len(r.reply) > 1 for r in rows):
            rcache = copy.deepcopy(cache)
            R = max(len(r.reply) for r in rows)
            rids = torch.full((B, R), self.pad_id, dtype=torch.long)
            rmask = torch.zeros(B, R, dtype=torch.long)
            for i, r in enumerate(rows):
                rids[i, :len(r.reply)] = torch.tensor(r.reply, dtype=torch.long)
                rmask[i, :len(r.reply)] = 1
            rpos = last + 1 + torch.arange(R, device=dev)
            hr = self._hidden(rids.to(dev), torch.cat([mask, rmask.to(dev)], 1), rpos, rcache)  # [B, R, H]
            keep = [(i, len(r.reply) - 1) for i, r in enumerate(rows) if len(r.reply) > 1]
            sel = torch.cat([torch.arange(n) + i * R for i, n in keep]).to(dev)
            r_idx, r_lp, _ = self.labels(hr.reshape(B * R, -1)[sel])
            score_tokens += len(sel)
            off = 0
            for i, n in keep:
                r = rows[i]
                L = len(r.prompt)
                docs.add(r.prompt + r.reply, KIND_REFERENCE, L, L + n, L - 1, r_idx[off:off + n], r_lp[off:off + n])
                off += n
            del rcache

        # continuations: greedy (row 2i) and, when asked, a T = 1 draw from the target's own law (row 2i+1),
        # in one batch: a CPU forward over 2b rows costs far less than two over b
        t1 = time.perf_counter()
        first = p_idx[torch.tensor(bounds[1:]) - 1, 0].long().to(dev)  # [B] greedy first tokens
        sample = torch.zeros(B, dtype=torch.bool)
        g = torch.Generator().manual_seed(1_000_003 + job.index)  # the draws depend on the job only
        if sampled:
            _, _, drawn = self.labels(h_last, generator=g, sample=torch.ones(B, dtype=torch.bool))
            first = torch.stack([first, drawn.to(dev)], 1).view(-1)
            sample = torch.tensor([False, True]).repeat(B)
            cache.batch_repeat_interleave(2)
            mask, last = mask.repeat_interleave(2, 0), last.repeat_interleave(2, 0)
        reps = 2 if sampled else 1
        tokens, gidx, glp, gen_tokens = self._continue(cache, mask, last, first, [r for r in rows for _ in range(reps)],
                                                       g, sample)
        for i, r in enumerate(rows):
            L = len(r.prompt)
            k = i * reps
            n_i = len(tokens[k])
            idx = torch.cat([p_idx[bounds[i]:bounds[i + 1]], *gidx[k]])
            lp = torch.cat([p_lp[bounds[i]:bounds[i + 1]], *glp[k]])
            docs.add(r.prompt + tokens[k], KIND_ON_POLICY, P, L + n_i - 1, L - 1, idx, lp)
            if sampled and len(tokens[k + 1]) > 1:
                n_s = len(tokens[k + 1])
                docs.add(r.prompt + tokens[k + 1], KIND_SAMPLED, L, L + n_s - 1, L - 1, torch.cat(gidx[k + 1]),
                         torch.cat(glp[k + 1]))
        counts = {"score_tokens": score_tokens, "gen_tokens": gen_tokens, "score_seconds": t1 - t0,
                  "gen_seconds": time.perf_counter() - t1}
        return docs.tensors(job, self.top_k), counts

    def _continue(self, cache, mask, last, nxt, rows: list[Row], generator: torch.Generator, sample: torch.Tensor):
        """Continue every row from its first new token `nxt` [B] until EOS or its max_new, greedily or (rows
        flagged in `sample`) by drawing; finished rows leave the batch (their cache rows are dropped).
        → (tokens per row, top-k ids and log-probs per step and row, forwards run)."""
        dev = self.device
        tokens: list[list[int]] = [[] for _ in rows]
        gidx: list[list[torch.Tensor]] = [[] for _ in rows]
        glp: list[list[torch.Tensor]] = [[] for _ in rows]
        active = torch.arange(len(rows))
        eos = set(self.eos.tolist())
        n = 0
        while True:
            keep = []
            for j, (a, t) in enumerate(zip(active.tolist(), nxt.tolist())):
                tokens[a].append(t)
                if t not in eos and len(tokens[a]) < rows[a].max_new:
                    keep.append(j)
            if not keep:
                return tokens, gidx, glp, n
            if len(keep) < len(active):
                sel = torch.tensor(keep, dtype=torch.long)
                cache.batch_select_indices(sel.to(dev))
                mask, last, nxt, active = mask[sel.to(dev)], last[sel.to(dev)], nxt[sel.to(dev)], active[sel]
                sample = sample[sel]
            mask = torch.cat([mask, torch.ones(len(active), 1, dtype=mask.dtype, device=dev)], 1)
            last = last + 1
            h = self._hidden(nxt[:, None], mask, last, cache)[:, 0]  # [b, H]
            idx, lp, nxt = self.labels(h, generator=generator, sample=sample)
            n += len(active)
            for j, a in enumerate(active.tolist()):
                gidx[a].append(idx[j:j + 1])
                glp[a].append(lp[j:j + 1])
            nxt = nxt.to(dev)


class Docs:
    """Accumulates teacher documents: tokens, and soft labels for positions [label_start, label_end).

    The label at position t is the teacher's law of token t+1 given tokens ..t. `reply_start`
    is the first position whose label predicts a reply token (the prompt's last position).
    """

    def __init__(self):
        self.tokens, self.lens, self.meta, self.idx, self.lp = [], [], [], [], []

    def add(self, tokens: list[int], kind: int, label_start: int, label_end: int, reply_start: int,
            idx: torch.Tensor, lp: torch.Tensor) -> None:
        assert idx.shape[0] == label_end - label_start, (idx.shape, label_start, label_end)
        self.tokens.extend(tokens)
        self.lens.append(len(tokens))
        self.meta.append((label_start, label_end, reply_start, kind))
        self.idx.append(idx)
        self.lp.append(lp)

    def tensors(self, job: Job, k: int) -> dict[str, torch.Tensor]:
        meta = torch.tensor(self.meta, dtype=torch.int32).view(-1, 4)
        n = len(self.lens)
        return {
            "tokens": torch.tensor(self.tokens, dtype=torch.int32),  # [N] all documents back to back
            "doc_len": torch.tensor(self.lens, dtype=torch.int32),  # [D]
            "label_start": meta[:, 0].contiguous(), "label_end": meta[:, 1].contiguous(),  # [D]
            "reply_start": meta[:, 2].contiguous(), "kind": meta[:, 3].to(torch.int8),  # [D]
            "task": torch.full((n,), job.task, dtype=torch.int32),  # [D]
            "heldout": torch.full((n,), int(job.heldout), dtype=torch.int8),  # [D]
            "topk_idx": torch.cat(self.idx) if self.idx else torch.zeros(0, k, dtype=torch.int32),  # [M, k]
            "topk_logp": torch.cat(self.lp) if self.lp else torch.zeros(0, k, dtype=torch.float16),  # [M, k]
        }


def target_fingerprint(model: torch.nn.Module) -> str:
    """sha256 of the target's output embedding: ties teacher data to the exact weights that made it."""
    w = model.get_output_embeddings().weight.detach().float().cpu().contiguous()
    return hashlib.sha256(w.numpy().tobytes()).hexdigest()


def build_teacher_data(cfg: DistillConfig, target, progress: Progress) -> dict:
    """Plan the jobs, run those not yet on disk, and return the teacher index (shards, hashes, throughput)."""
    from safetensors.torch import save_file

    from specbench.tasks.specs import load_task

    folder = cfg.out / WORK / "teacher"
    folder.mkdir(parents=True, exist_ok=True)
    tok = target.tokenizer
    eos_id = tok.eos_token_id if tok.eos_token_id is not None else (min(target.eos_ids) if target.eos_ids else None)
    specs = [load_task(t) for t in cfg.tasks]
    rows_by_task = [task_rows(spec, cfg.preset, i, tok, eos_id) for i, spec in enumerate(specs)]
    jobs, prefixes = make_jobs(rows_by_task, cfg.preset)
    p = cfg.preset
    plan = {
        "target": cfg.target, "target_fingerprint": target_fingerprint(target.model), "vocab_size": target.vocab_size,
        "tasks": [s.name for s in specs], "prefix_tokens": prefixes, "top_k": p.top_k,
        "reference_docs": p.reference_docs, "sampled_docs": p.sampled_docs, "job_tokens": p.job_tokens, "gen_batch": p.gen_batch,
        "jobs": [[j.task, j.heldout, j.prefix_doc, [r.row_id for r in j.rows]] for j in jobs],
        "rows": {s.name: {"train": len(tr), "heldout": len(he), "max_new_tokens": (tr or he)[0].max_new}
                 for s, (tr, he) in zip(specs, rows_by_task)},
    }
    plan_hash = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()
    index_path = folder / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    if index and index.get("plan_sha256") != plan_hash:
        raise SpecbenchError(f"{folder} holds teacher data for another target, task set or preset; "
                             f"use a new --out or delete {folder}")
    if not index:
        index = {"plan_sha256": plan_hash, "shards": {}}
        (folder / "plan.json").write_text(json.dumps(plan) + "\n")
    teacher = Teacher(target.model, p.top_k, target.eos_ids, _pad_id(target))
    todo = [j for j in jobs if not _shard_ok(folder, index["shards"].get(str(j.index)))]
    done = len(jobs) - len(todo)
    progress(Event("teacher", done, len(jobs), f"{done} of {len(jobs)} shards on disk"))
    for job in todo:
        t0 = time.perf_counter()
        tensors, counts = teacher.run_job(job, prefixes[job.task], p.reference_docs, p.sampled_docs)
        name = f"shard-{job.index:05d}.safetensors"
        # no metadata: its key order varies, and the same data must hash the same
        atomic_write_bytes(folder / name, lambda tmp: save_file(tensors, str(tmp)))
        index["shards"][str(job.index)] = {"file": name, "sha256": file_sha256(folder / name),
                                           "docs": int(tensors["doc_len"].numel()),
                                           "labels": int(tensors["topk_idx"].shape[0]),
                                           "heldout": job.heldout, "task": specs[job.task].name,
                                           "seconds": time.perf_counter() - t0, **counts}
        _write_json(index_path, index)
        done += 1
        tps = _teacher_rates(index)
        progress(Event("teacher", done, len(jobs),
                       f"{tps['labels']:,} labels; {tps['score_tok_s']:.0f} scored tok/s, {tps['gen_tok_s']:.0f} generated tok/s"))
    shards = [index["shards"][str(j.index)] for j in jobs]
    combined = hashlib.sha256("".join(s["sha256"] for s in shards).encode()).hexdigest()
    return {"folder": str(folder), "plan_sha256": plan_hash, "sha256": combined, "shards": shards,
            "plan": {k: v for k, v in plan.items() if k != "jobs"}, "rates": _teacher_rates(index)}


def _shard_ok(folder: Path, entry: dict | None) -> bool:
    return bool(entry) and (folder / entry["file"]).is_file()


def _teacher_rates(index: dict) -> dict:
    shards = list(index["shards"].values())
    secs = sum(s["seconds"] for s in shards)
    score, gen = sum(s["score_tokens"] for s in shards), sum(s["gen_tokens"] for s in shards)
    score_s, gen_s = sum(s["score_seconds"] for s in shards), sum(s["gen_seconds"] for s in shards)
    nan = float("nan")
    # scoring = batched forwards over prompts and references; generation = batched greedy steps
    return {"labels": sum(s["labels"] for s in shards), "score_tokens": score, "gen_tokens": gen, "seconds": secs,
            "tok_s": (score + gen) / secs if secs else nan, "score_tok_s": score / score_s if score_s else nan,
            "gen_tok_s": gen / gen_s if gen_s else nan}


def _pad_id(target) -> int:
    tok = target.tokenizer
    for cand in (getattr(tok, "pad_token_id", None), getattr(target.model.config, "pad_token_id", None),
                 tok.eos_token_id, 0):
        if isinstance(cand, int):
            return cand
    return 0


# --------------------------------------------------------------------------- teacher data in memory


@dataclass
class TeacherData:
    """All shards concatenated. Per document d: tokens[doc_start[d]:doc_start[d+1]], labels rows
    label_off[d] .. label_off[d+1] for positions label_start[d] .. label_end[d]-1."""

    tokens: torch.Tensor  # [N] int32
    doc_start: torch.Tensor  # [D+1] int64
    label_start: torch.Tensor  # [D] int32
    label_end: torch.Tensor  # [D] int32
    reply_start: torch.Tensor  # [D] int32
    kind: torch.Tensor  # [D] int8
    task: torch.Tensor  # [D] int32
    heldout: torch.Tensor  # [D] bool
    label_off: torch.Tensor  # [D+1] int64
    topk_idx: torch.Tensor  # [M, k] int32
    topk_logp: torch.Tensor  # [M, k] float16

    @property
    def doc_len(self) -> torch.Tensor:
        return self.doc_start[1:] - self.doc_start[:-1]


def load_teacher_data(index: dict) -> TeacherData:
    """Read the shards in job order, checking each file against its sha256."""
    from safetensors.torch import load_file

    folder = Path(index["folder"])
    parts = []
    for s in index["shards"]:
        path = folder / s["file"]
        if file_sha256(path) != s["sha256"]:
            raise SpecbenchError(f"teacher shard {path} does not match its recorded sha256; delete it and rerun "
                                 f"the same command to rebuild it")
        parts.append(load_file(str(path)))
    cat = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    doc_len = cat["doc_len"].long()
    n_labels = (cat["label_end"] - cat["label_start"]).long()
    zero = torch.zeros(1, dtype=torch.long)
    return TeacherData(tokens=cat["tokens"], doc_start=torch.cat([zero, doc_len.cumsum(0)]),
                       label_start=cat["label_start"], label_end=cat["label_end"], reply_start=cat["reply_start"],
                       kind=cat["kind"], task=cat["task"], heldout=cat["heldout"].bool(),
                       label_off=torch.cat([zero, n_labels.cumsum(0)]), topk_idx=cat["topk_idx"],
                       topk_logp=cat["topk_logp"])


@dataclass
class Batch:
    ids: torch.Tensor  # [B, L] input tokens, right-padded
    rows: torch.Tensor  # [M] batch row of each labelled position
    cols: torch.Tensor  # [M] position in the row
    labels: torch.Tensor  # [M] row into TeacherData.topk_*
    reply: torch.Tensor  # [M] bool: the label predicts a reply token of an on-policy document (the α proxy)


def make_batch(data: TeacherData, docs: list[int], max_len: int, pad_id: int) -> Batch:
    lens = [min(int(data.doc_len[d]), max_len) for d in docs]
    ids = torch.full((len(docs), max(lens)), pad_id, dtype=torch.long)
    rows, cols, labels, reply = [], [], [], []
    for b, (d, n) in enumerate(zip(docs, lens)):
        s = int(data.doc_start[d])
        ids[b, :n] = data.tokens[s:s + n]
        ls, le = int(data.label_start[d]), min(int(data.label_end[d]), n)
        if le <= ls:
            continue
        t = torch.arange(ls, le)
        rows.append(torch.full_like(t, b))
        cols.append(t)
        labels.append(int(data.label_off[d]) + t - ls)
        reply.append((t >= int(data.reply_start[d])) & (int(data.kind[d]) == KIND_ON_POLICY))
    empty = torch.zeros(0, dtype=torch.long)
    return Batch(ids, torch.cat(rows) if rows else empty, torch.cat(cols) if cols else empty,
                 torch.cat(labels) if labels else empty, torch.cat(reply) if reply else empty.bool())


def epoch_batches(data: TeacherData, train_docs: torch.Tensor, batch_tokens: int, max_len: int, seed: int,
                  epoch: int) -> list[list[int]]:
    """The batches of one epoch: a seeded shuffle, length-sorted within windows of 512 documents (little
    padding), packed to at most batch_tokens padded tokens, in a seeded order. Pure in (seed, epoch)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = train_docs[torch.randperm(len(train_docs), generator=g)].tolist()
    lens = data.doc_len.clamp(max=max_len)
    batches: list[list[int]] = []
    for w in range(0, len(perm), 512):
        window = sorted(perm[w:w + 512], key=lambda d: (int(lens[d]), d))
        batch: list[int] = []
        for d in window:
            if batch and (len(batch) + 1) * int(lens[d]) > batch_tokens:
                batches.append(batch)
                batch = []
            batch.append(d)
        if batch:
            batches.append(batch)
    order = torch.randperm(len(batches), generator=g).tolist()
    return [batches[i] for i in order]


class Schedule:
    """Step → batch, pure in (seed, step): what makes a resumed run retrace an uninterrupted one."""

    def __init__(self, data: TeacherData, train_docs: torch.Tensor, preset: DistillPreset, seed: int):
        self.data, self.train_docs, self.preset, self.seed = data, train_docs, preset, seed
        self._epoch, self._start, self._batches = -1, 0, []

    def docs_at(self, step: int) -> tuple[int, list[int]]:
        if self._epoch < 0 or step < self._start:
            self._epoch, self._start, self._batches = 0, 0, self._epoch_batches(0)
        while step >= self._start + len(self._batches):
            self._start += len(self._batches)
            self._epoch += 1
            self._batches = self._epoch_batches(self._epoch)
        return self._epoch, self._batches[step - self._start]

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        return epoch_batches(self.data, self.train_docs, self.preset.batch_tokens, self.preset.max_len, self.seed, epoch)


# --------------------------------------------------------------------------- the draft


def draft_config(preset: DistillPreset, target):
    from transformers import LlamaConfig

    tcfg = target.model.config
    return LlamaConfig(
        vocab_size=target.vocab_size, hidden_size=preset.hidden, intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers, num_attention_heads=preset.heads, num_key_value_heads=preset.kv_heads,
        max_position_embeddings=getattr(tcfg, "max_position_embeddings", 2048) or 2048,
        tie_word_embeddings=True, bos_token_id=getattr(tcfg, "bos_token_id", None),
        eos_token_id=getattr(tcfg, "eos_token_id", None), pad_token_id=_pad_id(target))


def new_draft(preset: DistillPreset, target, seed: int) -> torch.nn.Module:
    """A fresh draft; with svd_init its tied embedding is the target's output embedding E on its top
    `hidden` principal directions (E V_h, rescaled), so the draft's head starts as a rank-h slice of the target's."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(draft_config(preset, target))
    E = target.model.get_output_embeddings().weight.detach().float().cpu()  # [V, H]
    if preset.svd_init and E.shape[1] >= preset.hidden:
        _, vecs = torch.linalg.eigh(E.T @ E)  # ascending eigenvalues of the H × H Gram matrix
        proj = E @ vecs[:, -preset.hidden:].flip(-1)  # [V, h]
        # keep the geometry (which tokens are alike), not the scale: at the usual init scale the first
        # logits are near zero (KL ~ log V − H(p)) instead of spread over tens of nats
        proj = proj * (model.config.initializer_range / proj.std())
        with torch.no_grad():
            model.get_input_embeddings().weight.copy_(proj)
            # the final norm's gain is the head's logit scale; Adam moves it ~lr per step, so a gain of 1
            # takes thousands of steps to reach a peaked law. Start where logits have unit spread instead.
            model.base_model.norm.weight.fill_(1.0 / (preset.hidden ** 0.5 * float(proj.std())))
    model.tie_weights()
    return model


def kl_loss(head: torch.nn.Module, hidden: torch.Tensor, idx: torch.Tensor, logp: torch.Tensor,
            backward: bool, chunk: int = 1024) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Mean KL(p̃ ‖ q) over M positions, p̃ = the teacher's top-k law renormalised, q = the draft's full law.

    hidden [M, h]; idx [M, k] int; logp [M, k]. The vocabulary product runs in chunks; with
    backward=True each chunk's gradient flows to `hidden` (whose graph the caller backpropagates),
    so memory is one chunk's [chunk, V] logits, whatever M is. Returns (loss, draft argmax [M], KL [M]).
    """
    M = hidden.shape[0]
    h = hidden.detach().requires_grad_(backward)
    total, argmax, kls = 0.0, [], []
    for c in range(0, M, chunk):
        with torch.set_grad_enabled(backward):
            logits = head(h[c:c + chunk]).float()  # [m, V]
            logq = logits.log_softmax(-1)
            lp = logp[c:c + chunk].float()
            p = lp.softmax(-1)  # [m, k] renormalised teacher
            kl = (p * (p.clamp_min(1e-30).log() - logq.gather(1, idx[c:c + chunk].long()))).sum(-1)  # [m]
            if backward:
                (kl.sum() / M).backward()
        total += float(kl.detach().sum())
        kls.append(kl.detach())
        argmax.append(logits.detach().argmax(-1))
    if backward and M:
        hidden.backward(h.grad)
    return total / max(M, 1), torch.cat(argmax) if argmax else torch.zeros(0, dtype=torch.long), \
        torch.cat(kls) if kls else torch.zeros(0)


def _body(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model.base_model(input_ids=ids, use_cache=False).last_hidden_state  # [B, L, h]


def train_step(model, opt, data: TeacherData, batch: Batch, device) -> tuple[float, float]:
    model.train()
    opt.zero_grad(set_to_none=True)
    hidden = _body(model, batch.ids.to(device))[batch.rows.to(device), batch.cols.to(device)]  # [M, h]
    idx, logp = data.topk_idx[batch.labels].to(device), data.topk_logp[batch.labels].to(device)
    loss, argmax, _ = kl_loss(model.get_output_embeddings(), hidden, idx, logp, backward=True)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss, float((argmax == idx[:, 0]).float().mean()) if len(argmax) else float("nan")


@torch.no_grad()
def evaluate(model, data: TeacherData, docs: list[int], preset: DistillPreset, pad_id: int, device) -> dict:
    """Held-out KL, top-1 agreement on every labelled position and on on-policy reply positions (the greedy-α proxy)."""
    model.eval()
    lens = data.doc_len.clamp(max=preset.max_len)
    order = sorted(docs, key=lambda d: int(lens[d]))
    agree = kl = n = 0.0
    agree_r = n_r = 0.0
    batch: list[int] = []
    for i, d in enumerate(order + [None]):
        if d is not None and (not batch or (len(batch) + 1) * int(lens[d]) <= preset.batch_tokens):
            batch.append(d)
            continue
        if batch:
            b = make_batch(data, batch, preset.max_len, pad_id)
            hidden = _body(model, b.ids.to(device))[b.rows.to(device), b.cols.to(device)]
            idx = data.topk_idx[b.labels].to(device)
            _, argmax, kls = kl_loss(model.get_output_embeddings(), hidden, idx,
                                     data.topk_logp[b.labels].to(device), backward=False)
            hit = (argmax == idx[:, 0]).float()
            reply = b.reply.to(device)
            agree += float(hit.sum())
            kl += float(kls.sum())
            n += len(hit)
            agree_r += float(hit[reply].sum())
            n_r += float(reply.sum())
        batch = [d] if d is not None else []
    nan = float("nan")
    return {"agreement_reply": agree_r / n_r if n_r else nan, "agreement_all": agree / n if n else nan,
            "kl": kl / n if n else nan, "positions": int(n), "reply_positions": int(n_r)}


def lr_at(step: int, preset: DistillPreset, total: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak at `total` steps."""
    if step < preset.warmup:
        return preset.lr * (step + 1) / preset.warmup
    frac = min(1.0, (step - preset.warmup) / max(1, total - preset.warmup))
    return preset.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model: torch.nn.Module, preset: DistillPreset) -> torch.optim.Optimizer:
    emb = model.get_input_embeddings().weight
    decay = [p for p in model.parameters() if p.ndim >= 2 and p is not emb]
    rest = [p for p in model.parameters() if p.ndim < 2 or p is emb]
    return torch.optim.AdamW([{"params": decay, "weight_decay": preset.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=preset.lr, betas=(0.9, 0.95))


# --------------------------------------------------------------------------- checkpoints


def checkpoint_path(out: Path) -> Path:
    return out / WORK / "checkpoint.pt"


def save_checkpoint(path: Path, model, opt, step: int, state: dict) -> None:
    """Model, optimizer, RNG and progress in one file, written aside then renamed (a kill leaves the old one)."""
    atomic_torch_save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                       "rng": torch.get_rng_state(), **state}, path)


def load_checkpoint(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: say which and how to recover
        raise SpecbenchError(f"cannot read checkpoint {path} ({type(exc).__name__}); delete it to restart training") from exc


# --------------------------------------------------------------------------- measurements on the exported draft


def _per_token_seconds(model: torch.nn.Module, context: list[int], n: int) -> float:
    from specbench.decoding.cached_model import CachedModel

    lm = CachedModel(model)
    lm.start()
    logits = lm.forward(torch.tensor(context, device=lm.device))
    times = []
    for _ in range(n):
        tok = logits.argmax(-1).view(1)
        t0 = time.perf_counter()
        logits = lm.forward(tok)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_c(draft: torch.nn.Module, target: torch.nn.Module, context: list[int], reps: int, n: int = 16) -> dict:
    """c = draft forward time / target forward time for one new token with a KV cache, on `context`.

    Draft and target alternate over `reps` rounds and each keeps its fastest round's median,
    so a busy machine slows both rather than one.
    """
    d_times, t_times = [], []
    for _ in range(reps):
        t_times.append(_per_token_seconds(target, context, n))
        d_times.append(_per_token_seconds(draft, context, n))
    d, t = min(d_times), min(t_times)
    return {"c": d / t, "draft_ms": d * 1e3, "target_ms": t * 1e3, "context_tokens": len(context), "reps": reps,
            "threads": torch.get_num_threads()}


def speculative_check(target, draft_model, prompts: list[tuple[list[int], int]], gamma: int) -> dict:
    """Decode held-out prompts with decode_speculative at T = 0 and the exported draft; α = accepted / trials."""
    from specbench.config import SamplingConfig
    from specbench.decoding.cached_model import CachedModel
    from specbench.decoding.drafts.model import ModelDraft
    from specbench.decoding.speculative import decode_speculative

    accepted = trials = drafted = emitted = 0
    for ids, max_new in prompts:
        res = decode_speculative(CachedModel(target.model), ModelDraft(draft_model, "distilled"), ids, gamma=gamma,
                                 max_new_tokens=max_new, sampling=SamplingConfig(), generator=None,
                                 eos_ids=target.eos_ids)
        accepted += res.accepted
        trials += res.trials
        drafted += res.drafted
        emitted += len(res.token_ids)
    return {"gamma": gamma, "prompts": len(prompts), "accepted": accepted, "trials": trials, "drafted": drafted,
            "emitted": emitted, "alpha": accepted / trials if trials else float("nan")}


# --------------------------------------------------------------------------- the whole pipeline


@dataclass
class Outcome:
    manifest: dict
    finished: bool  # False when this session stopped early (--max-session-steps); rerun to continue


def distill(cfg: DistillConfig, progress: Progress = lambda e: None,
            on_step: Callable[[int], None] | None = None) -> Outcome:
    """Build (or resume) the teacher data, train (or resume) the draft, export and check it.

    `on_step(step)` runs after every optimizer step (tests use it to simulate a kill).
    """
    from specbench.models import load_model

    cfg = cfg.validate()
    p = cfg.preset
    out = cfg.out
    try:
        (out / WORK).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecbenchError(f"cannot write to {out}: {exc.strerror}; pass a writable --out") from exc
    ckpt_path = checkpoint_path(out)
    ckpt = load_checkpoint(ckpt_path) if ckpt_path.exists() else None
    if cfg.resume and ckpt is None:
        raise SpecbenchError(f"--resume: no checkpoint in {out / WORK}; drop --resume to start a new run there")
    if ckpt is not None and ckpt["key"] != json.loads(json.dumps(cfg.training_key())):
        raise SpecbenchError(f"{out} holds a run with other settings (target, tasks, seed or preset); "
                             f"use a new --out, or the settings in {out / 'manifest.json'}")
    t_start = time.perf_counter()
    target = load_model(cfg.target, cfg.device, "float32")
    if target.is_seq2seq:
        raise SpecbenchError(f"distill trains decoder-only drafts; {cfg.target} is an encoder-decoder model")
    device = target.device

    index = build_teacher_data(cfg, target, progress)
    data = load_teacher_data(index)
    if data.topk_idx.shape[0] and int(data.topk_idx.max()) >= target.vocab_size:
        raise SpecbenchError("teacher data holds ids beyond the target's vocabulary; delete DIR/work/teacher")
    train_docs = torch.nonzero(~data.heldout).view(-1)
    heldout_docs = torch.nonzero(data.heldout).view(-1).tolist()
    pad_id = _pad_id(target)

    model = new_draft(p, target, cfg.seed).to(device)
    opt = make_optimizer(model, p)
    step, curve, heldout_curve, seconds = 0, [], [], 0.0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["rng"])
        step, curve, heldout_curve = ckpt["step"], ckpt["curve"], ckpt["heldout"]
        seconds = ckpt["train_seconds"]
    total = cfg.total_steps
    if step > total:
        raise SpecbenchError(f"{out} is already trained to step {step} > --steps {total}; pass --steps >= {step}")
    schedule = Schedule(data, train_docs, p, cfg.seed)

    def state() -> dict:
        return {"key": cfg.training_key(), "curve": curve, "heldout": heldout_curve, "train_seconds": seconds,
                "data_sha256": index["sha256"]}

    def info() -> str:
        last = curve[-1] if curve else None
        ho = heldout_curve[-1] if heldout_curve else None
        parts = [f"loss {last[1]:.3f}" if last else "", f"held-out α≈{ho[1]:.3f}" if ho else ""]
        return "  ".join(x for x in parts if x)

    progress(Event("train", step, total, info() or "starting"))
    session = 0
    stopped_early = False
    consistent = True  # model, optimizer and `step` agree (False inside a step): only then is a checkpoint exact
    try:
        while step < total:
            if cfg.max_session_steps is not None and session >= cfg.max_session_steps:
                stopped_early = True
                break
            t0 = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = lr_at(step, p, total)
            epoch, docs = schedule.docs_at(step)
            consistent = False
            loss, agree = train_step(model, opt, data, make_batch(data, docs, p.max_len, pad_id), device)
            step += 1
            curve.append([step, loss, agree, epoch])
            consistent = True
            session += 1
            seconds += time.perf_counter() - t0
            if step % p.eval_every == 0 or step == total:
                ev = evaluate(model, data, heldout_docs, p, pad_id, device)
                heldout_curve.append([step, ev["agreement_reply"], ev["agreement_all"], ev["kl"]])
            if step % p.checkpoint_every == 0 or step == total:
                save_checkpoint(ckpt_path, model, opt, step, state())
                _write_json(out / "manifest.json", _manifest(cfg, index, target, model, state(), step, None, "training"))
            progress(Event("train", step, total, info()))
            if on_step is not None:
                on_step(step)
    except KeyboardInterrupt:  # Ctrl-C: keep what is done (mid-step, the last periodic checkpoint stands)
        if consistent:
            save_checkpoint(ckpt_path, model, opt, step, state())
        raise
    if stopped_early:
        save_checkpoint(ckpt_path, model, opt, step, state())
        manifest = _manifest(cfg, index, target, model, state(), step, None, "training")
        _write_json(out / "manifest.json", manifest)
        return Outcome(manifest, finished=False)

    progress(Event("export", 0, 1, "saving and checking the draft"))
    export_draft(model, target, out, p.save_dtype)
    checks = final_checks(cfg, target, data, heldout_docs, index, pad_id)
    checks["total_seconds_this_session"] = time.perf_counter() - t_start
    manifest = _manifest(cfg, index, target, model, state(), step, checks, "done")
    _write_json(out / "manifest.json", manifest)
    progress(Event("export", 1, 1, f"c = {checks['cost']['c']:.3f}, α(γ={p.check_gamma}) = {checks['speculative']['alpha']:.3f}"))
    return Outcome(manifest, finished=True)


def export_draft(model: torch.nn.Module, target, out: Path, dtype: str) -> None:
    """save_pretrained (safetensors) in `dtype`, plus the target's tokenizer; written aside, then moved in."""
    from specbench.models import TORCH_DTYPES

    tmp = out / WORK / "export"
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    export = copy.deepcopy(model).to("cpu", TORCH_DTYPES[dtype]).eval()
    export.generation_config.eos_token_id = sorted(target.eos_ids) if len(target.eos_ids) > 1 else \
        (next(iter(target.eos_ids)) if target.eos_ids else None)
    export.save_pretrained(tmp, safe_serialization=True)
    target.tokenizer.save_pretrained(tmp)
    for f in tmp.iterdir():
        f.chmod(0o644)  # safetensors writes 0600; these files are meant to be shipped and read by anyone
        os.replace(f, out / f.name)
    tmp.rmdir()


def final_checks(cfg: DistillConfig, target, data: TeacherData, heldout_docs: list[int], index: dict, pad_id: int) -> dict:
    """Reload the export through load_model, measure c, held-out agreement after export, and α at T = 0."""
    from specbench.models import load_model

    p = cfg.preset
    draft = load_model(str(cfg.out), cfg.device, "float32")
    ev = evaluate(draft.model, data, heldout_docs, p, pad_id, draft.device)
    on_policy = [d for d in heldout_docs if int(data.kind[d]) == KIND_ON_POLICY]
    prompts = []
    for d in on_policy[:: max(1, len(on_policy) // max(1, p.check_prompts))][:p.check_prompts]:
        s, r = int(data.doc_start[d]), int(data.reply_start[d])
        task_name = index["plan"]["tasks"][int(data.task[d])]
        prompts.append((data.tokens[s:s + r + 1].tolist(), index["plan"]["rows"][task_name]["max_new_tokens"]))
    context = prompts[0][0] if prompts else data.tokens[:32].tolist()
    cost = measure_c(draft.model, target.model, context, p.c_reps)
    spec = speculative_check(target, draft.model, prompts, p.check_gamma)
    size = (cfg.out / "model.safetensors").stat().st_size
    return {"heldout_after_export": ev, "cost": cost, "speculative": spec, "model_bytes": size,
            "n_params": draft.n_params}


def _manifest(cfg: DistillConfig, index: dict, target, model, state: dict, step: int, checks: dict | None,
              status: str) -> dict:
    """manifest.json: what was trained on (and its hash), how, how far, and what it measured."""
    import transformers

    from specbench.measure.records import git_commit

    p = cfg.preset
    curve = state["curve"]
    every = max(1, len(curve) // 200)
    rates = index["rates"]
    return {
        "schema_version": SCHEMA_VERSION,
        "status": status,  # "training" (a checkpoint exists; rerun the command to continue) or "done"
        "command": cfg.command(),
        "target": {"spec": cfg.target, "vocab_size": target.vocab_size,
                   "fingerprint_sha256": index["plan"]["target_fingerprint"]},
        "seed": cfg.seed,
        "steps": {"done": step, "total": cfg.total_steps},
        "preset": dataclasses.asdict(p),
        "data": {
            "tasks": index["plan"]["tasks"], "rows": index["plan"]["rows"],
            "excluded": (f"training excludes what `specbench run --seed 0..{p.exclude_seeds - 1} --limit <= "
                         f"{p.exclude_limit}` picks, and benchmark splits when the source has other splits"),
            "prefix_tokens": index["plan"]["prefix_tokens"], "top_k": p.top_k,
            "labels": rates["labels"], "score_tokens": rates["score_tokens"], "gen_tokens": rates["gen_tokens"],
            "build_seconds": rates["seconds"], "tokens_per_s": rates["tok_s"],
            "shards": len(index["shards"]), "sha256": index["sha256"], "plan_sha256": index["plan_sha256"],
            "folder": index["folder"],
        },
        "model": {"architecture": "LlamaForCausalLM, tied embeddings", "layers": p.layers, "hidden": p.hidden,
                  "intermediate": p.intermediate, "heads": p.heads, "kv_heads": p.kv_heads,
                  "n_params": sum(x.numel() for x in model.parameters()), "saved_dtype": p.save_dtype},
        "training": {
            "seconds": state["train_seconds"], "steps_per_s": step / state["train_seconds"] if state["train_seconds"] else None,
            "loss_curve": [[s, round(l, 5), round(a, 4)] for s, l, a, _ in curve[::every]] + (
                [[s, round(l, 5), round(a, 4)] for s, l, a, _ in curve[-1:]] if curve and (len(curve) - 1) % every else []),
            "loss_curve_columns": ["step", "KL(teacher top-k || draft)", "train top-1 agreement"],
            "heldout": [[s, round(a, 4), round(b, 4), round(k, 5)] for s, a, b, k in state["heldout"]],
            "heldout_columns": ["step", "top-1 agreement on on-policy reply positions (greedy-α proxy)",
                                "top-1 agreement on all positions", "KL"],
            "epochs": curve[-1][3] + 1 if curve else 0,
        },
        "checks": checks,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "git_commit": git_commit(),
        "argv": sys.argv,
    }

"""Stage 1, teacher data: the target reads the offline tasks' text the way the runner feeds it.

For every planned row (see `plan`), the chat-templated prompt, then (a) the target's own greedy
continuation ("on-policy": exactly the tokens speculative decoding drafts at T = 0), (b) a T = 1
sample from its own law (what sampled runs draft on) and (c) the human reference reply. Every
position keeps the target's top-k log-probabilities and ids as a soft label (see `shards`), and for an
EAGLE head (--kind eagle) also the hidden state the output layer read there (fp16), for an EAGLE-3 head (--kind
eagle3) the outputs of the three target layers it fuses instead (fp16, [3H] a position).

Prompts of a task share a long chat-template prefix: it is run once and its KV cache is repeated
over the batch, so per-row work starts at the example's own text. Prompts and references are scored
in batched forward passes; continuations are batched steps (greedy and sampled rows together) that
drop finished rows. Jobs are written as safetensors shards (atomic, sha256 in an index), so a killed
build resumes at the next shard.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specbench.decoding.cached_model import cache_keyword
from specbench.distill.plan import Job, Plan, TeacherRow, feature_layers, make_plan
from specbench.distill.settings import HEAD_KINDS, WORK, DistillConfig, Event, Progress
from specbench.distill.shards import KIND_ON_POLICY, KIND_PREFIX, KIND_REFERENCE, KIND_SAMPLED, Docs
from specbench.errors import SpecbenchError
from specbench.files import atomic_write_bytes, atomic_write_json, atomic_write_text, file_sha256


@dataclass
class Prompts:
    """A job's batch once its prompts are scored (left-padded after the shared prefix)."""

    mask: torch.Tensor  # [B, P + S] attention mask: prefix | left pads | prompt
    last: torch.Tensor  # [B, 1] position of each row's last prompt token
    h_last: torch.Tensor  # [B, H] the target's hidden state there
    idx: torch.Tensor  # [n, k] labels of the rows' own prompt positions (after the prefix), row after row
    lp: torch.Tensor  # [n, k]
    hid: torch.Tensor | None  # [n, F] fp16 features beside idx (--kind eagle: H, eagle3: 3H), else None
    bounds: list[int]  # row i's labels are idx[bounds[i]:bounds[i + 1]]; bounds[-1] = n


class Teacher:
    """The target, run batched with a shared-prefix KV cache, reduced to top-k soft labels."""

    def __init__(
        self,
        model: torch.nn.Module,
        top_k: int,
        eos_ids: frozenset[int],
        pad_id: int,
        keep_hidden: bool = False,
        feature_layers: tuple[int, ...] = (),
    ):
        self.model = model
        self.keep_hidden = keep_hidden  # --kind eagle/eagle3: labelled positions keep their features
        # --kind eagle3: the layers whose outputs are kept (transformers' hidden_states[i]); () keeps the final state
        self.feature_layers = tuple(feature_layers)
        config: Any = model.config  # a transformers config (torch types Module attributes Tensor | Module)
        self.width = int(config.hidden_size)
        self.base = model.base_model
        self.head = model.get_output_embeddings()  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
        self.top_k = top_k
        self.eos = torch.tensor(sorted(eos_ids) or [-1])
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        self._cache_kw = cache_keyword(self.base.forward)  # type: ignore[union-attr]  # torch: Module attrs are Tensor | Module

    def _hidden(self, ids: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor | None, cache) -> torch.Tensor:
        """The final hidden state [.., H], with the kept layers' outputs after it along the last axis (--kind eagle3:
        [.., H + 3H]), so every row selection below carries both; `labels` reads the first H, `feats` the rest."""
        more = {"output_hidden_states": True} if self.feature_layers else {}
        out = self.base(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **{self._cache_kw: cache}, **more
        )  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
        if not self.feature_layers:
            return out.last_hidden_state
        return torch.cat([out.last_hidden_state, *(out.hidden_states[i] for i in self.feature_layers)], dim=-1)

    def feats(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """hidden [M, H(+F)] (from `_hidden`) → the kept features in fp16 on the host for the shard (the final state,
        or the fused layers' outputs), or None when not kept."""
        if not self.keep_hidden:
            return None
        return (hidden[:, self.width :] if self.feature_layers else hidden).half().cpu()

    def labels(
        self,
        hidden: torch.Tensor,
        chunk: int = 1024,
        generator: torch.Generator | None = None,
        sample: torch.Tensor | None = None,
    ):
        """hidden [M, H] → (top-k ids [M, k] int32, top-k log-probs [M, k] fp16, next [M]) via the output layer
        in chunks; next is the argmax, except rows flagged in `sample` [M] bool, drawn from the full law."""
        ids, logps, nxt = [], [], []
        for c in range(0, hidden.shape[0], chunk):
            logits = self.head(hidden[c : c + chunk, : self.width]).float()  # [m, V]
            vals, idx = logits.topk(self.top_k, dim=-1)
            logps.append((vals - logits.logsumexp(-1, keepdim=True)).half())
            ids.append(idx.int())
            pick = idx[:, 0].clone()
            rows = sample[c : c + chunk].to(pick.device) if sample is not None else None
            if rows is not None and rows.any():  # multinomial on a CPU generator: the same draws on every machine
                probs = logits[rows].softmax(-1).cpu()
                pick[rows] = torch.multinomial(probs, 1, generator=generator)[:, 0].to(pick.device)
            nxt.append(pick)
        if not ids:
            empty = torch.zeros(0, self.top_k)
            return empty.int(), empty.half(), torch.zeros(0, dtype=torch.long)
        return torch.cat(ids).cpu(), torch.cat(logps).cpu(), torch.cat(nxt).long()

    @torch.inference_mode()
    def run_job(
        self, job: Job, prefix_len: int, with_reference: bool, sampled: bool
    ) -> tuple[dict[str, torch.Tensor], dict]:
        """Score one job → shard tensors (see `Docs`) and counts {score_tokens, gen_tokens, score_seconds, gen_seconds}.

        Documents come in a fixed order: the shared prefix (once per task), the references, then each
        row's on-policy continuation followed by its sampled one."""
        from transformers import DynamicCache

        t0 = time.perf_counter()
        docs, cache = Docs(), DynamicCache()
        score_tokens = self._score_prefix(job, prefix_len, cache, docs)
        prompts = self._score_prompts(job.rows, prefix_len, cache)
        score_tokens += prompts.bounds[-1]
        if with_reference and any(len(r.reply) > 1 for r in job.rows):
            score_tokens += self._score_references(job.rows, prompts, cache, docs)
        t1 = time.perf_counter()
        gen_tokens = self._add_continuations(job, prefix_len, prompts, cache, docs, sampled)
        counts = {
            "score_tokens": score_tokens,
            "gen_tokens": gen_tokens,
            "score_seconds": t1 - t0,
            "gen_seconds": time.perf_counter() - t1,
        }
        return docs.tensors(job.task, job.heldout, self.top_k), counts

    def _score_prefix(self, job: Job, P: int, cache, docs: Docs) -> int:
        """Run the rows' shared prompt prefix once (a document of its own in the task's first job) and repeat
        its KV cache over the batch → positions labelled."""
        if not P:
            return 0
        prefix = job.rows[0].prompt[:P]
        h = self._hidden(torch.tensor(prefix, device=self.device)[None], None, None, cache)[0]  # [P, H]
        scored = 0
        if job.prefix_doc:
            idx, lp, _ = self.labels(h)
            docs.add(prefix, KIND_PREFIX, 0, P, P, idx, lp, self.feats(h))
            scored = P
        cache.batch_repeat_interleave(len(job.rows))
        return scored

    def _score_prompts(self, rows: list[TeacherRow], P: int, cache) -> Prompts:
        """One batched forward over the prompts after the prefix, left-padded: mask = [prefix | pads | prompt]."""
        dev, B = self.device, len(rows)
        suffixes = [r.prompt[P:] for r in rows]
        S = max(len(s) for s in suffixes)
        ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        mask = torch.zeros(B, P + S, dtype=torch.long)
        mask[:, :P] = 1
        for i, s in enumerate(suffixes):
            ids[i, S - len(s) :] = torch.tensor(s)
            mask[i, P + S - len(s) :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        h = self._hidden(ids, mask, pos[:, P:], cache)  # [B, S, H]
        valid = torch.cat([torch.arange(S - len(s), S) + i * S for i, s in enumerate(suffixes)])
        h_valid = h.reshape(B * S, -1)[valid.to(dev)]
        idx, lp, _ = self.labels(h_valid)
        bounds = [0]
        for s in suffixes:
            bounds.append(bounds[-1] + len(s))
        # h[:, -1]: each row's last prompt position (left padding)
        return Prompts(
            mask=mask, last=pos[:, -1:], h_last=h[:, -1], idx=idx, lp=lp, hid=self.feats(h_valid), bounds=bounds
        )

    def _score_references(self, rows: list[TeacherRow], prompts: Prompts, cache, docs: Docs) -> int:
        """Score each row's human reference after its prompt (on a copy of the cache) → positions labelled."""
        dev, B = self.device, len(rows)
        rcache = copy.deepcopy(cache)
        R = max(len(r.reply) for r in rows)
        rids = torch.full((B, R), self.pad_id, dtype=torch.long)
        rmask = torch.zeros(B, R, dtype=torch.long)
        for i, r in enumerate(rows):
            rids[i, : len(r.reply)] = torch.tensor(r.reply, dtype=torch.long)
            rmask[i, : len(r.reply)] = 1
        rpos = prompts.last + 1 + torch.arange(R, device=dev)
        hr = self._hidden(rids.to(dev), torch.cat([prompts.mask, rmask.to(dev)], 1), rpos, rcache)  # [B, R, H]
        keep = [(i, len(r.reply) - 1) for i, r in enumerate(rows) if len(r.reply) > 1]
        sel = torch.cat([torch.arange(n) + i * R for i, n in keep]).to(dev)
        h_sel = hr.reshape(B * R, -1)[sel]
        r_idx, r_lp, _ = self.labels(h_sel)
        r_hid = self.feats(h_sel)
        off = 0
        for i, n in keep:
            r = rows[i]
            L = len(r.prompt)
            hid = r_hid[off : off + n] if r_hid is not None else None
            docs.add(
                r.prompt + r.reply, KIND_REFERENCE, L, L + n, L - 1, r_idx[off : off + n], r_lp[off : off + n], hid
            )
            off += n
        return len(sel)

    def _add_continuations(self, job: Job, P: int, prompts: Prompts, cache, docs: Docs, sampled: bool) -> int:
        """Continue every prompt greedily (row 2i) and, when asked, with a T = 1 draw from the target's own law
        (row 2i+1), in one batch: a CPU forward over 2b rows costs far less than two over b → forwards run."""
        rows, dev, B = job.rows, self.device, len(job.rows)
        bounds = prompts.bounds
        first = prompts.idx[torch.tensor(bounds[1:]) - 1, 0].long().to(dev)  # [B] greedy first tokens
        mask, last = prompts.mask, prompts.last
        sample = torch.zeros(B, dtype=torch.bool)
        g = torch.Generator().manual_seed(1_000_003 + job.index)  # the draws depend on the job only
        if sampled:
            _, _, drawn = self.labels(prompts.h_last, generator=g, sample=torch.ones(B, dtype=torch.bool))
            first = torch.stack([first, drawn.to(dev)], 1).view(-1)
            sample = torch.tensor([False, True]).repeat(B)
            cache.batch_repeat_interleave(2)
            mask, last = mask.repeat_interleave(2, 0), last.repeat_interleave(2, 0)
        reps = 2 if sampled else 1
        tokens, gidx, glp, ghid, gen_tokens = self._continue(
            cache, mask, last, first, [r for r in rows for _ in range(reps)], g, sample
        )
        for i, r in enumerate(rows):
            L = len(r.prompt)
            k = i * reps
            n_i = len(tokens[k])
            idx = torch.cat([prompts.idx[bounds[i] : bounds[i + 1]], *gidx[k]])
            lp = torch.cat([prompts.lp[bounds[i] : bounds[i + 1]], *glp[k]])
            hid = None if prompts.hid is None else torch.cat([prompts.hid[bounds[i] : bounds[i + 1]], *ghid[k]])
            docs.add(r.prompt + tokens[k], KIND_ON_POLICY, P, L + n_i - 1, L - 1, idx, lp, hid)
            if sampled and len(tokens[k + 1]) > 1:
                n_s = len(tokens[k + 1])
                docs.add(
                    r.prompt + tokens[k + 1],
                    KIND_SAMPLED,
                    L,
                    L + n_s - 1,
                    L - 1,
                    torch.cat(gidx[k + 1]),
                    torch.cat(glp[k + 1]),
                    torch.cat(ghid[k + 1]) if prompts.hid is not None else None,
                )
        return gen_tokens

    def _continue(
        self, cache, mask, last, nxt, rows: list[TeacherRow], generator: torch.Generator, sample: torch.Tensor
    ):
        """Continue every row from its first new token `nxt` [B] until EOS or its max_new, greedily or (rows
        flagged in `sample`) by drawing; finished rows leave the batch (their cache rows are dropped).
        → (tokens per row, top-k ids, log-probs and (--kind eagle) hidden states per step and row, forwards run)."""
        dev = self.device
        tokens: list[list[int]] = [[] for _ in rows]
        gidx: list[list[torch.Tensor]] = [[] for _ in rows]
        glp: list[list[torch.Tensor]] = [[] for _ in rows]
        ghid: list[list[torch.Tensor]] = [[] for _ in rows]
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
                return tokens, gidx, glp, ghid, n
            if len(keep) < len(active):
                sel = torch.tensor(keep, dtype=torch.long)
                cache.batch_select_indices(sel.to(dev))
                mask, last, nxt, active = mask[sel.to(dev)], last[sel.to(dev)], nxt[sel.to(dev)], active[sel]
                sample = sample[sel]
            mask = torch.cat([mask, torch.ones(len(active), 1, dtype=mask.dtype, device=dev)], 1)
            last = last + 1
            h = self._hidden(nxt[:, None], mask, last, cache)[:, 0]  # [b, H]
            idx, lp, nxt = self.labels(h, generator=generator, sample=sample)
            hid = self.feats(h)
            n += len(active)
            for j, a in enumerate(active.tolist()):
                gidx[a].append(idx[j : j + 1])
                glp[a].append(lp[j : j + 1])
                if hid is not None:
                    ghid[a].append(hid[j : j + 1])
            nxt = nxt.to(dev)


# --------------------------------------------------------------------------- the shards on disk


def build_teacher_data(cfg: DistillConfig, target, progress: Progress) -> dict:
    """Plan the jobs, run those not yet on disk, and return the teacher index (shards, hashes, throughput)."""
    folder = cfg.out / WORK / "teacher"
    folder.mkdir(parents=True, exist_ok=True)
    plan = make_plan(cfg, target)
    index = _open_index(folder, plan)
    _run_missing_jobs(cfg, target, plan, folder, index, progress)
    shards = [index["shards"][str(j.index)] for j in plan.jobs]
    combined = hashlib.sha256("".join(s["sha256"] for s in shards).encode()).hexdigest()
    return {
        "folder": str(folder),
        "plan_sha256": plan.sha256,
        "sha256": combined,
        "shards": shards,
        "plan": {k: v for k, v in plan.record.items() if k != "jobs"},
        "rates": _teacher_rates(index),
    }


def _open_index(folder: Path, plan: Plan) -> dict:
    """The shard index of an earlier build of this plan, or a new one (with plan.json beside it)."""
    index_path = folder / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    if index and index.get("plan_sha256") != plan.sha256:
        raise SpecbenchError(
            f"{folder} holds teacher data for another target, task set, preset or teacher dtype; use a new --out or "
            f"delete {folder}"
        )
    if not index:
        index = {"plan_sha256": plan.sha256, "shards": {}}
        atomic_write_text(folder / "plan.json", json.dumps(plan.record) + "\n")
    return index


def _run_missing_jobs(cfg: DistillConfig, target, plan: Plan, folder: Path, index: dict, progress: Progress) -> None:
    """Run every job whose shard is not on disk; each shard, then the index, is written as soon as it is done."""
    p = cfg.preset
    teacher = Teacher(
        target.model,
        p.top_k,
        target.eos_ids,
        target.pad_id,
        keep_hidden=cfg.kind in HEAD_KINDS,
        feature_layers=feature_layers(cfg, target),
    )
    jobs = plan.jobs
    todo = [j for j in jobs if not _shard_ok(folder, index["shards"].get(str(j.index)))]
    done = len(jobs) - len(todo)
    progress(Event("teacher", done, len(jobs), f"{done} of {len(jobs)} shards on disk"))
    for job in todo:
        t0 = time.perf_counter()
        tensors, counts = teacher.run_job(job, plan.prefixes[job.task], p.reference_docs, p.sampled_docs)
        entry = _write_shard(folder, job, tensors)
        index["shards"][str(job.index)] = {
            **entry,
            "heldout": job.heldout,
            "task": plan.task_names[job.task],
            "seconds": time.perf_counter() - t0,
            **counts,
        }
        atomic_write_json(folder / "index.json", index)
        done += 1
        tps = _teacher_rates(index)
        progress(
            Event(
                "teacher",
                done,
                len(jobs),
                f"{tps['labels']:,} labels; {tps['score_tok_s']:.0f} scored tok/s, "
                f"{tps['gen_tok_s']:.0f} generated tok/s",
            )
        )


def _write_shard(folder: Path, job: Job, tensors: dict[str, torch.Tensor]) -> dict:
    """Write one job's shard atomically → its index entry (file, sha256, docs, labels)."""
    from safetensors.torch import save_file

    name = f"shard-{job.index:05d}.safetensors"
    # no metadata: its key order varies, and the same data must hash the same
    atomic_write_bytes(folder / name, lambda tmp: save_file(tensors, str(tmp)))
    return {
        "file": name,
        "sha256": file_sha256(folder / name),
        "docs": int(tensors["doc_len"].numel()),
        "labels": int(tensors["topk_idx"].shape[0]),
    }


def _shard_ok(folder: Path, entry: dict | None) -> bool:
    return entry is not None and bool(entry) and (folder / entry["file"]).is_file()


def _teacher_rates(index: dict) -> dict:
    shards = list(index["shards"].values())
    secs = sum(s["seconds"] for s in shards)
    score, gen = sum(s["score_tokens"] for s in shards), sum(s["gen_tokens"] for s in shards)
    score_s, gen_s = sum(s["score_seconds"] for s in shards), sum(s["gen_seconds"] for s in shards)
    nan = float("nan")
    # scoring = batched forwards over prompts and references; generation = batched greedy steps
    return {
        "labels": sum(s["labels"] for s in shards),
        "score_tokens": score,
        "gen_tokens": gen,
        "seconds": secs,
        "tok_s": (score + gen) / secs if secs else nan,
        "score_tok_s": score / score_s if score_s else nan,
        "gen_tok_s": gen / gen_s if gen_s else nan,
    }

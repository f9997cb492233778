"""Stage 2, training: the draft, its loss, one optimizer step, held-out evaluation and checkpoints.

The draft is a LlamaForCausalLM with tied embeddings of width `hidden` (128 in the full preset): the
output layer is the cost that matters on a CPU (a 49k × d product per drafted token), and tying it to
a narrow embedding makes it a rank-d factorised head that still returns logits over the full
vocabulary, loads with `AutoModelForCausalLM` and works in HF assisted generation. The embedding
starts from the target's output embedding projected on its top principal directions, and the final
norm's gain (the head's logit scale) where logits have unit spread, which Adam would otherwise take
thousands of steps to reach.

Loss: KL(p̃ ‖ q) with p̃ the top-k teacher law renormalised; the vocabulary product runs in chunks
with a manual backward so memory does not grow with the batch. Held-out top-1 agreement on
on-policy positions of prompts never trained on is the greedy-α proxy (at T = 0 a drafted token is
accepted iff it is the target's argmax).

Checkpoints (model, optimizer, RNG, step) are atomic; the batch at step s is a pure function of
(seed, s) (`Schedule`), so a resumed run retraces the uninterrupted one exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.distill.settings import WORK, DistillPreset
from specbench.distill.shards import KIND_ON_POLICY, TeacherData
from specbench.errors import SpecbenchError
from specbench.files import atomic_write_bytes

# --------------------------------------------------------------------------- batches and their order


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
        ids[b, :n] = data.tokens[s : s + n]
        ls, le = int(data.label_start[d]), min(int(data.label_end[d]), n)
        if le <= ls:
            continue
        t = torch.arange(ls, le)
        rows.append(torch.full_like(t, b))
        cols.append(t)
        labels.append(int(data.label_off[d]) + t - ls)
        reply.append((t >= int(data.reply_start[d])) & (int(data.kind[d]) == KIND_ON_POLICY))
    empty = torch.zeros(0, dtype=torch.long)
    return Batch(
        ids,
        torch.cat(rows) if rows else empty,
        torch.cat(cols) if cols else empty,
        torch.cat(labels) if labels else empty,
        torch.cat(reply) if reply else empty.bool(),
    )


def epoch_batches(
    data: TeacherData, train_docs: torch.Tensor, batch_tokens: int, max_len: int, seed: int, epoch: int
) -> list[list[int]]:
    """The batches of one epoch: a seeded shuffle, length-sorted within windows of 512 documents (little
    padding), packed to at most batch_tokens padded tokens, in a seeded order. Pure in (seed, epoch)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = train_docs[torch.randperm(len(train_docs), generator=g)].tolist()
    lens = data.doc_len.clamp(max=max_len)
    batches: list[list[int]] = []
    for w in range(0, len(perm), 512):
        window = sorted(perm[w : w + 512], key=lambda d: (int(lens[d]), d))
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
        self._epoch, self._start = -1, 0
        self._batches: list[list[int]] = []

    def docs_at(self, step: int) -> tuple[int, list[int]]:
        if self._epoch < 0 or step < self._start:
            self._epoch, self._start, self._batches = 0, 0, self._epoch_batches(0)
        while step >= self._start + len(self._batches):
            self._start += len(self._batches)
            self._epoch += 1
            self._batches = self._epoch_batches(self._epoch)
        return self._epoch, self._batches[step - self._start]

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        return epoch_batches(
            self.data, self.train_docs, self.preset.batch_tokens, self.preset.max_len, self.seed, epoch
        )


# --------------------------------------------------------------------------- the draft


def draft_config(preset: DistillPreset, target):
    from transformers import LlamaConfig

    tcfg = target.model.config
    return LlamaConfig(
        vocab_size=target.vocab_size,
        hidden_size=preset.hidden,
        intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers,
        num_attention_heads=preset.heads,
        num_key_value_heads=preset.kv_heads,
        max_position_embeddings=getattr(tcfg, "max_position_embeddings", 2048) or 2048,
        tie_word_embeddings=True,
        bos_token_id=getattr(tcfg, "bos_token_id", None),
        eos_token_id=getattr(tcfg, "eos_token_id", None),
        pad_token_id=target.pad_id,
    )


def new_draft(preset: DistillPreset, target, seed: int) -> torch.nn.Module:
    """A fresh draft; with svd_init its tied embedding is the target's output embedding E on its top
    `hidden` principal directions (E V_h, rescaled), so the draft's head starts as a rank-h slice of the target's."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(draft_config(preset, target))
    E = target.model.get_output_embeddings().weight.detach().float().cpu()  # [V, H]
    if preset.svd_init and E.shape[1] >= preset.hidden:
        _, vecs = torch.linalg.eigh(E.T @ E)  # ascending eigenvalues of the H × H Gram matrix
        proj = E @ vecs[:, -preset.hidden :].flip(-1)  # [V, h]
        # keep the geometry (which tokens are alike), not the scale: at the usual init scale the first
        # logits are near zero (KL ~ log V − H(p)) instead of spread over tens of nats
        proj = proj * (model.config.initializer_range / proj.std())
        with torch.no_grad():
            model.get_input_embeddings().weight.copy_(proj)  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
            # the final norm's gain is the head's logit scale; Adam moves it ~lr per step, so a gain of 1
            # takes thousands of steps to reach a peaked law. Start where logits have unit spread instead.
            model.base_model.norm.weight.fill_(1.0 / (preset.hidden**0.5 * float(proj.std())))  # type: ignore[operator, union-attr]  # torch: Module attrs are Tensor | Module
    model.tie_weights()
    return model


# --------------------------------------------------------------------------- loss, step, evaluation


def kl_loss(
    head: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,
    idx: torch.Tensor,
    logp: torch.Tensor,
    backward: bool,
    chunk: int = 1024,
) -> tuple[float, torch.Tensor, torch.Tensor]:
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
            logits = head(h[c : c + chunk]).float()  # [m, V]
            logq = logits.log_softmax(-1)
            lp = logp[c : c + chunk].float()
            p = lp.softmax(-1)  # [m, k] renormalised teacher
            kl = (p * (p.clamp_min(1e-30).log() - logq.gather(1, idx[c : c + chunk].long()))).sum(-1)  # [m]
            if backward:
                (kl.sum() / M).backward()
        total += float(kl.detach().sum())
        kls.append(kl.detach())
        argmax.append(logits.detach().argmax(-1))
    if backward and M:
        hidden.backward(h.grad)
    return (
        total / max(M, 1),
        torch.cat(argmax) if argmax else torch.zeros(0, dtype=torch.long),
        torch.cat(kls) if kls else torch.zeros(0),
    )


def _body(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model.base_model(input_ids=ids, use_cache=False).last_hidden_state  # type: ignore[operator]  # torch: Module attrs are Tensor | Module; [B, L, h]


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
    for d in order + [None]:
        if d is not None and (not batch or (len(batch) + 1) * int(lens[d]) <= preset.batch_tokens):
            batch.append(d)
            continue
        if batch:
            b = make_batch(data, batch, preset.max_len, pad_id)
            hidden = _body(model, b.ids.to(device))[b.rows.to(device), b.cols.to(device)]
            idx = data.topk_idx[b.labels].to(device)
            _, argmax, kls = kl_loss(
                model.get_output_embeddings(), hidden, idx, data.topk_logp[b.labels].to(device), backward=False
            )
            hit = (argmax == idx[:, 0]).float()
            reply = b.reply.to(device)
            agree += float(hit.sum())
            kl += float(kls.sum())
            n += len(hit)
            agree_r += float(hit[reply].sum())
            n_r += float(reply.sum())
        batch = [d] if d is not None else []
    nan = float("nan")
    return {
        "agreement_reply": agree_r / n_r if n_r else nan,
        "agreement_all": agree / n if n else nan,
        "kl": kl / n if n else nan,
        "positions": int(n),
        "reply_positions": int(n_r),
    }


# --------------------------------------------------------------------------- optimizer and schedule


def lr_at(step: int, preset: DistillPreset, total: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak at `total` steps."""
    if step < preset.warmup:
        return preset.lr * (step + 1) / preset.warmup
    frac = min(1.0, (step - preset.warmup) / max(1, total - preset.warmup))
    return preset.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model: torch.nn.Module, preset: DistillPreset) -> torch.optim.Optimizer:
    emb = model.get_input_embeddings().weight  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
    decay = [p for p in model.parameters() if p.ndim >= 2 and p is not emb]
    rest = [p for p in model.parameters() if p.ndim < 2 or p is emb]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": preset.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=preset.lr,
        betas=(0.9, 0.95),
    )


# --------------------------------------------------------------------------- checkpoints


def checkpoint_path(out: Path) -> Path:
    return out / WORK / "checkpoint.pt"


def save_checkpoint(path: Path, model, opt, step: int, state: dict) -> None:
    """Model, optimizer, RNG and progress in one file, written aside then renamed (a kill leaves the old one)."""
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "step": step,
        "rng": torch.get_rng_state(),
        **state,
    }
    atomic_write_bytes(path, lambda tmp: torch.save(checkpoint, tmp))


def load_checkpoint(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: say which and how to recover
        raise SpecbenchError(
            f"cannot read checkpoint {path} ({type(exc).__name__}); delete it to restart training"
        ) from exc

"""Stage 2 for `--kind eagle`: an EAGLE head (models/eagle_head.py) trained on the target's own hidden states.

At each labelled position t of a teacher document whose next position is labelled too, the head reads the target's
embedding of token t+1 and the target's hidden state h_t (from the shards, fp16) at RoPE position t, and outputs f_t,
its prediction of h_{t+1}. Two losses, as EAGLE (Li et al., 2024) trains: a smooth-L1 regression of f_t on h_{t+1}
(the feature loss) and KL(teacher top-k at t+1 ‖ softmax(lm_head(f_t))) through the target's frozen output layer,
weighted by the preset (`reg_weight`, `kl_weight`). The head attends causally over the document's labelled positions,
and for an on-policy document also over its task's shared prompt prefix (whose hidden states the prefix document
holds), so it sees the whole prompt as it does when drafting; a reference or sampled document's own prompt has no
hidden states in it (they are in the row's on-policy document), so there the head sees the reply only.

An EAGLE-3 head (--kind eagle3, models/eagle3_head.py) reads, instead of h_t, the outputs of three target layers at t
(the shards' features), fused by its fc; it is trained on the KL alone, through its own output layer (a copy of the
target's at the start), as EAGLE-3 drops the feature regression. With `--unroll N` it is trained as EAGLE-3's
"training-time test" does: chained N steps at every position at once, step j fed its own step j-1 output where the
target's features were, attending exactly as it will while drafting depth j (UnrolledKV), its loss weighted 0.8^(j-1).
A head trained on step 1 alone never sees its own outputs as input, and drafts past the first token badly (on the
2-core EPYC, a 600-step head's acceptance by depth read 0.39, 0.05, 0.02: docs/distill.md).

Held-out top-1 agreement is the distilled draft's measure at the same positions (on-policy reply positions): does the
head's argmax for token t+1 (here from h_{t-1} and token t) equal the target's. It is the first drafted token's
greedy-α proxy, the one every later drafted token builds on. Batches come from the same `Schedule` as the draft's, so
a resumed run retraces the uninterrupted one, and checkpoints are the draft's (`TrainingRun`, pipeline.py).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import torch

from specbench.distill.settings import DistillPreset, EaglePreset
from specbench.distill.shards import KIND_ON_POLICY, KIND_PREFIX, TeacherData
from specbench.distill.training import kl_loss
from specbench.errors import SpecbenchError


@dataclass
class EagleBatch:
    ids: torch.Tensor  # [B, L] token t+1 at each head position (right-padded)
    pos: torch.Tensor  # [B, L] the position t itself (RoPE)
    mask: torch.Tensor  # [B, L] 1 at real positions
    src: torch.Tensor  # [B, L] row of h_t in TeacherData.hidden (0 at padding)
    rows: torch.Tensor  # [M] batch row of each real position
    cols: torch.Tensor  # [M] its column
    target: torch.Tensor  # [M] row of h_{t+1} and of the label of token t+2 (TeacherData.hidden / topk_*)
    tok: torch.Tensor  # [B, L] the row of token t+1 in TeacherData.tokens (a chained step j reads token t+1+j)
    last: torch.Tensor  # [M] its document's last label row (a chained step j has a label where target + j ≤ last)
    reply_from: torch.Tensor  # [M] the first reply label row of an on-policy document, beyond any row otherwise (a
    # label row ≥ it predicts a reply token of an on-policy document: the α proxy's positions)


def prefix_docs(data: TeacherData) -> dict[int, int]:
    """task → its shared-prompt-prefix document (the prefix's hidden states, the same for all its prompts)."""
    return {int(data.task[d]): int(d) for d in torch.nonzero(data.kind == KIND_PREFIX).view(-1)}


def make_eagle_batch(data: TeacherData, docs: list[int], max_len: int, prefixes: dict[int, int]) -> EagleBatch:
    """Head positions t = label_start .. label_end-2 of each document (cut to max_len tokens), the loss's. A document
    whose labels start after its task's shared prompt prefix (an on-policy one) gets the prefix's positions in front,
    their hidden states from the prefix document: the head attends over the whole prompt, as it does when drafting."""
    spans = []
    for d in docs:
        ls, le = int(data.label_start[d]), min(int(data.label_end[d]), int(data.doc_len[d]), max_len)
        pd = prefixes.get(int(data.task[d]))
        front = ls if pd is not None and ls > 0 and int(data.doc_len[pd]) == ls else 0  # prefix positions in front
        spans.append((d, ls, max(le - ls - 1, 0), front, pd))
    width = max([front + n for _, _, n, front, _ in spans] + [1])
    B = len(docs)
    ids, pos = torch.zeros(B, width, dtype=torch.long), torch.zeros(B, width, dtype=torch.long)
    mask, src = torch.zeros(B, width, dtype=torch.long), torch.zeros(B, width, dtype=torch.long)
    tok = torch.zeros(B, width, dtype=torch.long)
    rows, cols, target, last, reply_from = [], [], [], [], []
    for b, (d, ls, n, front, pd) in enumerate(spans):
        if n == 0:
            continue
        t = torch.arange(ls - front, ls + n)  # every head position fed; the loss's are the last n
        start, off = int(data.doc_start[d]), int(data.label_off[d]) - ls  # label row of position t: off + t
        own = off + t
        if front:  # positions 0..ls-1: the prefix document's label rows
            own = torch.where(t < ls, int(data.label_off[pd]) + t, own)
        w = front + n
        ids[b, :w], tok[b, :w] = data.tokens[start + t + 1].long(), start + t + 1
        pos[b, :w], mask[b, :w], src[b, :w] = t, 1, own
        t = t[front:]
        rows.append(torch.full((n,), b))
        cols.append(torch.arange(front, w))
        target.append(off + t + 1)
        on_policy = int(data.kind[d]) == KIND_ON_POLICY
        last.append(torch.full((n,), off + ls + n))
        reply_from.append(torch.full((n,), off + int(data.reply_start[d]) if on_policy else len(data.topk_idx)))
    return EagleBatch(ids, pos, mask, src, _cat(rows), _cat(cols), _cat(target), tok, _cat(last), _cat(reply_from))


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


class EagleTrainer:
    """The head, the target's frozen embedding and output layer, and the loss (one step, or an evaluation)."""

    def __init__(
        self,
        head: torch.nn.Module,
        target,
        preset: DistillPreset,
        data: TeacherData,
        autocast: torch.dtype | None = None,
        unroll: int = 1,
    ):
        if data.hidden is None:
            raise SpecbenchError("the teacher data holds no hidden states; delete DIR/work/teacher and rerun")
        if not isinstance(preset, EaglePreset):
            raise SpecbenchError(f"preset {preset.name} is not an eagle preset")
        self.head: Any = head  # an EagleHead or an Eagle3Head (torch types Module attributes Tensor | Module)
        self.preset, self.data = preset, data
        model = target.model
        model.requires_grad_(False)  # frozen: no gradient into the target's embedding or output layer
        self.embed = model.get_input_embeddings()
        self.fused = hasattr(head, "fuse")  # an EAGLE-3 head: fused features in, its own output layer out
        # an EAGLE-3 head's own output layer, over the target's ids even when it drafts over fewer (vocab_logits)
        self.lm_head: Any = self.head.vocab_logits if self.fused else model.get_output_embeddings()
        self.device = target.device
        self.prefixes = prefix_docs(data)
        self.autocast = autocast  # --train-dtype bfloat16: the training step's matmuls (evaluation stays float32)
        self.unroll = unroll  # --unroll: an EAGLE-3 head trained on this many chained steps (1: its first only)

    def _forward(self, b: EagleBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """An EAGLE head's step → (what the output layer reads at the real positions [M, H], the target hidden states
        it predicts there [M, H] float32). An EAGLE-3 head runs `_chained`."""
        dev, hidden = self.device, self.data.hidden
        assert hidden is not None  # checked in __init__
        h_in = hidden[b.src].to(dev).float() * b.mask[..., None].to(dev)  # [B, L, H] (EAGLE-3: [B, L, 3H])
        emb = self.embed(b.ids.to(dev)).float()
        out = self.head(emb, h_in, b.pos.to(dev), attention_mask=b.mask.to(dev))  # [B, L, H]
        return out[b.rows.to(dev), b.cols.to(dev)], hidden[b.target].to(dev).float()

    def _chained(self, b: EagleBatch, steps: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """An EAGLE-3 head chained `steps` times at every position at once (its training-time test): step 1 reads the
        fused target features at t and token t+1, step j its own step j-1 output and token t+j at position t+j-1,
        attending as it would while drafting (models/eagle3_head.UnrolledKV) → per step, at the loss positions that
        still have a label j-1 tokens on: (the normed outputs [M_j, H], their label rows [M_j], reply flags [M_j])."""
        from specbench.models.eagle3_head import UnrolledKV

        dev, hidden, tokens = self.device, self.data.hidden, self.data.tokens
        assert hidden is not None  # checked in __init__
        g = self.head.fuse(hidden[b.src].to(dev).float() * b.mask[..., None].to(dev))  # [B, L, H]
        cache, pad, at = UnrolledKV(), b.mask.to(dev), (b.rows.to(dev), b.cols.to(dev))
        result = []
        for j in range(steps):
            emb = self.embed(tokens[(b.tok + j).clamp(max=len(tokens) - 1)].long().to(dev)).float()
            keys_pad = pad.repeat(1, j + 1)  # the cache's keys: steps 1..j+1's positions, each padded as the batch
            normed, g = self.head(emb, g, (b.pos + j).to(dev), cache=cache, pad=keys_pad)
            keep = b.target + j <= b.last
            rows = b.target[keep] + j
            result.append((normed[at][keep.to(dev)], rows, rows >= b.reply_from[keep]))
        return result

    def train_step(self, opt: torch.optim.Optimizer, docs: list[int]) -> tuple[float, float]:
        """One optimizer step on `docs` → (loss, train top-1 agreement of the first drafted token)."""
        p, data = self.preset, self.data
        self.head.train()
        opt.zero_grad(set_to_none=True)
        b = make_eagle_batch(data, docs, p.max_len, self.prefixes)
        if not len(b.target):
            return float("nan"), float("nan")
        device_type = torch.device(self.device).type
        with torch.autocast(device_type, dtype=self.autocast) if self.autocast else contextlib.nullcontext():
            if self.fused:  # EAGLE-3: the KL alone, over its chained steps
                steps, h_next = self._chained(b, self.unroll), None
            else:  # EAGLE: one step, and the feature regression
                f1, h_next = self._forward(b)
                steps = [(f1, b.target, b.target >= b.reply_from)]
            f, rows, weights = chained_loss_rows(steps)  # one step: every weight 1
            idx = data.topk_idx[rows].to(self.device)
            logp = data.topk_logp[rows].to(self.device)
            reg = torch.nn.functional.smooth_l1_loss(f.float(), h_next) if h_next is not None else torch.zeros(())
            w = p.kl_weight
            if h_next is not None:
                (p.reg_weight * reg).backward(retain_graph=True)
            scale = w * weights.to(f.device)[:, None]  # gradient scale per row
            f_w = f * scale + f.detach() * (1 - scale)  # f's value, its gradient scaled (kl_loss backpropagates it)
            _, argmax, kls = kl_loss(self.lm_head, f_w, idx, logp, backward=True)  # its law in float32
        torch.nn.utils.clip_grad_norm_(self.head.parameters(), 1.0)
        opt.step()
        loss = p.reg_weight * float(reg.detach()) + w * float((kls * weights).sum() / len(kls))
        first = len(steps[0][1])  # step 1's rows come first
        return loss, float((argmax[:first] == idx[:first, 0]).float().mean())

    @torch.no_grad()
    def evaluate(self, docs: list[int]) -> dict:
        """Held-out KL, regression loss and top-1 agreement (all positions; on-policy reply positions: the α proxy);
        for an EAGLE-3 head also `agreement_chained`: the reply positions' agreement of its second chained step (fed its
        own first output and the target's token: the second drafted token's α proxy, given the first was accepted)."""
        p, data = self.preset, self.data
        self.head.eval()
        lens = data.doc_len.clamp(max=p.max_len)
        order = sorted(docs, key=lambda d: int(lens[d]))
        sums = {"agree": 0.0, "kl": 0.0, "reg": 0.0, "n": 0.0, "agree_r": 0.0, "n_r": 0.0, "agree_c": 0.0, "n_c": 0.0}
        batch: list[int] = []
        for d in order + [None]:
            if d is not None and (not batch or (len(batch) + 1) * int(lens[d]) <= p.batch_tokens):
                batch.append(d)
                continue
            b = make_eagle_batch(data, batch, p.max_len, self.prefixes) if batch else None
            if b is not None and len(b.target):
                if self.fused:
                    (f, _, reply), (f2, rows2, reply2) = self._chained(b, 2)
                    h_next = None
                    hit2, _ = self._judged(f2, rows2)
                    sums["agree_c"] += float(hit2[reply2.to(self.device)].sum())
                    sums["n_c"] += float(reply2.sum())
                else:
                    (f, h_next), reply = self._forward(b), b.target >= b.reply_from
                hit, kls = self._judged(f, b.target)
                reply = reply.to(self.device)
                reg = (
                    torch.nn.functional.smooth_l1_loss(f, h_next, reduction="none").mean(-1)
                    if h_next is not None
                    else torch.full_like(hit, float("nan"))
                )
                sums["agree"] += float(hit.sum())
                sums["kl"] += float(kls.sum())
                sums["reg"] += float(reg.sum())
                sums["n"] += len(hit)
                sums["agree_r"] += float(hit[reply].sum())
                sums["n_r"] += float(reply.sum())
            batch = [d] if d is not None else []
        n, n_r, n_c, nan = sums["n"], sums["n_r"], sums["n_c"], float("nan")
        return {
            "agreement_reply": sums["agree_r"] / n_r if n_r else nan,
            "agreement_chained": sums["agree_c"] / n_c if n_c else None,  # None: not an EAGLE-3 head
            "agreement_all": sums["agree"] / n if n else nan,
            # None: a reduced draft vocabulary lacks an id the teacher's top-k names (the KL is infinite there)
            "kl": None if math.isinf(sums["kl"]) else sums["kl"] / n if n else nan,
            "feature_loss": sums["reg"] / n if n else nan,
            "positions": int(n),
            "reply_positions": int(n_r),
            "chained_positions": int(n_c),
        }

    def _judged(self, f: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs at label `rows` → (top-1 agreement with the target per row, float; KL per row), no gradient."""
        idx = self.data.topk_idx[rows].to(self.device)
        _, argmax, kls = kl_loss(self.lm_head, f, idx, self.data.topk_logp[rows].to(self.device), False)
        return (argmax == idx[:, 0]).float(), kls


CHAIN_DECAY = 0.8  # step j's loss weight is CHAIN_DECAY ** (j - 1), EAGLE-3's training script's


def chained_loss_rows(
    steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """EagleTrainer._chained's steps → (outputs [M, H], label rows [M], row weights [M]) of one KL over all of them:
    each row weighs CHAIN_DECAY^(j-1) · M / M_j, so the mean over rows is Σ_j CHAIN_DECAY^(j-1) · (step j's mean KL),
    EAGLE-3's loss (pure). Step 1's rows come first."""
    total = sum(len(rows) for _, rows, _ in steps)
    live = [(j, f, rows) for j, (f, rows, _) in enumerate(steps) if len(rows)]  # a step past every label: none
    return (
        torch.cat([f for _, f, _ in live]),
        torch.cat([rows for _, _, rows in live]),
        torch.cat([torch.full((len(rows),), CHAIN_DECAY**j * total / len(rows)) for j, _, rows in live]),
    )


def evaluation_by_task(trainer: EagleTrainer, heldout_docs: list[int], names: list[str]) -> tuple[dict, dict]:
    """The held-out checks per task (each its own passes: a translation's next token is not a summary's copied phrase)
    and pooled over them → (pooled, {task name: evaluation}); `names`: the teacher plan's tasks, by index."""
    task = trainer.data.task
    by_task = {
        (names[t] if t < len(names) else str(t)): trainer.evaluate([d for d in heldout_docs if int(task[d]) == t])
        for t in sorted({int(task[d]) for d in heldout_docs})
    }
    return pooled_evaluation(list(by_task.values())), by_task


def pooled_evaluation(parts: list[dict]) -> dict:
    """Several `evaluate` results on disjoint documents (each task's) → the one `evaluate` gives on all of them: each
    mean weighted by the positions it is over (pure; the sums are additive, so no second pass is needed)."""
    n, n_r, nan = sum(e["positions"] for e in parts), sum(e["reply_positions"] for e in parts), float("nan")
    n_c = sum(e.get("chained_positions", 0) for e in parts)

    def mean(key: str, weight: str, total: int) -> float:
        return sum(e[key] * e[weight] for e in parts if e.get(weight)) / total if total else nan

    return {
        "agreement_reply": mean("agreement_reply", "reply_positions", n_r),
        "agreement_chained": mean("agreement_chained", "chained_positions", n_c) if n_c else None,
        "agreement_all": mean("agreement_all", "positions", n),
        "kl": None if any(e["kl"] is None for e in parts) else mean("kl", "positions", n),
        "feature_loss": mean("feature_loss", "positions", n),
        "positions": n,
        "reply_positions": n_r,
        "chained_positions": n_c,
    }


def make_head_optimizer(head: torch.nn.Module, preset: DistillPreset) -> torch.optim.Optimizer:
    """AdamW: weight decay on matrices, none on norms."""
    decay = [p for p in head.parameters() if p.ndim >= 2 and p.requires_grad]
    rest = [p for p in head.parameters() if p.ndim < 2 and p.requires_grad]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": preset.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=preset.lr,
        betas=(0.9, 0.95),
    )


def new_eagle_head(target, seed: int, preset: DistillPreset) -> torch.nn.Module:
    """A fresh head for the target: an EAGLE-3 head for a fused-features preset, else an EAGLE head as deep as the
    preset says (its body's 1-row embedding stub frozen: it is never read)."""
    from specbench.models.eagle_head import new_head

    if isinstance(preset, EaglePreset) and preset.features == "fused":
        from specbench.models.eagle3_head import new_eagle3_head

        return new_eagle3_head(target.model, seed)
    head = new_head(target.model, seed, getattr(preset, "head_layers", 1))
    head.body.embed_tokens.requires_grad_(False)
    return head

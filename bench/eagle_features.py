"""Which target features let a one-layer EAGLE head agree with the target? A probe for issue 43 (not a product).

The EAGLE-1 head `specbench distill --kind eagle` trains reads the target's final hidden state and reached held-out
top-1 agreement 0.30-0.34 against a goal of 0.6 (docs/distill.md). The question this answers before building more:
does EAGLE-3's fusion of a low, a middle and a high layer (vLLM's eagle3 layout, models/eagle3_head.py) do better on
the same data and the same budget? Every variant is trained from the same seed on the same positions for the same
steps, and evaluated on the same held-out positions:

- `eagle1`: vLLM's eagle layout (models/eagle_head.py) on the final normed hidden state; feature regression + KL
  (KL weight 1.0, the better of the two tried in docs/distill.md);
- `eagle3`: vLLM's eagle3 layout on the fused layers (2, L/2, L-3); KL only, through its own copy of the output layer;
- `eagle3-final`: the eagle3 layout on the final hidden state alone: separates the layout and loss from the features.

Data: task rows from the distill plan's split (training rows; the held-out rows `specbench run --seed 0` picks first),
each prompt + its reference reply teacher-forced through the target in float32, every layer's hidden state kept (fp16)
with the target's top-k law at each position. Agreement is measured at held-out reply positions: does the head's
argmax from the real features at t and token t+1 equal the target's argmax for token t+2 ("reference"), and on the
target's own greedy replies to held-out prompts ("on-policy", the α proxy the distill manifest reports).

    .venv/bin/python bench/eagle_features.py --rows 300 --steps 300 --out results/bench-eagle-features.json
"""

from __future__ import annotations

import argparse
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.distill.plan import task_rows
from specbench.distill.settings import DEFAULT_TASKS, get_preset
from specbench.distill.training import kl_loss
from specbench.files import atomic_write_json
from specbench.models.eagle3_head import Eagle3Head, default_aux_layers

TOP_K = 16


@dataclass
class Doc:
    ids: torch.Tensor  # [n] tokens
    reply_start: int  # first reply position
    feats: dict[str, torch.Tensor]  # "final" [n, H], "fused" [n, 3H] (fp16)
    top_idx: torch.Tensor  # [n, k] the target's top-k for the token after each position
    top_logp: torch.Tensor  # [n, k]


@torch.no_grad()
def teacher_doc(model, ids: list[int], reply_start: int, aux: tuple[int, ...]) -> Doc:
    x = torch.tensor(ids)[None]
    out = model.model(input_ids=x, output_hidden_states=True)
    hs = out.hidden_states  # [L+1] entries, [1, n, H]; the last is after the final norm
    final = hs[-1][0]
    logp = model.lm_head(final).float().log_softmax(-1)
    top_logp, top_idx = logp.topk(TOP_K, dim=-1)
    fused = torch.cat([hs[i][0] for i in aux], dim=-1)
    return Doc(x[0], reply_start, {"final": final.half(), "fused": fused.half()}, top_idx.int(), top_logp.half())


@torch.no_grad()
def greedy_reply(model, prompt: list[int], max_new: int, eos: frozenset[int]) -> list[int]:
    out = model.generate(torch.tensor(prompt)[None], max_new_tokens=max_new, do_sample=False, pad_token_id=0)
    reply = out[0, len(prompt) :].tolist()
    for i, t in enumerate(reply):
        if t in eos:
            return reply[: i + 1]
    return reply


def batches(docs: list[Doc], batch_tokens: int, rng: random.Random):
    order = list(range(len(docs)))
    while True:
        rng.shuffle(order)
        batch: list[Doc] = []
        for i in order:
            batch.append(docs[i])
            if sum(len(d.ids) for d in batch) >= batch_tokens:
                yield batch
                batch = []


def pack(batch: list[Doc], feat: str):
    """→ ids of token t+1 [B, W], features at t [B, W, F], positions, pad mask, and the label rows (t+1) per real
    position of the loss (t = 0 .. n-3), as flat index tensors."""
    W = max(len(d.ids) for d in batch) - 2
    F = batch[0].feats[feat].shape[-1]
    ids, pos = torch.zeros(len(batch), W, dtype=torch.long), torch.arange(W).repeat(len(batch), 1)
    pad, x = torch.zeros(len(batch), W, dtype=torch.long), torch.zeros(len(batch), W, F)
    rows, cols, idx, logp, reply, nxt = [], [], [], [], [], []
    for b, d in enumerate(batch):
        n = len(d.ids) - 2
        ids[b, :n], pad[b, :n], x[b, :n] = d.ids[1 : n + 1], 1, d.feats[feat][:n].float()
        rows.append(torch.full((n,), b))
        cols.append(torch.arange(n))
        idx.append(d.top_idx[1 : n + 1])
        logp.append(d.top_logp[1 : n + 1])
        reply.append(torch.arange(n) + 2 >= d.reply_start)
        nxt.append(d.feats["final"][1 : n + 1].float())
    cat = torch.cat
    return ids, x, pos, pad, cat(rows), cat(cols), cat(idx), cat(logp), cat(reply), cat(nxt)


class Variant:
    """One head under training: its forward from packed inputs to the vector the output layer reads."""

    def __init__(self, name: str, target, aux: tuple[int, ...]):
        from specbench.models.eagle_head import new_head

        torch.manual_seed(0)
        self.name, self.embed, self.target_model = name, target.model.get_input_embeddings(), target.model
        self.feat = "fused" if name == "eagle3" else "final"
        if name == "eagle1":
            self.head: torch.nn.Module = new_head(target.model, 0, 1)
            self.head.body.embed_tokens.requires_grad_(False)
            self.out_layer = target.model.get_output_embeddings()
        else:
            layers = aux if name == "eagle3" else (len(target.model.model.layers),)
            self.head = Eagle3Head(target.model.config, layers, target.model.get_output_embeddings().weight)
            self.out_layer = self.head.lm_head

    def forward(self, ids, x, pos, pad) -> torch.Tensor:
        emb = self.embed(ids).float()
        if self.name == "eagle1":
            return self.head(emb, x, pos, attention_mask=pad)
        normed, _ = self.head(emb, self.head.fuse(x), pos, pad=pad)
        return normed


def train(variant: Variant, docs: list[Doc], steps: int, batch_tokens: int, lr: float) -> list[float]:
    params = [p for p in variant.head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen, losses = batches(docs, batch_tokens, random.Random(0)), []
    for step in range(steps):
        scale = min(1.0, (step + 1) / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in opt.param_groups:
            group["lr"] = lr * scale
        ids, x, pos, pad, rows, cols, idx, logp, _, nxt = pack(next(gen), variant.feat)
        opt.zero_grad(set_to_none=True)
        f = variant.forward(ids, x, pos, pad)[rows, cols]
        reg = 0.0
        if variant.name == "eagle1":
            r = torch.nn.functional.smooth_l1_loss(f, nxt)
            r.backward(retain_graph=True)
            reg = float(r.detach())
        kl, _, _ = kl_loss(variant.out_layer, f, idx, logp, backward=True)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(reg + kl)
    return losses


@torch.no_grad()
def position_hits(variant: Variant, docs: list[Doc]) -> torch.Tensor:
    """[n] bool over the docs' reply positions, in order: does the head's argmax equal the target's there."""
    hits = []
    for d in docs:
        ids, x, pos, pad, rows, cols, idx, logp, reply, _ = pack([d], variant.feat)
        f = variant.forward(ids, x, pos, pad)[rows, cols][reply]
        hits.append(variant.out_layer(f).argmax(-1) == idx[reply][:, 0])
    return torch.cat(hits) if hits else torch.zeros(0, dtype=torch.bool)


def paired_difference(a: torch.Tensor, b: torch.Tensor) -> dict:
    """Two heads' hits on the same positions → the difference in agreement and the exact McNemar test (a two-sided
    binomial test on the positions where exactly one of them agrees; scipy.stats.binomtest)."""
    from scipy.stats import binomtest

    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    p = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    return {"difference": float(a.float().mean() - b.float().mean()), "only_a": only_a, "only_b": only_b, "p": p}


def save_variant(variant: Variant, folder: Path) -> str:
    """The trained head in its vLLM layout (eagle1: vLLM's eagle, the eagle3 variants: eagle3), float32, so `specbench
    run --draft eagle:<folder>` (or eagle3:) and vLLM load it."""
    from specbench.models.eagle3_head import Eagle3Head, save_eagle3_head
    from specbench.models.eagle_head import save_head

    head = variant.head
    if isinstance(head, Eagle3Head):
        if not head.config_dict:  # built from the target's config here: the layout's config.json from it
            from specbench.models.eagle3_head import eagle3_config
            from specbench.models.eagle_head import llama_target_config

            head.config_dict = eagle3_config(llama_target_config(variant.target_model), head.aux_layers)
        save_eagle3_head(head, folder, torch.float32)
    else:
        save_head(head, folder, torch.float32)  # type: ignore[arg-type]  # an EagleHead
    return str(folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=300, help="training rows per task")
    ap.add_argument("--heldout", type=int, default=48, help="held-out rows per task")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--variants", default="eagle1,eagle3,eagle3-final")
    ap.add_argument("--out", default="results/bench-eagle-features.json")
    ap.add_argument("--save-dir", default=None, help="also save each trained head here, <dir>/<variant> (vLLM layout)")
    args = ap.parse_args()
    from specbench.models import load_model
    from specbench.tasks.specs import load_task

    t0 = time.perf_counter()
    target = load_model(args.target, "cpu", "float32")
    model = target.model.eval()
    aux = default_aux_layers(len(model.model.layers))
    tok, preset = target.tokenizer, get_preset("full")
    eos_id = tok.eos_token_id
    train_docs, ref_docs, pol_docs = [], [], []
    for i, name in enumerate(DEFAULT_TASKS):
        spec = load_task(name)
        train_rows, held_rows = task_rows(spec, preset, i, tok, eos_id)
        for r in train_rows[: args.rows]:
            ids = (r.prompt + r.reply)[: args.max_len]
            if len(ids) > len(r.prompt) + 2:
                train_docs.append(teacher_doc(model, ids, len(r.prompt), aux))
        for r in held_rows[: args.heldout]:
            ids = (r.prompt + r.reply)[: args.max_len]
            if len(ids) > len(r.prompt) + 2:
                ref_docs.append(teacher_doc(model, ids, len(r.prompt), aux))
            reply = greedy_reply(model, r.prompt, min(r.max_new, 64), target.eos_ids)
            pol_docs.append(teacher_doc(model, r.prompt + reply, len(r.prompt), aux))
    data_s = time.perf_counter() - t0
    print(
        f"teacher data: {len(train_docs)} training docs ({sum(len(d.ids) for d in train_docs)} positions), "
        f"{len(ref_docs)} + {len(pol_docs)} held-out, {data_s:.0f} s",
        flush=True,
    )
    result: dict = {"target": args.target, "aux_layers": aux, "args": vars(args), "data_s": data_s, "variants": {}}
    hits: dict[str, dict[str, torch.Tensor]] = {}
    for name in args.variants.split(","):
        t1 = time.perf_counter()
        v = Variant(name, target, aux)
        losses = train(v, train_docs, args.steps, args.batch_tokens, args.lr)
        hits[name] = {"reference": position_hits(v, ref_docs), "on_policy": position_hits(v, pol_docs)}
        ref, n_ref = float(hits[name]["reference"].float().mean()), len(hits[name]["reference"])
        pol, n_pol = float(hits[name]["on_policy"].float().mean()), len(hits[name]["on_policy"])
        row = {
            "reference": ref,
            "reference_positions": n_ref,
            "on_policy": pol,
            "on_policy_positions": n_pol,
            "loss_first": losses[0],
            "loss_last": sum(losses[-10:]) / 10,
            "train_s": time.perf_counter() - t1,
        }
        result["variants"][name] = row
        if args.save_dir and name != "eagle3-final":  # that control reads transformers' post-norm layer L: no layout
            row["folder"] = save_variant(v, Path(args.save_dir) / name)
        print(
            f"{name}: held-out top-1 reference {ref:.3f} (n {n_ref}), on-policy {pol:.3f} (n {n_pol}); "
            f"loss {row['loss_first']:.2f} → {row['loss_last']:.2f}; {row['train_s']:.0f} s",
            flush=True,
        )
        result["paired"] = {  # every earlier variant against this one, on the same positions
            f"{a} vs {name}": {k: paired_difference(hits[a][k], hits[name][k]) for k in ("reference", "on_policy")}
            for a in hits
            if a != name
        } | result.get("paired", {})
        atomic_write_json(Path(args.out), result)


if __name__ == "__main__":
    main()

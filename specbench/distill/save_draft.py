"""Stage 3, export and checks: the draft is saved with `save_pretrained` (safetensors) and the target's
tokenizer, reloaded through `specbench.models.load_model`, timed against the target (c), run in
`decode_speculative` on held-out prompts (α at T = 0), and described in manifest.json together with
the command that rebuilds it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

from specbench.distill.settings import WORK, DistillConfig
from specbench.distill.shards import KIND_ON_POLICY, TeacherData
from specbench.distill.training import evaluate
from specbench.files import replacing

SCHEMA_VERSION = 1


# --------------------------------------------------------------------------- the exported folder


def export_draft(model: torch.nn.Module, target, out: Path, dtype: str) -> None:
    """save_pretrained (safetensors) in `dtype`, plus the target's tokenizer, at the top of `out`.

    Built whole in a hidden folder under work/ (removed on any failure); each file is then renamed
    over its namesake in `out`, so a reader sees the old file or the new one, never a torn one."""
    export = _export_copy(model, target, dtype)
    staging = out / WORK / "export"
    shutil.rmtree(staging, ignore_errors=True)  # what an export interrupted by an older version left
    with replacing(staging) as folder:
        export.save_pretrained(folder, safe_serialization=True)  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
        target.tokenizer.save_pretrained(folder)
        for f in sorted(folder.iterdir()):
            with replacing(out / f.name) as tmp:  # world-readable: these files are shipped
                os.replace(f, tmp)
    staging.rmdir()  # emptied by the moves


def _export_copy(model: torch.nn.Module, target, dtype: str) -> torch.nn.Module:
    """A CPU copy in the saved dtype whose generation config stops at the target's end-of-turn ids."""
    from specbench.models import TORCH_DTYPES

    export = copy.deepcopy(model).to("cpu", TORCH_DTYPES[dtype]).eval()
    export.generation_config.eos_token_id = (  # type: ignore[union-attr]  # torch: Module attrs are Tensor | Module
        sorted(target.eos_ids) if len(target.eos_ids) > 1 else (next(iter(target.eos_ids)) if target.eos_ids else None)
    )
    return export


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
    return {
        "c": d / t,
        "draft_ms": d * 1e3,
        "target_ms": t * 1e3,
        "context_tokens": len(context),
        "reps": reps,
        "threads": torch.get_num_threads(),
    }


def speculative_check(target, proposer, prompts: list[tuple[list[int], int]], gamma: int) -> dict:
    """Decode held-out prompts with decode_speculative at T = 0 and the exported draft (a proposer: the distilled
    model's ModelDraft, or the EAGLE head's draft); α = accepted / trials."""
    from specbench.config import SamplingConfig
    from specbench.decoding.cached_model import CachedModel
    from specbench.decoding.speculative import decode_speculative

    counts = {"accepted": 0, "trials": 0, "drafted": 0, "emitted": 0}
    for ids, max_new in prompts:
        res = decode_speculative(
            CachedModel(target.model),
            proposer,
            ids,
            gamma=gamma,
            max_new_tokens=max_new,
            sampling=SamplingConfig(),
            generator=None,
            eos_ids=target.eos_ids,
        )
        counts["accepted"] += res.accepted
        counts["trials"] += res.trials
        counts["drafted"] += res.drafted
        counts["emitted"] += len(res.token_ids)
    alpha = counts["accepted"] / counts["trials"] if counts["trials"] else float("nan")
    return {"gamma": gamma, "prompts": len(prompts), **counts, "alpha": alpha}


def _check_prompts(
    cfg: DistillConfig, data: TeacherData, heldout_docs: list[int], index: dict
) -> list[tuple[list[int], int]]:
    """(prompt ids, max_new_tokens) of `check_prompts` held-out on-policy documents, spread evenly over them."""
    p = cfg.preset
    on_policy = [d for d in heldout_docs if int(data.kind[d]) == KIND_ON_POLICY]
    prompts = []
    for d in on_policy[:: max(1, len(on_policy) // max(1, p.check_prompts))][: p.check_prompts]:
        s, r = int(data.doc_start[d]), int(data.reply_start[d])
        task_name = index["plan"]["tasks"][int(data.task[d])]
        prompts.append((data.tokens[s : s + r + 1].tolist(), index["plan"]["rows"][task_name]["max_new_tokens"]))
    return prompts


def final_checks(
    cfg: DistillConfig, target, data: TeacherData, heldout_docs: list[int], index: dict, pad_id: int
) -> dict:
    """Reload the export through load_model, measure c, held-out agreement after export, and α at T = 0."""
    from specbench.decoding.drafts.model import ModelDraft
    from specbench.models import load_model

    p = cfg.preset
    draft = load_model(str(cfg.out), cfg.device, "float32")
    ev = evaluate(draft.model, data, heldout_docs, p, pad_id, draft.device)
    prompts = _check_prompts(cfg, data, heldout_docs, index)
    context = prompts[0][0] if prompts else data.tokens[:32].tolist()
    cost = measure_c(draft.model, target.model, context, p.c_reps)
    spec = speculative_check(target, ModelDraft(draft.model, "distilled"), prompts, p.check_gamma)
    size = (cfg.out / "model.safetensors").stat().st_size
    return {
        "heldout_after_export": ev,
        "cost": cost,
        "speculative": spec,
        "model_bytes": size,
        "n_params": draft.n_params,
    }


# --------------------------------------------------------------------------- manifest.json


def build_manifest(
    cfg: DistillConfig, index: dict, target, model, state: dict, step: int, checks: dict | None, status: str
) -> dict:
    """manifest.json: what was trained on (and its hash), how, how far, and what it measured."""
    import transformers

    from specbench.measure.results.provenance import git_commit

    p = cfg.preset
    return {
        "schema_version": SCHEMA_VERSION,
        "status": status,  # "training" (a checkpoint exists; rerun the command to continue) or "done"
        "command": cfg.command(),
        "target": {
            "spec": cfg.target,
            "vocab_size": target.vocab_size,
            "fingerprint_sha256": index["plan"]["target_fingerprint"],
        },
        "seed": cfg.seed,
        "steps": {"done": step, "total": cfg.total_steps},
        "preset": dataclasses.asdict(p),
        "data": _data_section(cfg, index),
        "model": _model_section(cfg, model),
        "training": _training_section(state, step, cfg.kind),
        "checks": checks,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "git_commit": git_commit(),
        "argv": sys.argv,
    }


def _model_section(cfg: DistillConfig, model) -> dict:
    p = cfg.preset
    if cfg.kind == "eagle3":  # models/eagle3_head.py
        tensors = model.head_tensors()
        return {
            "architecture": "EAGLE-3 head, vLLM's eagle3 layout: fc [H, 3H] over the target layers "
            f"{list(model.aux_layers)}, one decoder layer reading 2H, its own norm and output layer",
            "hidden": int(tensors["fc.weight"].shape[0]),
            "n_params": sum(v.numel() for v in tensors.values()),
            "saved_dtype": p.save_dtype,
            "loss": {"kl_weight": p.kl_weight},  # type: ignore[attr-defined]  # EaglePreset
        }
    if cfg.kind == "eagle":  # the head's shape is the target's (models/eagle_head.py)
        tensors = model.head_tensors()
        return {
            "architecture": "EAGLE head, vLLM's eagle layout: fc [H, 2H] and one Llama decoder layer (no input norm), "
            "on the target's embedding and output layer",
            "hidden": int(tensors["fc.weight"].shape[0]),
            "n_params": sum(v.numel() for v in tensors.values()),
            "saved_dtype": p.save_dtype,
            "loss": {"reg_weight": p.reg_weight, "kl_weight": p.kl_weight},  # type: ignore[attr-defined]  # EaglePreset
        }
    return {
        "architecture": "LlamaForCausalLM, tied embeddings",
        "layers": p.layers,
        "hidden": p.hidden,
        "intermediate": p.intermediate,
        "heads": p.heads,
        "kv_heads": p.kv_heads,
        "n_params": sum(x.numel() for x in model.parameters()),
        "saved_dtype": p.save_dtype,
    }


def _data_section(cfg: DistillConfig, index: dict) -> dict:
    p = cfg.preset
    rates = index["rates"]
    return {
        "tasks": index["plan"]["tasks"],
        "rows": index["plan"]["rows"],
        "excluded": (
            f"training excludes what `specbench run --seed 0..{p.exclude_seeds - 1} --limit <= "
            f"{p.exclude_limit}` picks, and benchmark splits when the source has other splits"
        ),
        "prefix_tokens": index["plan"]["prefix_tokens"],
        "top_k": p.top_k,
        "labels": rates["labels"],
        "score_tokens": rates["score_tokens"],
        "gen_tokens": rates["gen_tokens"],
        "build_seconds": rates["seconds"],
        "tokens_per_s": rates["tok_s"],
        "shards": len(index["shards"]),
        "sha256": index["sha256"],
        "plan_sha256": index["plan_sha256"],
        "folder": index["folder"],
    }


def _training_section(state: dict, step: int, kind: str = "draft") -> dict:
    """The loss curve thinned to about 200 points (the last step always kept) and the held-out curve."""
    curve = state["curve"]
    every = max(1, len(curve) // 200)
    seconds = state["train_seconds"]
    return {
        "seconds": seconds,
        "steps_per_s": step / seconds if seconds else None,
        "loss_curve": [[s, round(loss, 5), round(a, 4)] for s, loss, a, _ in curve[::every]]
        + (
            [[s, round(loss, 5), round(a, 4)] for s, loss, a, _ in curve[-1:]]
            if curve and (len(curve) - 1) % every
            else []
        ),
        "loss_curve_columns": [
            "step",
            "KL(teacher top-k || draft)" if kind != "eagle" else "reg_weight·smooth-L1(hidden) + kl_weight·KL",
            "train top-1 agreement",
        ],
        "heldout": [[s, round(a, 4), round(b, 4), round(k, 5)] for s, a, b, k in state["heldout"]],
        "heldout_columns": [
            "step",
            "top-1 agreement on on-policy reply positions (greedy-α proxy)",
            "top-1 agreement on all positions",
            "KL",
        ],
        "epochs": curve[-1][3] + 1 if curve else 0,
    }

"""What a run calibrates before timing, and how the backends are readied for it: the pass sizes, the caches sized and
shapes compiled first (so the curve is the one the run sees), and the batched curve at --batch-size B > 1. Apart from
planning.py, which decides the run and calls these."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from specbench.config import RunConfig
from specbench.decoding.base import Proposer, model_caches
from specbench.engines.session import Session
from specbench.measure.auto.calibration import session_batch_curve

if TYPE_CHECKING:
    from specbench.measure.run.arms import Prepared


def widest_pass(config: RunConfig) -> int:
    """The most tokens one target pass of the run feeds: γ_max + 1 (the curve the report plots and auto/adaptive
    need), or a tree draft's 1 + node budget (under --gamma auto the largest the tree choice prices)."""
    from specbench.measure.auto import tree_gamma

    return max(config.draft_gamma, config.gamma_max, tree_gamma.pass_nodes(config)) + 1  # a tree: 1 + its nodes


def calibration_k_max(config: RunConfig) -> int:
    """Pass sizes to calibrate: up to widest_pass, but under the compiled backend with a fixed γ only the γ + 1 shapes
    that are compiled anyway."""
    if config.load.backend == "compiled" and config.gamma.fixed is not None:
        return config.gamma.fixed + 1
    return widest_pass(config)


def run_capacity(config: RunConfig, prepared: Iterable[Prepared], max_new: int) -> int:
    """Cache slots a run reserves once (static caches): its longest prompt, its budget and its widest pass. A token
    tree's node count is not cut by the budget near an output's end (only its depth is), so its 1 + nodes count, under
    the compiled backend too."""
    return max(len(p.prompt_ids) for p in prepared) + max_new + widest_pass(config)


def prime_for_calibration(session: Session, proposer: Proposer, capacity: int, k_max: int) -> None:
    """Non-eager backends: size the static caches for the whole run and compile the pass shapes
    before calibrating, so the curve is the one the run will see; llama.cpp's contexts are sized here too, so that
    none grows (reloads) inside a timed decode. Nothing for torch's eager backend."""
    target = session.target_lm()
    for lm in [target, *model_caches(proposer)]:
        lm.backend.reserve(capacity)
    if session.load.backend == "eager":
        return
    target.prime(k_max, all_logits=True)
    for draft in model_caches(proposer):
        draft.prime(k_max, all_logits=False)


def batch_calibration(
    session: Session,
    config: RunConfig,
    corpus: list[list[int]],
    max_new: int,
    old: dict,
    on_status: Callable[[str], None],
) -> dict:
    """{"batch_calibration": t(B, k), k = 1..γ+1} for a run at --batch-size B > 1
    (calibration.calibrate_batch_grid, once per session; a resumed run keeps its first one); {} at batch 1, whose
    manifest is as before batches."""
    if config.batch_size == 1:
        return {}
    if old.get("batch_calibration"):
        return {"batch_calibration": old["batch_calibration"]}
    k_max = config.draft_gamma + 1  # batches take a fixed γ (RunConfig.validate refuses a policy)
    on_status(f"calibrating: batched target passes, {config.batch_size} rows × 1..{k_max} tokens")
    return {"batch_calibration": session_batch_curve(session, config.draft, corpus, config.batch_size, k_max, max_new)}

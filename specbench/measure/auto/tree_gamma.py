"""`--gamma auto` for a token-tree draft (tree-lookup): the depth bound γ and the node budget chosen together.

A chain's step feeds γ + 1 tokens and the chain policy prices γ by t(γ+1)/t(1) and the pilot's acceptance per
position (choose.py). A tree's step feeds 1 + nodes tokens and emits 1 + (accepted depth) tokens, so its price has
two knobs: the depth bound (a step emits at most depth + 1 tokens) and the node budget (every node is fed to the
target, accepted or not). This module prices each (depth, nodes) of a small grid (depth 1..8, nodes in {depth, 7,
11, 15} with nodes ≥ depth and 1 + nodes within the calibrated pass sizes) from one pilot at the grid's largest
candidate and the calibrated t(k)/t(1), and chooses the most tokens per unit time.

The approximation (`kept`): the pilot ran the draft at the deepest depth and the largest budget; for every pilot
step its trie is rebuilt (tree-lookup's proposal is a pure function of the context: `pilot_steps`) and the path the
target accepted located in it. A smaller candidate is priced on the same steps as the nodes it would have kept: the
pilot trie's nodes of depth ≤ the candidate's depth, in the trie's order, the first max(nodes, depth) of them
(build_trie fills the budget in that order, so at the pilot's depth this is exactly the smaller budget's trie); the
step's pass feeds those nodes + 1, and its accepted length is the pilot path's leading nodes that were kept. For a
fixed context this is exact at the pilot's depth, at T = 0 and T > 0 alike: a kept path node's earlier siblings are
kept too (lower index), so it is judged as in the pilot. Where it is biased: (1) at a smaller depth tree-lookup cuts
its continuations first and then removes duplicates, so continuations that differ only past the depth merge and
later matches (beyond `branches`, or beyond the pilot's budget) would enter the real trie; the pilot's trie lacks
them, so a shallow candidate's acceptance and node count are both underestimated (shallow trees look a little
worse and a little cheaper than they are); (2) steps are taken where the pilot's steps started: a candidate that
accepts less would start its next step elsewhere, and that trajectory is not replayed (as in the chain policy's
count-based pilot). The figure is the cost model's on the pilot's own acceptance, not a measured speed.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from specbench.config import RunConfig
from specbench.decoding.drafts import lookahead
from specbench.decoding.drafts.tree_lookup import DEFAULT_NODES, build_trie, match_continuations, walk_trie
from specbench.errors import SpecbenchError
from specbench.measure.auto.calibration import Calibration
from specbench.measure.auto.choose import (
    AutoChoice,
    Candidate,
    PilotResult,
    _dtype_sentence,
    candidate_label,
    chosen_gamma,
    pilot_from_results,
    requested_auto,
    slower_warning,
)
from specbench.measure.auto.prediction import Prediction, pooled_held_out, pooled_interval_clause, replayed_prediction
from specbench.measure.stats.metrics import depth_counts
from specbench.run_specs import DraftSpec, parse_draft

MAX_DEPTH = 8  # the grid's depths: 1..8 (and ≤ --gamma-max)
NODE_BUDGETS = (7, 11, 15)  # the grid's node budgets, besides nodes = depth (a chain's pass size)
MAX_NODES = max(NODE_BUDGETS)  # the pilot's budget; passes over 1 + MAX_NODES tokens are calibrated for it


@dataclass(frozen=True)
class TreeStep:
    """One pilot step: its trie's shape and the path the target accepted (an empty trie: a plain step)."""

    node_depths: tuple[int, ...]  # depth of node i (1 = a child of cur), nodes in the trie's order
    path: tuple[int, ...] = ()  # the accepted path's node indices, root first
    emits: int | None = None  # the decode stopped inside this step (an EOS accepted, or the budget): tokens it emitted


def emitted(step: TreeStep, accepted: int) -> int:
    """Tokens a step emits with `accepted` of its nodes accepted (pure): those and the correction or bonus token after
    them, never more than the decode emitted where it stopped inside the step (an EOS among the accepted nodes emits
    no bonus token: counting one overstated short EOS-ended replies by a token each, 13 of 20 on ding-de-en)."""
    return 1 + accepted if step.emits is None else min(1 + accepted, step.emits)


@dataclass(frozen=True)
class TreePrice:
    """One (depth, nodes) candidate priced on the pilot's steps."""

    depth: int  # the depth bound (γ)
    nodes: int  # the node budget
    speedup: float  # predicted: Σ tokens ÷ Σ pass costs over the pilot's steps, plain decoding = 1 token per t(1)
    tokens_per_step: float  # predicted mean tokens a step emits (1 + accepted depth)


def applies(config: RunConfig) -> bool:
    """Whether this run's `--gamma auto` chooses a tree's depth and node budget (tree-lookup, its γ chosen)."""
    return config.gamma.policy == "auto" and config.draft.kind == "tree-lookup"


def pass_nodes(config: RunConfig) -> int:
    """The most nodes a tree draft's pass feeds (pure): tree-lookup's or a suffix tree's node budget (their max(nodes,
    γ) is completed by γ where this is used: calibrating.py); MAX_NODES when --gamma auto chooses a tree-lookup
    budget; an EAGLE head's tree (γ + top − 1); lookahead's trie with its Jacobi trajectory; 0 for chains."""
    if applies(config):
        return MAX_NODES
    if config.draft.head_top > 1:  # an EAGLE head's tree: its other top first tokens beside its chain
        return config.draft_gamma + config.draft.head_top - 1
    options = dict(config.draft.options)
    if config.draft.kind == "lookahead":
        sizes = {k: int(v) for k, v in options.items() if k in ("jacobi", "ngram", "branches")}
        return lookahead.most_nodes(config.draft_gamma, **sizes)
    trees = config.draft.kind == "tree-lookup" or (config.draft.kind == "suffix" and config.draft.proposes_trees)
    return int(options.get("nodes", DEFAULT_NODES)) if trees else 0


def grid(max_depth: int, k_max: int) -> list[tuple[int, int]]:
    """The (depth, nodes) candidates: depth 1..min(MAX_DEPTH, max_depth), nodes in {depth} ∪ NODE_BUDGETS with
    nodes ≥ depth and a pass over 1 + nodes tokens calibrated (≤ k_max)."""
    out = []
    for depth in range(1, min(MAX_DEPTH, max_depth) + 1):
        for nodes in sorted({depth, *NODE_BUDGETS}):
            if nodes >= depth and nodes + 1 <= k_max:
                out.append((depth, nodes))
    return out


def kept_nodes(step: TreeStep, depth: int, nodes: int) -> list[int]:
    """The pilot trie's nodes a smaller (depth, nodes) keeps (pure): those of depth ≤ `depth`, the first
    max(nodes, depth) of them in the trie's order."""
    return [i for i, d in enumerate(step.node_depths) if d <= depth][: max(nodes, depth)]


def kept(step: TreeStep, depth: int, nodes: int) -> tuple[int, int]:
    """(nodes fed, drafted tokens accepted) of a pilot step under a smaller (depth, nodes) (pure): `kept_nodes`, and
    the accepted path's leading nodes among them (see the module docstring for where this is biased)."""
    shallow = kept_nodes(step, depth, nodes)
    keep = set(shallow)
    accepted = 0
    for node in step.path:
        if node not in keep:
            break
        accepted += 1
    return len(shallow), accepted


def kept_chain(step: TreeStep, depth: int, nodes: int) -> bool:
    """Whether the nodes `kept` keeps form one branch (pure: one node at each depth 1..n), which tree-lookup sends as a
    chain, verified by a causal pass rather than a tree step."""
    depths = [step.node_depths[i] for i in kept_nodes(step, depth, nodes)]
    return depths == list(range(1, len(depths) + 1))


def step_cost(curve: Mapping[int, float], step: TreeStep, depth: int, nodes: int, fed: int) -> float:
    """A step's pass from a curve (pure): k = 1 + fed → curve[k], a causal pass; a tree step reads curve[−k] where the
    curve has it (Calibration.tree_cost / tree_target_ms: tree steps timed as such), curve[k] otherwise."""
    k = fed + 1
    if k not in curve:
        raise SpecbenchError(f"no measured cost for a pass over {k} tokens; calibrate up to {k}")
    return curve[k] if -k not in curve or kept_chain(step, depth, nodes) else curve[-k]


def price(steps: Sequence[TreeStep], depth: int, nodes: int, pass_cost: Mapping[int, float]) -> TreePrice:
    """Predicted speedup of (depth, nodes) on the pilot's steps (pure): Σ emitted ÷ Σ t(1 + fed)/t(1), the
    chain policy's tokens ÷ cost (theory.pass_cost_curve_speedup) with a tree's pass size (step_cost: a tree step at
    its own price where `pass_cost` has one); a model-free draft (no draft cost)."""
    tokens = cost = 0.0
    for step in steps:
        fed, accepted = kept(step, depth, nodes)
        tokens += emitted(step, accepted)
        cost += step_cost(pass_cost, step, depth, nodes, fed) / pass_cost[1]
    if not steps:
        return TreePrice(depth, nodes, float("nan"), float("nan"))
    return TreePrice(depth, nodes, tokens / cost, tokens / len(steps))


def rank_trees(steps: Sequence[TreeStep], pass_cost: Mapping[int, float], max_depth: int) -> list[TreePrice]:
    """Every grid candidate the curve covers, priced, best first (ties: the smaller depth, then fewer nodes)."""
    prices = [price(steps, d, n, pass_cost) for d, n in grid(max_depth, max(pass_cost))]  # max: a causal k
    prices = [p for p in prices if p.speedup == p.speedup]
    if not prices:
        raise SpecbenchError("no tree candidate could be priced: the pilot made no steps or the calibration is empty")
    return sorted(prices, key=lambda p: (-p.speedup, p.depth, p.nodes))


def per_depth_acceptance(steps: Sequence[TreeStep]) -> list[float]:
    """The pilot's acceptance at depth d given d − 1 accepted (steps accepting ≥ d ÷ steps that reached depth d with
    d − 1 accepted), d = 1 .. the deepest trie: the records' per-depth counts (metrics.depth_counts)."""
    pairs = [(len(s.path), max(s.node_depths)) for s in steps if s.node_depths]
    _, accepted = depth_counts(pairs)
    tried = [sum(1 for n, h in pairs if h > d and n >= d) for d in range(len(accepted))]  # depth d + 1 reached
    return [a / t if t else float("nan") for a, t in zip(accepted, tried)]


def pilot_steps(prompt_ids: list[int], result, max_new: int, gamma: int, draft) -> list[TreeStep]:
    """A tree-lookup pilot decode (a DecodeResult at γ = `gamma`) → its steps with their tries rebuilt from the
    context (the draft's own match_continuations and build_trie) and the accepted path located by the emitted
    tokens. Plain passes (no proposal, or the budget's last token) are steps with an empty trie."""
    out, steps, pos, k = list(result.token_ids), [], 1, 0
    for size in result.pass_lengths:
        if size == 1:
            steps.append(TreeStep(()))
            pos += 1
            continue
        n, fed = result.accept_lengths[k], result.draft_lengths[k]
        k += 1
        g = min(gamma, max_new - pos - 1)  # decode_speculative's γ' at this step
        found = match_continuations(prompt_ids + out[:pos], g, draft.max_ngram, draft.min_ngram, draft.branches)
        ids, parents = build_trie(found, max(draft.nodes, g))
        if len(ids) != fed:
            raise SpecbenchError(f"the tree pilot rebuilt {len(ids)} nodes where the step fed {fed}: a bug")
        depths: list[int] = []
        for parent in parents:
            depths.append(1 + (depths[parent] if parent >= 0 else 0))
        path = walk_trie(ids, parents, out[pos : pos + min(n, len(out) - pos)])
        if len(path) != min(n, len(out) - pos):
            raise SpecbenchError(f"the tree pilot's rebuilt trie lacks the {n} tokens its step accepted: a bug")
        emits = min(n + 1, len(out) - pos)  # fewer than n + 1: the decode stopped inside this step
        steps.append(TreeStep(tuple(depths), tuple(path), emits if emits <= n else None))
        pos += n + 1
    return steps


def with_nodes(spec: DraftSpec, nodes: int) -> DraftSpec:
    """The tree-lookup spec with its node budget set (its other options kept, in order)."""
    options = dict(spec.options) | {"nodes": nodes}
    return parse_draft("tree-lookup:" + ",".join(f"{k}={v}" for k, v in options.items()))


def tree_table(prices: list[TreePrice], chosen: TreePrice, pass_cost: Mapping[int, float]) -> str:
    """The candidates' predicted speedups as a depth × node-budget table (the chosen cell marked *), and the verify
    pass's price t(1 + nodes)/t(1) of each budget row (a tree step's where timed)."""
    depths = sorted({p.depth for p in prices})
    by = {(p.depth, p.nodes): p for p in prices}
    rows = [("    γ (depth)", [f"{d}{'*' if d == chosen.depth else ''}" for d in depths])]
    rows.append(("    nodes = γ", [_cell(by.get((d, d)), chosen) for d in depths]))
    for n in NODE_BUDGETS:
        if any(p.nodes == n for p in prices):
            name = f"    nodes {n} (t({n + 1})/t(1) {pass_cost.get(-n - 1, pass_cost[n + 1]) / pass_cost[1]:.2f})"
            rows.append((name, [_cell(by.get((d, n)) if d != n else None, chosen) for d in depths]))
    width = max(7, *(len(v) + 1 for _, vs in rows for v in vs))
    label = max(len(r[0]) for r in rows)
    return "\n".join(r[0].ljust(label) + "".join(v.rjust(width) for v in r[1]) for r in rows)


def _cell(p: TreePrice | None, chosen: TreePrice) -> str:
    if p is None:
        return "—"
    return f"{p.speedup:.2f}×" + ("*" if (p.depth, p.nodes) == (chosen.depth, chosen.nodes) else "")


TreePilot = Callable[[DraftSpec, int], tuple[list[list[TreeStep]], PilotResult]]  # (spec, γ) → each example's steps


def decoded_steps(session, items: list, corpus: list[list[int]], max_new: int, decodes, draft: DraftSpec, gamma: int):
    """Every item decoded once, untimed, with the tree draft at γ = `gamma` (`decodes`: planning.pilot_decodes bound to
    the session and config, as `decodes(proposer, items, max_new, γ, quota)`, here with no step quota) → (each item's
    steps, rebuilt by pilot_steps; the (item, DecodeResult) pairs)."""
    proposer = session.proposer(draft, corpus)
    done = list(decodes(proposer, items, max_new, gamma, math.inf))
    return [pilot_steps(item.prompt_ids, r, max_new, gamma, proposer) for item, r in done], done


def tree_pilot(session, pilot: list, corpus: list[list[int]], max_new: int, decodes, on_status) -> TreePilot:
    """The pilot choose_tree runs: the draft at the grid's largest candidate on every pilot example (decoded_steps).
    Every pilot example is decoded (no step quota): the held-out interval's spread is over examples, and on aclsum the
    chain pilot's 48-step quota stopped after 2 (a 95 % interval of [0.03, 86.5]×, t on 1 degree of freedom; AMD
    EPYC, bf16, 2 threads, 2026-12-07)."""

    def run(draft: DraftSpec, gamma: int) -> tuple[list[list[TreeStep]], PilotResult]:
        on_status(f"pilot: {draft} at γ {gamma} on {len(pilot)} untimed examples")
        steps, done = decoded_steps(session, pilot, corpus, max_new, decodes, draft, gamma)
        ids = [item.example.id for item, _ in done]
        return steps, pilot_from_results(draft.text, [r for _, r in done], None, True, ids)

    return run


@dataclass(frozen=True)
class CheckedExample:
    """A timed example decoded once, untimed, with the chosen tree: its steps and what the decode measured outside
    the target's decode passes (its prefill and the draft's host-side search), which the prices add."""

    steps: tuple[TreeStep, ...]
    prefill_ms: float  # the prompt's prefill (the baseline's too)
    draft_ms: float  # tree-lookup's search over the context, every step together


TreeCheck = Callable[[str, DraftSpec, int], list[CheckedExample]]  # (dtype, spec, γ) → each timed example, decoded


def tree_check(session_for, timed: list, corpus: list[list[int]], max_new: int, decodes_for, on_status) -> TreeCheck:
    """The cost-model check's decode: the timed examples, once, untimed, with the chosen tree in the chosen dtype's
    session (`session_for(dtype)`, `decodes_for(session)`). At T = 0 tree-lookup's proposal is a function of the
    context, so these are the steps the timed run takes (unless low-precision numerics flip a token)."""

    def run(dtype: str, draft: DraftSpec, gamma: int) -> list[CheckedExample]:
        on_status(
            f"decoding the {len(timed)} timed examples once, untimed, with {draft} at γ {gamma} (cost-model check)"
        )
        session = session_for(dtype)
        steps, done = decoded_steps(session, timed, corpus, max_new, decodes_for(session), draft, gamma)
        return [CheckedExample(tuple(s), r.prefill_s * 1e3, r.draft_s * 1e3) for s, (_, r) in zip(steps, done)]

    return run


def checked_speedup(ex: CheckedExample, depth: int, nodes: int, target_ms: Mapping[int, float]) -> float:
    """One timed example's end-to-end speedup at known acceptance (pure): plain decoding's prefill and one t(1) per
    token its steps emit, against the prefill, the draft's search and a t(1 + nodes fed) per step (the calibrated
    passes, ms: step_cost's, a tree step's own where timed)."""
    tokens = verify = 0.0
    for step in ex.steps:
        fed, accepted = kept(step, depth, nodes)
        tokens += emitted(step, accepted)
        verify += step_cost(target_ms, step, depth, nodes, fed)
    return (ex.prefill_ms + tokens * target_ms[1]) / (ex.prefill_ms + ex.draft_ms + verify)


def checked_trees(
    chosen: TreePrice, examples: Sequence[CheckedExample], target_ms: Mapping[int, float]
) -> tuple[Prediction, float]:
    """The chosen tree's "cost-model check (known acceptance)" (pure): each timed example's own decoded steps priced
    end to end (`checked_speedup`), their geometric mean with the pricing interval (prediction.replayed_prediction);
    and the same steps' geometric-mean price per decoded token, as the choice prices the pilot's (`price`: no prefill,
    no search)."""
    cost = {k: v / target_ms[1] for k, v in target_ms.items()}
    per_token = [math.log(price(ex.steps, chosen.depth, chosen.nodes, cost).speedup) for ex in examples if ex.steps]
    logs = [math.log(s) for ex in examples if (s := checked_speedup(ex, chosen.depth, chosen.nodes, target_ms)) > 0]
    return replayed_prediction(logs), math.exp(sum(per_token) / len(per_token)) if per_token else float("nan")


def check_line(check: Prediction, per_token: float) -> str:
    """The reasons' line for `checked_trees`' figure: what it checks and what its interval covers."""
    return (
        f"{check.line()} on the same {check.n_examples} examples, decoded once untimed ({check.replay_s or 0.0:.1f} s) "
        f"with the chosen tree: their acceptance is known, so this checks the pass prices, end to end with that "
        f"decode's prefill and search times ({per_token:.2f}× per decoded token without them; interval: pricing error "
        f"only, log sd {check.pricing_log_sd:.2f}) and is not used by the choice"
    )


def choose_tree(
    config: RunConfig,
    *,
    dtypes: list[str],
    calibrate_dtype: Callable[[str, list[DraftSpec]], tuple[Calibration, dict[str, float]]],
    pilot: TreePilot,
    n_timed: int,
    bf16_note: str | None = None,
    check: TreeCheck | None = None,
) -> AutoChoice:
    """Calibrate each dtype, pilot the tree draft once at the grid's largest candidate, price every (dtype, depth,
    nodes), choose the fewest predicted ms per token; the reasons say both numbers and that the figure is the cost
    model's on the pilot. The chosen figure is also the run's "predicted (held out)" for its `n_timed` timed examples
    (the pilot's are none of them), its interval from how the pilot examples' own priced speedups spread
    (`held_out_trees`)."""
    calibrations = {dtype: calibrate_dtype(dtype, [config.draft])[0] for dtype in dtypes}
    k_max = min(max(c.target_ms) for c in calibrations.values())
    max_depth = min(MAX_DEPTH, config.gamma_max)
    budget = max(n for _, n in grid(max_depth, k_max))
    spec = with_nodes(config.draft, budget)
    by_example, pilot_result = pilot(spec, max_depth)
    steps = [s for example in by_example for s in example]
    ranked: list[tuple[Candidate, TreePrice]] = []
    for dtype, cal in calibrations.items():
        for p in rank_trees(steps, cal.tree_cost(), max_depth):
            text = with_nodes(config.draft, p.nodes).text
            ms = cal.target_ms[1] / p.speedup
            ranked.append((Candidate(text, dtype, p.depth, p.speedup, ms), p))
    ranked.sort(key=lambda r: (r[0].ms_per_token, r[1].depth, r[1].nodes))
    best, best_price = ranked[0]
    cal = calibrations[best.dtype]
    same = [p for c, p in ranked if c.dtype == best.dtype]
    acceptance = per_depth_acceptance(steps)
    reasons = [_dtype_sentence(best, [c for c, _ in ranked], bf16_note)] if len(dtypes) > 1 else []
    reasons.append(
        f"γ {best.gamma}, nodes {best_price.nodes} (the fewest predicted ms per token for tree-lookup in {best.dtype}: "
        f"{best.speedup:.2f}×, {best_price.tokens_per_step:.2f} tokens per step, chosen on the pilot's acceptance; "
        f"a cost-model figure, not a measured speed):\n" + tree_table(same, best_price, cal.tree_cost())
    )
    reasons.append(
        f"pilot: {spec.text} at γ {max_depth} on {len(pilot_result.examples)} untimed examples (none of the timed "
        f"ones), {sum(1 for s in steps if s.node_depths)} tree steps, acceptance per depth "
        f"{' '.join(f'{a:.2f}' if a == a else '—' for a in acceptance) or 'none'}; smaller candidates priced by the "
        f"nodes each would have kept of the pilot's tries (biased low for shallow ones: measure/auto/tree_gamma.py)"
    )
    prediction = held_out_trees(best_price, by_example, cal.tree_cost(), n_timed)
    reasons.append(held_out_line(prediction, len(by_example)))
    checked, per_token = None, None
    if check is not None:  # the timed examples' own steps, priced (T = 0: their acceptance is known)
        started = time.perf_counter()
        decoded = check(best.dtype, with_nodes(config.draft, best_price.nodes), best.gamma)
        checked, per_token = checked_trees(best_price, decoded, cal.tree_target_ms())
        checked.replay_s = time.perf_counter() - started
        reasons.append(check_line(checked, per_token))
    warning = slower_warning(candidate_label(best), best.speedup, prediction.low, prediction.high)
    return AutoChoice(
        requested=requested_auto(config),
        dtype=best.dtype,
        draft=best.draft,
        gamma=chosen_gamma(config, best.gamma),
        policy_gamma=best.gamma,
        reasons=reasons + ([warning] if warning else []),
        calibrations=calibrations,
        draft_ms={dtype: {} for dtype in dtypes},
        pilots={spec.text: dataclasses.replace(pilot_result, draft=spec.text)},
        candidates=[c for c, _ in ranked],
        predicts_slower=best.speedup < 1.0,
        prediction=prediction.to_dict(),
        check=checked.to_dict() if checked is not None else None,
        tree={
            "depth": best.gamma,
            "nodes": best_price.nodes,
            "pilot_depth": max_depth,
            "pilot_nodes": budget,
            "acceptance_per_depth": [a if a == a else None for a in acceptance],
            "tokens_per_step": best_price.tokens_per_step,
            "check_per_token": per_token,  # the check's steps priced per decoded token (no prefill, no search)
        },
    )


def held_out_trees(
    chosen: TreePrice, by_example: Sequence[Sequence[TreeStep]], pass_cost: Mapping[int, float], n_timed: int
) -> Prediction:
    """The chosen tree's "predicted (held out)" for the timed examples (pure): its pooled price on the pilot's steps
    with prediction.pooled_held_out's interval, whose spread is taken over each pilot example's own price (an
    example without tree steps adds nothing)."""
    logs = [
        math.log(p.speedup)
        for example in by_example
        if any(s.node_depths for s in example)
        and (p := price(example, chosen.depth, chosen.nodes, pass_cost)).speedup > 0
    ]
    return pooled_held_out(chosen.speedup, logs, n_timed, len(by_example))


def held_out_line(prediction: Prediction, n_pilot: int) -> str:
    """The reasons' line for `held_out_trees`' figure: what it is and what its interval covers."""
    return (
        f"{prediction.line()} for the {prediction.n_examples} timed examples: the chosen tree priced on the "
        f"{n_pilot} pilot examples' steps (none of the timed ones), per decoded token (the timed prompts' prefill "
        f"and lengths are not modelled); {pooled_interval_clause(prediction, 'its own steps')}"
    )

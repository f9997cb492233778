"""From a --draft spec to a Proposer, and what `specbench list drafts` shows.

The one place that turns a parsed `DraftSpec` into a draft object: it loads a draft model
through specbench.models (which never imports the drafts back) and checks that draft and target
share a vocabulary, with both sizes in the message.
"""

from __future__ import annotations

from typing import Any

from specbench.decoding.drafts.hybrid import HybridDraft
from specbench.decoding.drafts.lookahead import DEFAULT_BRANCHES as LOOKAHEAD_BRANCHES
from specbench.decoding.drafts.lookahead import DEFAULT_JACOBI, DEFAULT_NGRAM, DEFAULT_WINDOW, LookaheadDraft
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.drafts.ngram import DEFAULT_BACKOFF, DEFAULT_K, make_frequency_draft
from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft
from specbench.decoding.drafts.recycle import RecyclingTreeLookupDraft
from specbench.decoding.drafts.tree_lookup import DEFAULT_BRANCHES, DEFAULT_NODES, TreeLookupDraft
from specbench.errors import SpecbenchError, UsageError
from specbench.models import PRESETS, LoadedModel, SplitPreset, load_model
from specbench.models.shipped import shipped_draft_dir, shipped_draft_rows
from specbench.run_specs import DraftSpec


def check_compatible(target: LoadedModel, draft: LoadedModel) -> None:
    """Fail in one line unless draft and target share the id space and the architecture family."""
    if target.vocab_size != draft.vocab_size:
        raise SpecbenchError(
            f"draft and target vocabularies differ: target {target.name} has {target.vocab_size} ids, "
            f"draft {draft.name} has {draft.vocab_size}; pick a draft from the target's family (same tokenizer)"
        )
    if target.is_seq2seq != draft.is_seq2seq:
        raise SpecbenchError("draft and target must both be decoder-only or both encoder-decoder models")


def make_proposer(
    spec: DraftSpec,
    target: LoadedModel,
    device: str = "auto",
    dtype: str = "float32",
    trust_remote_code: bool = False,
    corpus: list[list[int]] | None = None,
    backend: str = "eager",
):
    """A parsed --draft value (run_specs.DraftSpec; grammar there) → a Proposer for this target.

    Frequency laws are fitted on `corpus` (token-id sequences of the task's prompts) when given,
    else on each example's prompt in begin(); `corpus` is ignored by drafts that fit nothing.
    `distilled` (also after lookup+) is the draft `specbench distill` built for this target.
    `backend` (backend.py) is how a model draft runs its forwards.
    """
    parsed = spec
    if parsed.kind == "prompt-lookup":
        return lookup_draft(target, **dict(parsed.options))
    if parsed.kind == "tree-lookup":
        if target.is_seq2seq:  # a tree pass is a masked decoder-only pass (cached_model.forward_masked)
            raise SpecbenchError(f"--draft tree-lookup needs a decoder-only target; {target.name} is encoder-decoder")
        options = dict(parsed.options)
        if "recycle" in options:  # token recycling's branches in the rest of the budget (drafts/recycle.py)
            return RecyclingTreeLookupDraft(target.vocab_size, target.device, name=parsed.text, **options)  # type: ignore[arg-type]  # parse_draft checked each option
        return TreeLookupDraft(target.vocab_size, target.device, name=parsed.text, **options)  # type: ignore[arg-type]  # parse_draft checked each option
    if parsed.kind == "lookahead":
        if target.is_seq2seq:  # a tree pass is a masked decoder-only pass, as for tree-lookup
            raise SpecbenchError(f"--draft lookahead needs a decoder-only target; {target.name} is encoder-decoder")
        return LookaheadDraft(target.vocab_size, target.device, name=parsed.text, **dict(parsed.options))  # type: ignore[arg-type]  # parse_draft checked each option
    if parsed.kind == "suffix":
        if target.is_seq2seq:  # its tree pass, and the local suffix tree of the decoder sequence, are decoder-only
            raise SpecbenchError(f"--draft suffix needs a decoder-only target; {target.name} is encoder-decoder")
        from specbench.decoding.drafts.suffix import SuffixDraft  # its cache's package is an extra: imported on use

        return SuffixDraft(target.vocab_size, target.device, name=parsed.text, **dict(parsed.options))  # type: ignore[arg-type]  # parse_draft checked each option
    if parsed.fits_corpus:
        return make_frequency_draft(parsed, target.vocab_size, target.device, corpus)
    if parsed.eagle_head is not None:
        return eagle_draft(parsed, target, backend)
    model = model_draft(parsed.model, target, device, dtype, trust_remote_code, backend)  # type: ignore[arg-type]  # model, hybrid: set
    if parsed.kind == "hybrid":
        return HybridDraft(lookup_draft(target), model, name=parsed.text)
    return model


def lookup_draft(target: LoadedModel, **options) -> PromptLookupDraft:
    """Prompt lookup over the target's vocabulary (seq2seq: it also searches the encoder's prompt); `options`:
    rule, max_ngram, min_ngram as `prompt-lookup:...` gives them."""
    return PromptLookupDraft(target.vocab_size, target.device, search_source=target.is_seq2seq, **options)


def model_draft(
    model_spec: str, target: LoadedModel, device: str, dtype: str, trust_remote_code: bool, backend: str
) -> ModelDraft:
    """Load the draft model of a "model" or "hybrid" spec and check it against the target."""
    if model_spec == "distilled":  # the draft `specbench distill` ships for this target under drafts/
        model_spec = str(shipped_draft_dir(target.name))
    draft = load_model(model_spec, device, dtype, trust_remote_code)
    check_compatible(target, draft)
    return ModelDraft(draft.model, model_spec, decoder_start_id=draft.decoder_start_id, backend=backend)


def eagle_draft(spec: DraftSpec, target: LoadedModel, backend: str):
    """`eagle:<folder>`: the head, checked against the target (one line, exit 2), over the target's own embedding
    and output layer."""
    import torch

    from specbench.decoding.drafts.eagle import EagleDraft
    from specbench.models.eagle_head import load_head

    folder = spec.eagle_head or ""
    if not folder:
        raise UsageError(
            f"--draft {spec.text}: {spec.head_method} needs its head's folder, e.g. {spec.head_method}:/path/to/head"
        )
    model = target.model
    if not isinstance(model, torch.nn.Module) or target.is_seq2seq:
        raise UsageError(
            f"--draft {spec.text} drafts from a decoder-only torch target's hidden states; use --engine "
            "specbench (or vllm) with such a target"
        )
    if backend == "compiled":
        raise UsageError(
            f"--draft {spec.text} reads the target's hidden states, which the compiled passes do not "
            "return; use --backend eager or static"
        )
    config = model.config
    hidden = int(getattr(config, "hidden_size", 0))
    hf: Any = model  # a transformers model (torch types Module attributes Tensor | Module)
    embed = hf.get_input_embeddings()
    if spec.head_method == "eagle3":
        from specbench.models.eagle3_head import Eagle3Runner, read_eagle3_head

        layers = int(getattr(config, "num_hidden_layers", 0))
        runner = Eagle3Runner(read_eagle3_head(folder, spec.text, hidden, target.vocab_size, layers))
        runner = runner.to(target.device, target.dtype).eval()
        return EagleDraft(
            runner, embed, runner.out_layer, spec.text, runner.fuse, runner.head.aux_layers, spec.head_top
        )
    head = load_head(folder, spec.text, hidden, target.vocab_size, target.device, target.dtype)
    return EagleDraft(head, embed, hf.get_output_embeddings(), spec.text, top=spec.head_top)


def draft_rows() -> list[dict]:
    """`specbench list drafts`: model-free drafts, the hybrid, and model presets usable as drafts."""
    rows = [
        {
            "name": "prompt-lookup",
            "kind": "model-free",
            "cost": "host-side n-gram search",
            "description": "copies the continuation of the longest matching suffix n-gram (n = 3..1) from the context",
        },
        {
            "name": f"tree-lookup[:branches={DEFAULT_BRANCHES},nodes={DEFAULT_NODES}]",
            "kind": "model-free",
            "cost": "host-side n-gram search; one masked target pass over the tree",
            "description": "every matching suffix n-gram's continuation as a branch of one token tree "
            "(shared prefixes merged, depth <= gamma), verified in one pass (decoder-only targets, batch 1); "
            "recycle=K fills the node budget's rest with the target's top-K successors of each token, read from "
            "earlier verify passes (token recycling; no --gamma auto/adaptive or --dtype auto)",
        },
        {
            "name": f"suffix[:tree=1,nodes={DEFAULT_NODES}]",
            "kind": "model-free",
            "cost": "host-side suffix-tree match; one masked target pass over the tree",
            "description": "suffix decoding (arctic-inference's cache; extra: specbench-sd[suffix]) over the prompt "
            "and the run's earlier outputs, proposal length adaptive to the match (max_spec_factor x match); "
            "tree=0 proposes a chain (decoder-only targets, batch 1)",
        },
        {
            "name": f"lookahead[:window={DEFAULT_WINDOW},ngram={DEFAULT_NGRAM},branches={LOOKAHEAD_BRANCHES},"
            f"jacobi={DEFAULT_JACOBI}]",
            "kind": "model-free",
            "cost": "host-side n-gram pool; one masked target pass over the tree",
            "description": "lookahead decoding's n-gram pool (the context's n-grams and the target's argmaxes over "
            "earlier verify passes; jacobi=L adds a Jacobi trajectory of L tokens as a verified branch): the "
            "newest token's candidates as one token tree (decoder-only targets, batch 1)",
        },
        {
            "name": f"unigram[:k={DEFAULT_K:g}]",
            "kind": "model-free",
            "cost": "V-sized vector ops per token",
            "description": "samples from an add-k unigram law fitted on the task's prompts (paper's Table 3 baseline)",
        },
        {
            "name": f"bigram[:k={DEFAULT_K:g},backoff={DEFAULT_BACKOFF:g}]",
            "kind": "model-free",
            "cost": "V-sized vector ops per token",
            "description": "samples from a bigram law fitted on the task's prompts, "
            "backing off to the unigram (Table 3)",
        },
        {
            "name": "lookup+<model spec>",
            "kind": "hybrid",
            "cost": "a draft forward per token lookup cannot supply",
            "description": "prompt lookup where the context has a match, the draft model for the rest "
            "(alias hybrid:<model spec>)",
        },
        {
            "name": "eagle:<folder>",
            "kind": "head",
            "cost": "one head layer and the target's output layer per token",
            "description": "an EAGLE head (specbench distill --kind eagle) drafting from the target's hidden states; "
            "the same folder runs in vLLM's eagle method (Llama targets, batch 1)",
        },
        {
            "name": "eagle3:<folder>",
            "kind": "head",
            "cost": "one head layer and its own output layer per token",
            "description": "an EAGLE-3 head (specbench distill --kind eagle3) drafting from three of the target's "
            "layer outputs; the same folder runs in vLLM's eagle3 method (Llama targets, batch 1)",
        },
        {
            "name": "eagle3:<folder>,top=<k>",
            "kind": "head",
            "cost": "as its chain: the k − 1 extra first tokens come out of the first call",
            "description": "a token tree from an EAGLE or EAGLE-3 head: its k likeliest first tokens beside its greedy "
            "chain, one masked pass (specbench's loop; an integer --gamma)",
        },
        {
            "name": "<model spec>",
            "kind": "model",
            "cost": "one draft forward per token",
            "description": "any preset, hub id, local dir or .gguf sharing the target's vocabulary",
        },
    ]
    for p in PRESETS.values():
        if isinstance(p, SplitPreset) and p.role == "draft":
            rows.append(
                {
                    "name": p.name,
                    "kind": "model (preset)",
                    "cost": "one draft forward per token",
                    "description": f"{p.description}; opt-in: {p.install}",
                }
            )
    rows.extend(shipped_draft_rows())  # `--draft distilled`: drafts/<target>-distilled, built by `specbench distill`
    return rows

"""Typed specs of a run's options, parsed once at the edge: the --draft value (DraftSpec) and γ (GammaSpec).

This module sits in the config layer (below decoding, measure and cli; tests/test_layers.py): RunConfig parses its
draft and γ once, when it is made (a string given, or read back from JSON, becomes a DraftSpec / GammaSpec that
writes back the same string), and the proposer factory, the runner and the sweep read the same `DraftSpec`.

Every caller that needs to know what a draft spec means (the config's validators, the sweep's
grid, the runner's pilot, the proposer factory, the bench) asks a `DraftSpec` instead of
splitting the string itself, so the grammar below lives here only:

  prompt-lookup[:rule=recent|hf,max_ngram=<n>,min_ngram=<n>]
                                        copy from the context: the most recent match (specbench's
                                        default) or the leftmost (HF's); n-grams from max_ngram down
                                        to min_ngram (vLLM's prompt_lookup_max/min; default 3 and 1)
  tree-lookup[:max_ngram=<n>,min_ngram=<n>,branches=<n>,nodes=<n>,recycle=<k>]
                                        every match's continuation as a branch of one token tree: up to
                                        `branches` distinct ones (default 4), at most `nodes` nodes (default 7);
                                        recycle=K fills the rest with the target's top-K successors from
                                        earlier passes (token recycling; no pilot)
  suffix[:tree=0|1,nodes=<n>,max_depth=<n>,max_spec_factor=<x>,max_spec_offset=<x>,min_token_prob=<x>]
                                        suffix decoding (arctic-inference's suffix cache) over the prompt and
                                        the run's earlier outputs: a token tree (tree=1, default) or a chain
  lookahead[:window=<n>,ngram=<n>,branches=<n>,jacobi=<n>]
                                        lookahead decoding's n-gram pool (context n-grams and the target's
                                        argmaxes over earlier verify passes): the newest token's candidates
                                        as one token tree, with a Jacobi trajectory of `jacobi` tokens as
                                        one more branch (defaults 8, 4, 3, 0; decoding/drafts/lookahead.py)
  unigram[:k=<number>]                  add-k unigram law
  bigram[:k=<number>,backoff=<number>]  unigram-backed bigram law
  lookup+<model spec>                   prompt lookup, the model where it falls short (alias hybrid:<model spec>)
  eagle:<folder>                        an EAGLE head (`specbench distill --kind eagle`); parsed as a model spec,
                                        so vLLM's engine reads it as its own `eagle` method (engines/vllm)
  eagle3:<folder>                       an EAGLE-3 head (`specbench distill --kind eagle3`; vLLM's `eagle3`)
  eagle3:<folder>,top=<k>               the head's k likeliest first tokens as siblings, its chain under the
                                        first: a token tree (eagle:<folder>,top=<k> too; specbench's loop only)
  <model spec>                          a draft model: preset, hub id, local dir, .gguf, `distilled`

Pure string work: no torch, no model loading (config.py imports it).
"""

from __future__ import annotations

from dataclasses import dataclass

from specbench.errors import SpecbenchError

MODEL_FREE_KINDS = ("prompt-lookup", "tree-lookup", "suffix", "lookahead", "unigram", "bigram")  # run no network
FREQUENCY_OPTIONS = {"unigram": ("k",), "bigram": ("k", "backoff")}  # option names each frequency law takes
HYBRID_PREFIXES = ("lookup+", "hybrid:")  # `lookup+<model spec>` (canonical) or `hybrid:<model spec>`
LOOKUP_RULES = ("recent", "hf")  # which earlier match prompt lookup copies from: the most recent, or HF's leftmost
LOOKUP_OPTIONS = ("rule", "max_ngram", "min_ngram")
LOOKUP_HELP = "rule=recent|hf, max_ngram=<n>, min_ngram=<n>"
TREE_LOOKUP_OPTIONS = ("max_ngram", "min_ngram", "branches", "nodes", "recycle")  # tree-lookup's (integers >= 1)
TREE_LOOKUP_HELP = "max_ngram=<n>, min_ngram=<n>, branches=<n>, nodes=<n>, recycle=<k>"
# suffix's options (decoding/drafts/suffix.py): integers, then numbers >= 0; defaults are vLLM's suffix method's
SUFFIX_INT_OPTIONS = ("tree", "nodes", "max_depth")
SUFFIX_FLOAT_OPTIONS = ("max_spec_factor", "max_spec_offset", "min_token_prob")
SUFFIX_HELP = "tree=0|1, nodes=<n>, max_depth=<n>, max_spec_factor=<x>, max_spec_offset=<x>, min_token_prob=<x>"
SUFFIX_PACKAGE = "arctic_inference"  # the suffix cache --draft suffix runs on (the `suffix` extra)
SUFFIX_INSTALL = "pip install 'specbench-sd[suffix]'"
# lookahead's options (integers) and their least values
LOOKAHEAD_OPTIONS = {"window": 0, "ngram": 2, "branches": 1, "jacobi": 0}
LOOKAHEAD_HELP = "window=<n> (>= 0), ngram=<n> (>= 2), branches=<n>, jacobi=<n> (>= 0)"
HEAD_PREFIXES = ("eagle", "eagle3")  # `eagle:<folder>`, `eagle3:<folder>` (their `top=` option: parse_head_options)
AUTO_DRAFT = "auto"  # --draft auto: no draft yet, chosen before timing (its kind is "auto")


@dataclass(frozen=True)
class DraftSpec:
    """What one --draft value asks for."""

    text: str  # the spec as given (the proposer's name, the run id's stem)
    kind: str  # a MODEL_FREE_KINDS name | "hybrid" | "model" | "auto"
    options: tuple[
        tuple[str, float | int | str], ...
    ] = ()  # a frequency law's or prompt lookup's options, e.g. (("k", 0.01),)
    model: str | None = None  # the draft model's spec for "model" and "hybrid" (may be "distilled"); None otherwise

    def __str__(self) -> str:
        return self.text  # the form written to config JSON, run ids and records: the spec as given

    @property
    def auto(self) -> bool:
        """True for `--draft auto`: chosen on this machine by calibration and pilot (measure/auto/choose.py)."""
        return self.kind == AUTO_DRAFT

    @property
    def uses_model(self) -> bool:
        """True when proposing runs a neural network (a model draft or the hybrid)."""
        return self.model is not None

    @property
    def model_free(self) -> bool:
        """True for prompt lookup (chain or tree), suffix decoding and the frequency laws: no network, no confidence to
        check."""
        return self.kind in MODEL_FREE_KINDS

    @property
    def proposes_trees(self) -> bool:
        """True for a draft whose proposals can be token trees (decoding/tree.py): batches and engines without a
        tree pass refuse it."""
        if self.kind == "suffix":
            return bool(dict(self.options).get("tree", 1))
        return self.kind in ("tree-lookup", "lookahead") or self.head_top > 1

    @property
    def learns_outputs(self) -> bool:
        """True for a draft that learns from the run's earlier outputs (suffix decoding's cache, token recycling's
        table): it decodes one example after another, so batches refuse it; the runner hands it each finished output
        and resets it per run."""
        return self.kind == "suffix" or self.recycles

    @property
    def recycles(self) -> bool:
        """True for tree-lookup with recycle=K (decoding/drafts/recycle.py): its trees grow from the target's earlier
        passes, which only the decode loop hands over (a pilot's replay does not)."""
        return self.kind == "tree-lookup" and "recycle" in dict(self.options)

    @property
    def head_top(self) -> int:
        """An EAGLE head's `top=k`: its k likeliest first tokens proposed as siblings (a token tree); 1: a chain."""
        return int(dict(self.options).get("top", 1)) if self.head_method else 1

    @property
    def head_method(self) -> str | None:
        """ "eagle" for `eagle:<folder>`, "eagle3" for `eagle3:<folder>` (decoding/drafts/eagle.py); None otherwise."""
        if self.kind != "model" or not self.model:
            return None
        name, colon, _ = self.model.partition(":")
        return name if colon and name in ("eagle", "eagle3") else None

    @property
    def eagle_head(self) -> str | None:
        """The head folder of `eagle:<folder>` or `eagle3:<folder>` (an EAGLE or EAGLE-3 head); None for any other
        draft."""
        method = self.head_method
        return None if method is None else (self.model or "")[len(method) + 1 :]

    @property
    def fits_corpus(self) -> bool:
        """True for the frequency laws, which are fitted on the task's prompts."""
        return self.kind in FREQUENCY_OPTIONS


def parse_frequency_options(text: str, name: str, rest: str) -> tuple[tuple[str, float], ...]:
    """'k=0.01,backoff=2' (after 'bigram:') → (('k', 0.01), ('backoff', 2.0)); one-line errors."""
    allowed = FREQUENCY_OPTIONS[name]
    options: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in allowed:
            raise SpecbenchError(
                f"bad --draft option {item!r} in {text!r}; {name} takes {', '.join(a + '=<number>' for a in allowed)}"
            )
        try:
            options[key] = float(value)
        except ValueError:
            raise SpecbenchError(f"bad --draft option {item!r} in {text!r}: {value!r} is not a number") from None
    return tuple(options.items())


def parse_lookup_options(text: str, rest: str) -> tuple[tuple[str, int | str], ...]:
    """'rule=hf,max_ngram=2' (after 'prompt-lookup:') → (('rule', 'hf'), ('max_ngram', 2)); one-line errors."""
    options: dict[str, int | str] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in LOOKUP_OPTIONS:
            raise SpecbenchError(f"bad --draft option {item!r} in {text!r}; prompt-lookup takes {LOOKUP_HELP}")
        if key == "rule" and value not in LOOKUP_RULES:
            raise SpecbenchError(f"--draft {text!r}: rule must be recent (the most recent match) or hf (the leftmost)")
        if key != "rule" and not (value.isdigit() and int(value) >= 1):
            raise SpecbenchError(f"--draft {text!r}: {key} must be an integer >= 1 (got {value!r})")
        options[key] = value if key == "rule" else int(value)
    if int(options.get("min_ngram", 1)) > int(options.get("max_ngram", 3)):
        raise SpecbenchError(f"--draft {text!r}: min_ngram is above max_ngram (default 3); lower it")
    return tuple(options.items())


def parse_tree_lookup_options(text: str, rest: str) -> tuple[tuple[str, int], ...]:
    """'branches=2,nodes=15' (after 'tree-lookup:') → (('branches', 2), ('nodes', 15)); one-line errors."""
    options: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in TREE_LOOKUP_OPTIONS:
            raise SpecbenchError(f"bad --draft option {item!r} in {text!r}; tree-lookup takes {TREE_LOOKUP_HELP}")
        if not (value.isdigit() and int(value) >= 1):
            raise SpecbenchError(f"--draft {text!r}: {key} must be an integer >= 1 (got {value!r})")
        options[key] = int(value)
    if options.get("min_ngram", 1) > options.get("max_ngram", 3):
        raise SpecbenchError(f"--draft {text!r}: min_ngram is above max_ngram (default 3); lower it")
    return tuple(options.items())


def parse_head_options(text: str, name: str, rest: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    """'<folder>,top=3' (after 'eagle3:') → ('<folder>', (('top', 3),)); a folder alone → (folder, ()). Only a last
    comma-separated part of the form key=value is an option (a folder may hold commas); one-line errors."""
    folder, comma, last = rest.rpartition(",")
    key, eq, value = last.partition("=")
    if not comma or not eq or "/" in last:
        return rest, ()
    if key.strip() != "top":
        raise SpecbenchError(f"bad --draft option {last!r} in {text!r}; {name} takes top=<k>")
    if not (value.strip().isdigit() and int(value) >= 1):
        raise SpecbenchError(f"--draft {text!r}: top must be an integer >= 1 (got {value!r})")
    return folder, (("top", int(value)),)


def parse_lookahead_options(text: str, rest: str) -> tuple[tuple[str, int], ...]:
    """'window=4,ngram=3' (after 'lookahead:') → (('window', 4), ('ngram', 3)); one-line errors."""
    options: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in LOOKAHEAD_OPTIONS:
            raise SpecbenchError(f"bad --draft option {item!r} in {text!r}; lookahead takes {LOOKAHEAD_HELP}")
        least = LOOKAHEAD_OPTIONS[key]
        if not (value.isdigit() and int(value) >= least):
            raise SpecbenchError(f"--draft {text!r}: {key} must be an integer >= {least} (got {value!r})")
        options[key] = int(value)
    return tuple(options.items())


def parse_suffix_options(text: str, rest: str) -> tuple[tuple[str, int | float], ...]:
    """'tree=0,max_spec_factor=2' (after 'suffix:') → (('tree', 0), ('max_spec_factor', 2.0)); one-line errors."""
    options: dict[str, int | float] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in SUFFIX_INT_OPTIONS + SUFFIX_FLOAT_OPTIONS:
            raise SpecbenchError(f"bad --draft option {item!r} in {text!r}; suffix takes {SUFFIX_HELP}")
        if key in SUFFIX_INT_OPTIONS:
            low = 0 if key == "tree" else 1
            if not (value.isdigit() and int(value) >= low) or (key == "tree" and int(value) > 1):
                wanted = "0 (a chain) or 1 (a token tree)" if key == "tree" else "an integer >= 1"
                raise SpecbenchError(f"--draft {text!r}: {key} must be {wanted} (got {value!r})")
            options[key] = int(value)
            continue
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not 0 <= number < float("inf") or (key == "min_token_prob" and number > 1):
            wanted = "a probability in [0, 1]" if key == "min_token_prob" else "a number >= 0"
            raise SpecbenchError(f"--draft {text!r}: {key} must be {wanted} (got {value!r})")
        options[key] = number
    return tuple(options.items())


def suffix_cache_missing() -> bool:
    """Whether the suffix cache's package (arctic-inference) is not installed; found without importing it."""
    import importlib.util

    return importlib.util.find_spec(SUFFIX_PACKAGE) is None


def hybrid_model(text: str) -> str | None:
    """'lookup+<model spec>' or 'hybrid:<model spec>' → '<model spec>'; None for any other spec."""
    for prefix in HYBRID_PREFIXES:
        if text.startswith(prefix):
            return text[len(prefix) :]
    return None


def parse_draft(text: DraftSpec | str) -> DraftSpec:
    """A --draft value → its DraftSpec; a one-line SpecbenchError for a malformed one. A DraftSpec is returned as
    it is (RunConfig parses its draft once, whether it is given a string or a spec)."""
    if isinstance(text, DraftSpec):
        return text
    if text == AUTO_DRAFT:
        return DraftSpec(text, AUTO_DRAFT)
    name, colon, rest = text.partition(":")
    if name in FREQUENCY_OPTIONS:
        return DraftSpec(text, name, options=parse_frequency_options(text, name, rest))
    if name == "prompt-lookup":
        return DraftSpec(text, "prompt-lookup", options=parse_lookup_options(text, rest))
    if name == "tree-lookup":
        return DraftSpec(text, "tree-lookup", options=parse_tree_lookup_options(text, rest))
    if name == "suffix":
        return DraftSpec(text, "suffix", options=parse_suffix_options(text, rest))
    if name == "lookahead":
        return DraftSpec(text, "lookahead", options=parse_lookahead_options(text, rest))
    if name in MODEL_FREE_KINDS:  # a model-free kind with no options of its own (docs/extending.md's example)
        if colon:
            raise SpecbenchError(f"--draft {text!r}: {name} takes no options; use --draft {name}")
        return DraftSpec(text, name)
    if name in HEAD_PREFIXES and colon:
        folder, options = parse_head_options(text, name, rest)
        return DraftSpec(text, "model", options=options, model=f"{name}:{folder}")
    inner = hybrid_model(text)
    if inner is None:
        if not text:
            raise SpecbenchError(
                "--draft is empty; use prompt-lookup, tree-lookup, suffix, unigram, bigram, lookup+<model> or a model"
            )
        return DraftSpec(text, "model", model=text)
    if not inner or hybrid_model(inner) is not None or inner.partition(":")[0] in MODEL_FREE_KINDS:
        raise SpecbenchError(
            f"--draft {text!r}: after lookup+ comes a draft model (preset, hub id, dir or .gguf), "
            f"not {inner!r}; e.g. lookup+qwen2.5-coder-0.5b"
        )
    return DraftSpec(text, "hybrid", model=inner)


# --------------------------------------------------------------------------- --gamma

GAMMA_POLICIES = ("auto", "adaptive", "heuristic")  # --gamma besides an integer (decoding/gamma_policy.py)
MAX_GAMMA = 128  # a γ beyond this is a typo; every per-step structure is sized by γ


@dataclass(frozen=True)
class GammaSpec:
    """What one --gamma value asks for: a fixed γ drafted at every step, or a policy that chooses it.

    Exactly one of the two fields is set. Records, ids and config JSON keep the value as given (`value`: the
    integer, or the policy's name), so a GammaSpec reads and writes the same strings as before it existed."""

    fixed: int | None = None  # γ drafted at every step; None under a policy
    policy: str | None = None  # auto (chosen once, before timing), adaptive or heuristic (per step); None when fixed

    @property
    def value(self) -> int | str:
        """The form written to config JSON, run and cell ids and summaries: the integer or the policy's name."""
        if self.fixed is not None:
            return self.fixed
        assert self.policy is not None  # exactly one of the two is set
        return self.policy

    def __str__(self) -> str:
        return str(self.value)

    def draft_gamma(self, gamma_max: int) -> int:
        """The most tokens a step may draft: γ itself, or gamma_max under a policy (before auto is resolved)."""
        return self.fixed if self.fixed is not None else gamma_max

    def check_range(self) -> GammaSpec:
        """A fixed γ within 1..MAX_GAMMA; one line naming the fix otherwise."""
        if self.fixed is not None and not 1 <= self.fixed <= MAX_GAMMA:
            raise SpecbenchError(
                f"--gamma must be between 1 and {MAX_GAMMA} (got {self.fixed}); the draft proposes "
                f"gamma tokens per step"
            )
        return self


def parse_gamma(value: GammaSpec | int | str) -> GammaSpec:
    """--gamma (or a config's stored value): an integer, or auto / adaptive / heuristic → its GammaSpec; the one
    γ parser. A GammaSpec is returned as it is; the range is checked by `check_range` (RunConfig.validate)."""
    if isinstance(value, GammaSpec):
        return value
    text = str(value).strip().lower()
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        text = ""  # True is no γ; neither is anything but an integer or a name
    if text in GAMMA_POLICIES:
        return GammaSpec(policy=text)
    try:
        return GammaSpec(fixed=int(text))
    except ValueError:
        raise SpecbenchError(
            f"--gamma must be an integer or one of {', '.join(GAMMA_POLICIES)} (got {value!r})"
        ) from None

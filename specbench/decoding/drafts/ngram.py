"""Unigram and bigram drafts: the model-free baselines of Leviathan et al. (2023), Table 3.

A frequency law fitted on token ids (the task's prompts, or the example's own prompt) that
proposes by *sampling*: x_i ~ q_i, where q_i is the fitted law processed exactly like the
target's (temperature, top-k, top-p via `processed_probs`, with log q as the logits), so the
q the verifier sees is the law the token was drawn from. At T = 0 it proposes the argmax.

The laws, over the target's whole vocabulary V:

  unigram  u(x)   = (c(x) + k) / (N + k·V)                         add-k: full support for k > 0
  bigram   b(x|a) = (c(a, x) + λ·u(x)) / (c(a) + λ)                 backs off to u for an unseen a

c(·) are counts in the fitting corpus (N tokens). The bigram's λ pseudo-counts are spread by
the unigram law rather than uniformly (add-k with a unigram prior), so b(·|a) has full
support whenever u does and equals u exactly when a was never seen. k = 0 gives the sparse
law on the seen tokens only: still exact (the rejection rule never needs q > 0 where p > 0),
merely a draft that can never propose an unseen token.

Costs no model forward (c ≈ 0), but V-sized work per drafted token, timed as draft time:
the law is fixed once fitted, so each processed row (top-p sorts all V ids: ~18 ms at
V = 151,936) is computed once per (context, sampling) and kept in a small LRU cache; a
unigram proposal draws its γ i.i.d. tokens in one multinomial call. Bigram contexts are
looked up on the host (one sync per drafted token).
"""

from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import Proposal
from specbench.decoding.drafts.model_free import ModelFreeDraft
from specbench.decoding.sampling import processed_probs, sample
from specbench.errors import SpecbenchError
from specbench.run_specs import DraftSpec

DEFAULT_K = 1e-3  # unigram add-k: total pseudo-mass k·V (49 on SmolLM2's 49,152 ids) against N corpus tokens
DEFAULT_BACKOFF = 1.0  # bigram λ: pseudo-observations of each context drawn from the unigram law
CACHE_BYTES = 64 << 20  # processed rows kept per draft (float32 [V] each): ~110 rows at V = 151,936


class FrequencyDraft(ModelFreeDraft):
    """Proposer sampling from a fitted unigram (order 1) or bigram (order 2) law."""

    def __init__(
        self,
        order: int,
        vocab_size: int,
        device: torch.device,
        *,
        k: float = DEFAULT_K,
        backoff: float = DEFAULT_BACKOFF,
        name: str | None = None,
    ):
        if order not in (1, 2):
            raise SpecbenchError(f"n-gram draft order must be 1 (unigram) or 2 (bigram), got {order}")
        if not k >= 0.0:
            raise SpecbenchError(f"add-k smoothing must be >= 0 (got k={k}); use e.g. unigram:k=0.001")
        if not backoff > 0.0:
            raise SpecbenchError(
                f"bigram back-off strength must be > 0 (got backoff={backoff}); use e.g. bigram:backoff=1"
            )
        self.order = order
        self.name = name or ("unigram" if order == 1 else "bigram")
        self.vocab_size = vocab_size
        self.device = device
        self.k = k
        self.backoff = backoff
        self._from_corpus = False  # True once fit() was given a task corpus: begin() then keeps it
        self._unigram: torch.Tensor | None = None  # [V] float32 law u
        self._log_unigram: torch.Tensor | None = None  # [V] log u (−inf where u = 0)
        self._follow: dict[int, tuple[torch.Tensor, torch.Tensor, float]] = {}  # a → (ids [m], counts [m], c(a))
        self._rows: OrderedDict[tuple, torch.Tensor] = (
            OrderedDict()
        )  # (context key, sampling) → processed [V] or argmax
        self._max_rows = max(1, CACHE_BYTES // (4 * vocab_size))

    # ---- fitting -------------------------------------------------------------------------

    def fit(self, corpus: list[list[int]]) -> FrequencyDraft:
        """Fit the law on a corpus of token-id sequences (the task's prompts); kept for every example."""
        self._fit(corpus)
        self._from_corpus = True
        return self

    def _fit(self, corpus: list[list[int]]) -> None:
        unigram: Counter[int] = Counter()
        pairs: dict[int, Counter[int]] = defaultdict(Counter)
        for seq in corpus:
            unigram.update(seq)
            if self.order == 2:
                for a, b in zip(seq, seq[1:]):
                    pairs[a][b] += 1
        bad = [t for t in unigram if not 0 <= t < self.vocab_size]
        if bad:
            raise SpecbenchError(
                f"{self.name} draft: token id {bad[0]} outside the target's vocabulary of "
                f"{self.vocab_size}; fit it on ids from the target's tokenizer"
            )
        total = sum(unigram.values())
        if total == 0 and self.k == 0.0:
            raise SpecbenchError(f"{self.name} draft: nothing to fit on (empty corpus) and k = 0; give text or k > 0")
        counts = torch.zeros(self.vocab_size, dtype=torch.float64)
        if unigram:
            ids = torch.tensor(list(unigram.keys()), dtype=torch.long)
            counts[ids] = torch.tensor(list(unigram.values()), dtype=torch.float64)
        u = (counts + self.k) / (total + self.k * self.vocab_size)  # float64 sums, stored float32
        self._unigram = u.float().to(self.device)
        self._log_unigram = self._unigram.log()
        self._follow = {
            a: (
                torch.tensor(list(nxt.keys()), dtype=torch.long, device=self.device),
                torch.tensor(list(nxt.values()), dtype=torch.float32, device=self.device),
                float(sum(nxt.values())),
            )
            for a, nxt in pairs.items()
        }
        self._rows.clear()

    # ---- the law -------------------------------------------------------------------------

    def log_law(self, context: int | None) -> torch.Tensor:
        """[V] log q_raw(· | context): the fitted law before temperature/top-k/top-p."""
        if self.order == 1 or context not in self._follow:
            return self._log_unigram  # type: ignore[return-value]  # set by fit() before any law is read
        ids, counts, total = self._follow[context]
        row = self._unigram * self.backoff  # type: ignore[operator]  # set by fit() before any law is read; [V] λ·u(x)
        row = row.index_add(0, ids, counts)  # type: ignore[union-attr]  # set by fit() before any law is read; + c(a, x)
        return (row / (total + self.backoff)).log()

    def processed(self, context: int | None, sampling: SamplingConfig) -> torch.Tensor:
        """[V] the law a token is drawn from: log q_raw processed like the target's logits
        (at T = 0: a 0-d tensor, the argmax). Cached; callers must not modify the result."""
        key = (context if self.order == 2 and context in self._follow else None, sampling)
        row = self._rows.get(key)
        if row is not None:
            self._rows.move_to_end(key)
            return row
        logits = self.log_law(context)
        row = logits.argmax(-1) if sampling.greedy else processed_probs(logits, sampling)
        self._rows[key] = row
        if len(self._rows) > self._max_rows:
            self._rows.popitem(last=False)
        return row

    # ---- the Proposer protocol -----------------------------------------------------------

    def row_copy(self) -> FrequencyDraft:
        """A row's copy with its own memo of laws: a draft refitted on each row's prompt must not answer one
        row from a law another row cached."""
        clone = super().row_copy()
        clone._rows = OrderedDict()
        return clone

    def begin(self, prompt_ids: list[int], max_new_tokens: int = 0) -> None:
        if not self._from_corpus:  # no task corpus was given: fit on this example's prompt alone
            self._fit([list(prompt_ids)])

    def propose(
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        if self._log_unigram is None:
            raise SpecbenchError(f"{self.name} draft used before fit() or begin(); call begin(prompt_ids) first")
        context = tokens[-1] if tokens else None
        if self.order == 1:  # one law for every position: γ i.i.d. draws from it
            q = self.processed(None, sampling)
            if sampling.greedy:
                return Proposal(tokens=q.repeat(gamma), q_probs=None, forward_calls=0)
            ids = torch.multinomial(q, gamma, replacement=True, generator=generator)  # [γ]
            return Proposal(tokens=ids, q_probs=q.unsqueeze(0).repeat(gamma, 1), forward_calls=0)
        drafted, laws = [], []
        for _ in range(gamma):
            q = self.processed(context, sampling)  # [V] the law we sample from and report (argmax at T = 0)
            tok = q if sampling.greedy else sample(q, generator)
            if not sampling.greedy:
                laws.append(q)
            drafted.append(tok)
            context = int(tok)
        ids = torch.stack(drafted)  # [γ]
        return Proposal(tokens=ids, q_probs=torch.stack(laws) if laws else None, forward_calls=0)


def make_frequency_draft(
    spec: DraftSpec, vocab_size: int, device: torch.device, corpus: list[list[int]] | None = None
) -> FrequencyDraft:
    """A parsed 'unigram[:k=..]' or 'bigram[:k=..,backoff=..]' → a FrequencyDraft (fitted if a corpus is given)."""
    draft = FrequencyDraft(1 if spec.kind == "unigram" else 2, vocab_size, device, name=spec.text, **dict(spec.options))  # type: ignore[arg-type]  # parse_draft checked each option
    if corpus is not None:
        draft.fit(corpus)
    return draft

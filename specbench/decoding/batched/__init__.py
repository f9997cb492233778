"""Batched decoding: B prompts decoded together, each row exactly its own example.

API (what the runner calls; both return one DecodeResult per prompt, in prompt order):

    decode_autoregressive_batch(model, prompts, *, max_new_tokens, sampling, eos_ids,
                                generators=None, pad_id=0, clock=None) -> list[DecodeResult]
    decode_speculative_batch(target, proposers, prompts, *, gamma, policy="ragged",
                             max_new_tokens, sampling, eos_ids, generators=None, pad_id=0,
                             clock=None) -> list[DecodeResult]

- model / target: a transformers decoder-only model, a CachedModel (its network is used; only
  --backend eager is batched: others raise SpecbenchError), or a BatchedCachedModel to reuse.
  Encoder-decoder models raise SpecbenchError (use batch size 1).
- prompts: token-id lists of any lengths (left-padded with pad_id inside; pad_id never reaches
  a valid position, so any id in the vocabulary will do: pass the tokenizer's pad or EOS id).
- max_new_tokens: one budget for all rows, or one per row (each >= 1).
- generators: one per row (None: the global RNG). Each row draws only from its own, in the
  batch-1 engine's order, so at T > 0 with policy "ragged" a row's output equals the batch-1
  engine's for the same generator seed (up to float rounding), and rows are independent.
- proposers: one Proposer for all rows, or one per row. One draft for all rows batches as it
  says (`Proposer.batched`, drafts.py): a model draft drafts every row in one batched pass (its
  own cache is not used); a model-free draft (prompt lookup, unigram/bigram) proposes per row
  from a copy per row; a hybrid looks up per row and drafts the rest in one batched model pass.
  One proposer per row drafts row by row on the host, each with its own.
- policy: "ragged" (each row keeps its own n + 1) or "min" (every row advances by the batch's
  min of n + 1: the ablation). Exactness arguments in speculative.py.

DecodeResult per row, as the batch-1 engines fill it (decoding/base.py), plus the batch fields:
  token_ids, stop_reason       the row's own output and why it stopped
  prefill_s                    the batch's prefill (every row's prompt + first token), same for every row
  decode_s                     from the batch's first token until this row's last token
  target_calls, pass_lengths   the verify passes this row took part in; pass_lengths holds the row's
                               own γ'_r + 1 (its tokens in the pass), as batch-1 records them
  draft_calls                  draft forwards this row's tokens needed (its γ'_r per step)
  drafted, accepted, trials, accept_lengths, draft_lengths, proposal_lengths, expected_accept
                               the row's verifier decisions, batch-1 semantics (under "min" a row may
                               keep fewer than n + 1: accepted still counts the verifier's n)
  kept_lengths                 tokens this row kept per step (n + 1 under ragged; ≤ n + 1 under min)
  draft_s, verify_s            the batch's draft / verify time over the steps this row was live
  batch_size, batch_s          rows in the batch; the batch's wall time (prefill to last stop)
  batch_pass_rows, batch_pass_widths
                               per batched target pass after prefill: live rows and tokens per row
                               (the pass's rectangle), same lists on every row of the batch
Batch totals: tokens/s = Σ len(token_ids) / batch_s; tokens per target pass = Σ tokens / len(batch_pass_rows).

Finished rows leave the batch (their cache rows are dropped), so they cost nothing afterwards.
"""

from specbench.decoding.batched.baseline import decode_autoregressive_batch
from specbench.decoding.batched.cache import BatchedCachedModel
from specbench.decoding.batched.speculative import POLICIES, decode_speculative_batch

__all__ = ["BatchedCachedModel", "POLICIES", "decode_autoregressive_batch", "decode_speculative_batch"]

"""The target's passes on vLLM, timed: what specbench's calibration (t(k)) and noise probes run on `--engine vllm`.

measure/ times a target pass over k new tokens through CachedModel's interface (start / forward / truncate / length)
and never reads the logits beyond a host sync. vLLM exposes no KV cache to a client, so `VllmPasses` keeps the token
list and each forward asks the worker for one prompt pass over it and one sampled token: with vLLM's prefix caching
every whole block of an earlier pass over the same prefix is reused, so the pass computes the tokens after them. The
context a pass starts from is cut to whole blocks (vLLM's CPU block is 128 tokens; a shorter context is recomputed
every pass, as in the noise probe's 32 tokens), so after it a forward of k tokens computes exactly those k. What this
times is vLLM's cost of a k-token prompt continuation, scheduler included: the verify pass of speculative decoding
is of that shape, but vLLM runs it inside a decode step, so the curve is a close model, not the same kernel launch.

`forward` returns a `PassOutput`, not logits: anything that would read logits from it fails loudly (the numerics
replays and the NLL run on the session's torch copy of the target instead, session.py).
"""

from __future__ import annotations

import torch

from specbench.engines.vllm.client import VllmClient


class PassOutput:
    """What a timed vLLM pass returns in place of logits: `argmax(-1).tolist()` (the calibration's host sync) works,
    nothing else does."""

    def argmax(self, dim: int = -1) -> PassOutput:
        return self

    def tolist(self) -> list[int]:
        return []


class NoBackend:
    """vLLM sizes and compiles its own caches and graphs: reserve and the kind are all measure/ asks of a backend."""

    def __init__(self, kind: str):
        self.kind = kind  # "eager" (enforce_eager) or "compiled" (vLLM's torch.compile)

    def reserve(self, capacity: int) -> None:
        return None


class VllmPasses:
    """CachedModel's pass interface over the worker's plain engine (`key`)."""

    is_seq2seq = False

    def __init__(self, client: VllmClient, key: str, block_size: int, backend: str):
        self.client, self.key, self.block_size = client, key, max(1, block_size)
        self.backend = NoBackend(backend)
        self.device = torch.device("cpu")  # timing is read on this side of the pipe: nothing to synchronize
        self.devices = (self.device,)
        self.tokens: list[int] = []
        self.last: dict = {}  # the worker's answer to the last pass: seconds, cached_tokens

    @property
    def length(self) -> int:
        return len(self.tokens)

    def start(self, encoder_ids: list[int] | None = None, capacity: int = 0) -> None:
        self.tokens = []

    def prime(self, max_tokens: int, all_logits: bool) -> None:
        return None  # vLLM warms itself up at load

    def forward(self, tokens: torch.Tensor, all_logits: bool = False) -> PassOutput:
        new = [int(t) for t in tokens.reshape(-1).tolist()]
        if not self.tokens:  # the context: whole blocks only, so that later passes find all of it cached
            whole = len(new) // self.block_size * self.block_size
            new = new[:whole] if whole else new
        self.tokens += new
        self.last = self.client.request("pass", key=self.key, prompt_ids=self.tokens)
        return PassOutput()

    def truncate(self, length: int) -> None:
        del self.tokens[length:]

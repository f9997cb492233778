"""The proposer a vLLM run holds: a name for vLLM's own drafting method, nothing that drafts on specbench's side.

The runner and planner handle a run's draft as a Proposer (they ask it for model caches to warm and time, a lookup
history for the pilot, an HF assistant); vLLM drafts inside its own engine, so this one answers that it has none of
them and refuses to draft in specbench's loop, and the engine maps its DraftSpec to vLLM's method (vllm_method).
"""

from __future__ import annotations

from specbench.engines.vllm import ENGINE_NAME, check_draft, own_method
from specbench.errors import SpecbenchError
from specbench.run_specs import DraftSpec

NOT_HERE = f"this draft runs inside vLLM (--engine {ENGINE_NAME}), not in specbench's loop"


class VllmDraft:
    """A --draft as vLLM runs it (its network, if any, is loaded by vLLM: no cost measured on specbench's side)."""

    def __init__(self, spec: DraftSpec):
        check_draft(spec)
        self.spec = spec
        self.name = spec.text
        self.is_model = spec.uses_model and own_method(spec) != ("suffix", None)  # suffix trees are no network

    def begin(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        raise SpecbenchError(NOT_HERE)

    def propose(self, *args, **kwargs):
        raise SpecbenchError(NOT_HERE)

    def model_caches(self) -> list:
        return []  # its network runs in vLLM: nothing for specbench to size, compile, warm or time

    def hf_assistant(self):
        return None

    def set_timer(self, clock) -> None:
        return None

    def lookup_history(self) -> list[int] | None:
        return None

    def batched(self, size: int, device):
        raise SpecbenchError(f"--engine {ENGINE_NAME} decodes one request at a time: use --batch-size 1")

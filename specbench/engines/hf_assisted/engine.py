"""The hf-assisted engine at run time: specbench's plain torch loop as the baseline, HF's generate() with the run's
model draft as its assistant for the speculative arm."""

from __future__ import annotations

from specbench.decoding.base import DecodeResult, Proposer, hf_assistant
from specbench.engines.contract import DecodeJob
from specbench.engines.hf_assisted import NEEDS_MODEL
from specbench.engines.hf_assisted.generate import decode_hf
from specbench.engines.session import Session
from specbench.engines.torch.engine import LoopEngine
from specbench.errors import SpecbenchError


class HfAssistedEngine(LoopEngine):
    """The torch session and baseline; HF's own loop for the speculative arm."""

    def speculative(
        self, session: Session, job: DecodeJob, prompt_ids: list[int], seed: int, max_new: int
    ) -> DecodeResult:
        t = session.target
        assistant = hf_assistant(job.proposer)
        if assistant is None:
            raise SpecbenchError(NEEDS_MODEL)
        return decode_hf(
            t.model,
            prompt_ids,
            max_new_tokens=max_new,
            sampling=job.sampling,
            seed=seed,
            eos_ids=t.eos_ids,
            assistant=assistant,
            gamma=job.fixed_gamma,  # type: ignore[arg-type]  # fixed: auto resolved, policies refused (hf_rules)
            min_confidence=job.min_confidence,
        )

    def check_proposer(self, proposer: Proposer) -> None:
        if hf_assistant(proposer) is None:  # before the run folder exists
            raise SpecbenchError(NEEDS_MODEL)


ENGINE = HfAssistedEngine()

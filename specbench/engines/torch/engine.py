"""specbench's own loop in PyTorch: plain decoding and Algorithm 1 over the target's KV cache, with every draft."""

from __future__ import annotations

from specbench.config import LoadSpec
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import DecodeResult, Proposer
from specbench.decoding.sampling import make_generator
from specbench.decoding.speculative import decode_speculative
from specbench.engines.contract import DecodeJob
from specbench.engines.session import Session


class LoopEngine:
    """Both arms in specbench's loops over `session.target_lm()`: any session whose target_lm is a CachedModel (torch)
    or duck-types one (llama.cpp's LlamaCppModel) runs here. Subclasses choose the session."""

    def open_session(self, load: LoadSpec) -> Session:
        from specbench.engines.torch.session import TorchSession

        return TorchSession(load)

    def baseline(
        self, session: Session, job: DecodeJob, prompt_ids: list[int], seed: int, max_new: int
    ) -> DecodeResult:
        t = session.target
        return decode_autoregressive(
            session.target_lm(),
            prompt_ids,
            max_new_tokens=max_new,
            sampling=job.sampling,
            generator=make_generator(t.device, seed),
            eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id,
            pad_to=job.pad_to,
        )

    def speculative(
        self, session: Session, job: DecodeJob, prompt_ids: list[int], seed: int, max_new: int
    ) -> DecodeResult:
        t = session.target
        return decode_speculative(
            session.target_lm(),
            job.proposer,
            prompt_ids,
            gamma=job.gamma_policy(),
            max_new_tokens=max_new,
            sampling=job.sampling,
            generator=make_generator(t.device, seed),
            eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id,
            min_confidence=job.min_confidence,
            pad_to=job.pad_to,
            stepwise=job.bit_exact,
        )

    def check_proposer(self, proposer: Proposer) -> None:
        return None


ENGINE = LoopEngine()

"""The vllm engine at run time: vLLM plain decoding as the baseline, vLLM's own speculative method (the run's --draft
mapped by `vllm_method`, γ as num_speculative_tokens) as the speculative arm, both in the session's worker."""

from __future__ import annotations

from specbench.config import LoadSpec
from specbench.decoding.base import DecodeResult, Proposer
from specbench.engines.contract import DecodeJob, LoadSchedule, ServedLoad
from specbench.engines.session import Session
from specbench.engines.vllm import ENGINE_NAME
from specbench.engines.vllm.draft import VllmDraft
from specbench.engines.vllm.session import PLAIN, VllmSession
from specbench.errors import SpecbenchError


def vllm_session(session: Session) -> VllmSession:
    if not isinstance(session, VllmSession):
        raise SpecbenchError(f"--engine {ENGINE_NAME} needs its own session (got a {session.session_kind} session)")
    return session


class VllmEngine:
    """Both arms are requests to the worker; nothing decodes in specbench's process."""

    def open_session(self, load: LoadSpec) -> Session:
        return VllmSession(load)

    def baseline(
        self, session: Session, job: DecodeJob, prompt_ids: list[int], seed: int, max_new: int
    ) -> DecodeResult:
        return vllm_session(session).decode(PLAIN, job.sampling, prompt_ids, seed, max_new)

    def speculative(
        self, session: Session, job: DecodeJob, prompt_ids: list[int], seed: int, max_new: int
    ) -> DecodeResult:
        s = vllm_session(session)
        key = s.speculative_key(job.proposer, job.fixed_gamma, job.plant)
        return s.decode(key, job.sampling, prompt_ids, seed, max_new)

    def serve_load(
        self,
        session: Session,
        job: DecodeJob,
        arm: str,
        prompts: list[list[int]],
        seeds: list[int],
        max_new: int,
        schedule: LoadSchedule,
    ) -> ServedLoad:
        """A load run's requests on the plain engine (arm "baseline") or the speculative one, together."""
        s = vllm_session(session)
        key = PLAIN if arm == "baseline" else s.speculative_key(job.proposer, job.fixed_gamma, job.plant)
        return s.decode_load(key, job.sampling, prompts, seeds, max_new, schedule)

    def check_proposer(self, proposer: Proposer) -> None:
        if not isinstance(proposer, VllmDraft):
            raise SpecbenchError(f"--engine {ENGINE_NAME} runs vLLM's own methods; {proposer.name} is not one")


ENGINE = VllmEngine()

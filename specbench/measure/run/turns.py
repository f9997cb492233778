"""Multi-turn questions: the later turns are asked after the model's own answers, as Spec-Bench does.

MT-bench's questions (8 of Spec-Bench's 13 categories) have two user turns. Spec-Bench asks
the second with the first answer of *the same engine* in the conversation (fastchat's
template there, the tokenizer's chat template here), times each turn's generation alone,
and sums tokens and seconds per question. So does this module:

  turn 1  the prepared prompt, decoded by the engine              → answer a1
  turn 2  chat([user q1, assistant a1, user q2]), decoded again   → answer a2

Building and tokenizing the conversation between turns is not timed. Each turn is a fresh
decode (fresh caches, its own seed: the question's for turn 1, +j for turn j+1), so nothing
carries over but the text. The example record's engine records are the turns summed (counts
and seconds added, token lists concatenated), so every metric works unchanged; the record's
`turns` field keeps each turn's own engine records (timing, α and accepted lengths per turn)
for the Spec-Bench export. A one-turn example goes through untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from specbench.decoding.base import DecodeResult
from specbench.errors import SpecbenchError
from specbench.measure.results.record_schema import engine_dict
from specbench.measure.run.arms import engine_record, merge_repeats
from specbench.measure.stats.metric_units import first_divergence

Decode = Callable[[list[int], int, int], DecodeResult]  # (prompt ids, seed, max_new_tokens) → result


@dataclass
class Turn:
    """One turn of one engine's conversation."""

    prompt_ids: list[int]  # the whole conversation so far, tokenized for the target
    result: DecodeResult  # the engine's decode of it


@dataclass
class TurnLog:
    """The per-turn decodes of one question: engine → one list of turns per timed repeat (ask_turns fills it)."""

    runs: dict[str, list[list[Turn]]] = field(default_factory=lambda: {"baseline": [], "speculative": []})

    def records(self, tokenizer) -> list[dict] | None:
        """The record's `turns` field: per turn, each engine's EngineRecord (repeats merged, as the runner merges
        whole examples) and its prompt length; None for a one-turn question. A sweep's shared baseline is
        not decoded again, so its turns are null there."""
        spec = self.runs["speculative"]
        if not spec or len(spec[0]) < 2:
            return None
        base = self.runs["baseline"]
        out = []
        for j in range(len(spec[0])):
            row: dict[str, Any] = {}
            for engine, reps in (("baseline", base), ("speculative", spec)):
                if not reps:
                    row[engine], row[f"{engine}_prompt_tokens"] = None, None
                    continue
                merged, repeat_s = merge_repeats([rep[j].result for rep in reps])
                row[engine] = engine_dict(engine_record(merged, tokenizer, repeat_s))
                row[f"{engine}_prompt_tokens"] = len(reps[0][j].prompt_ids)
            out.append(row)
        return out

    def numerics_inputs(
        self, prompt_ids: list[int], base: dict, spec: dict, divergence: int | None
    ) -> tuple[list[int], dict, dict, int | None]:
        """What the numerics classifier replays: for a multi-turn question, the first turn whose tokens differ
        (both engines saw the same conversation up to it) or else the first turn, with that turn's own
        divergence; a one-turn question's (or a shared baseline's) inputs unchanged."""
        b, s = self.runs["baseline"], self.runs["speculative"]
        if not b or not s or len(s[0]) < 2:
            return prompt_ids, base, spec, divergence
        pairs = list(zip(b[0], s[0]))
        for bt, st in pairs:
            local = first_divergence(bt.result.token_ids, st.result.token_ids)
            if local is not None:
                return bt.prompt_ids, asdict(bt.result), asdict(st.result), local
        return pairs[0][0].prompt_ids, asdict(pairs[0][0].result), asdict(pairs[0][1].result), None


def refuse_turns(prepared: list, option: str, fix: str) -> None:
    """A loop that decodes every prompt at once (a batch's rows, a load's requests) cannot answer a multi-turn
    question, whose every turn waits for the last answer: one line naming `option` and `fix`."""
    multi = [p.example.id for p in prepared if p.example.turns]
    if multi:
        raise SpecbenchError(
            f"example {multi[0]!r} has several turns, which {option} cannot decode (each turn waits for the last "
            f"answer); {fix}"
        )


def turn_seed(seed: int, turn: int) -> int:
    """Turn 1 keeps the question's seed (a one-turn question decodes exactly as before); later turns add their index."""
    return seed + turn


def answer_text(tokenizer, token_ids: list[int]) -> str:
    """The answer as the next turn's conversation holds it (special tokens dropped, stripped, as Spec-Bench does)."""
    return tokenizer.decode(token_ids, skip_special_tokens=True).strip()


def conversation_ids(spec, messages: list[dict], target, max_new_tokens: int, where: str) -> list[int]:
    """The conversation through the task's chat template, tokenized; one line when it overflows the context."""
    from specbench.tasks.examples import render_conversation

    tok = target.tokenizer
    templated = bool(spec.chat_template and getattr(tok, "chat_template", None))
    ids = tok(render_conversation(spec, messages, tok), add_special_tokens=not templated)["input_ids"]
    if target.max_positions and len(ids) + max_new_tokens > target.max_positions:
        raise SpecbenchError(
            f"{where}: the conversation of {len(ids)} tokens + {max_new_tokens} new tokens exceeds "
            f"the context of {target.max_positions}; lower --max-new-tokens"
        )
    return ids


def ask_turns(
    decode: Decode, item, seed: int, max_new_tokens: int, spec, target, log: list[list[Turn]]
) -> DecodeResult:
    """Decode every turn of a prepared example with one engine; → the turns summed. The turns go to `log`
    (one entry per call: the runner's repeats). A one-turn example is one plain decode, logged likewise."""
    example = item.example
    messages = [{"role": "user", "content": example.prompt}]
    prompt_ids = item.prompt_ids
    turns: list = []
    for j, question in enumerate((None, *example.turns)):
        if question is not None:
            messages += [
                {"role": "assistant", "content": answer_text(target.tokenizer, turns[-1].result.token_ids)},
                {"role": "user", "content": question},
            ]
            prompt_ids = conversation_ids(
                spec, messages, target, max_new_tokens, f"example {example.id!r} turn {j + 1}"
            )
        turns.append(Turn(prompt_ids, decode(prompt_ids, turn_seed(seed, j), max_new_tokens)))
    log.append(turns)
    return summed([t.result for t in turns])


def summed(results: list[DecodeResult]) -> DecodeResult:
    """Turns → one result: numbers added, lists concatenated in turn order, the last turn's stop reason."""
    if len(results) == 1:
        return results[0]
    out = DecodeResult(token_ids=[], stop_reason=results[-1].stop_reason, prefill_s=0.0, decode_s=0.0)
    for r in results:
        for f in fields(DecodeResult):
            if f.name != "stop_reason":
                setattr(out, f.name, getattr(out, f.name) + getattr(r, f.name))
    return out

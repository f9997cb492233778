"""The cheap cases of issue 41's fresh hostile probe (bench/hostile_fresh.py), in process.

Each bad command line must end as one `error:` line that names the problem and a fix, with click's exit code (2 for
a bad command line, 1 for a failure at run time) and no run folder left behind; each damaged or foreign results
folder must give its records' own figures in `export` or name what it left out. The probe judges the case exactly as
it judges the `specbench` process (bench/hostile_fresh.py `judge`); here it runs through CliRunner, so the whole set
costs seconds. The cases that need the model (kills, concurrent writers, long prompts, environment variables) run
only in the probe itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import hostile_fresh as probe  # noqa: E402

CASES = probe.in_process_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_fresh_hostile_case_is_answered_as_the_standard_says(case, tmp_path):
    outcome = probe.in_process(case, tmp_path)
    assert outcome.verdict == "ok", f"{outcome.verdict}: {outcome.detail}"


def test_the_judge_catches_each_kind_of_failure(tmp_path):
    """Negative controls: the judge must call a traceback, a wrong exit code, a silent exit 0, an unclear line and a
    missing fix what they are (else every case above would pass vacuously)."""
    case = probe.Case("x", [], (2,), ("--limit",))
    verdict = lambda rc, err, out="": probe.judge(case, probe.Result(rc, out, err), tmp_path).verdict  # noqa: E731
    assert verdict(2, "error: --limit must be >= 1 (got 0)") == "ok"
    assert verdict(1, "Traceback (most recent call last):\nValueError: x") == "traceback"
    assert verdict(1, "error: --limit must be >= 1 (got 0)") == "wrong-exit"
    assert verdict(0, "", "a table") == "silent-wrong"
    assert verdict(2, "error: --limit must be >= 1\nerror: again") == "unclear-message"
    assert verdict(2, "error: bad value") == "unclear-message"  # names neither the option nor a fix
    assert verdict(2, "error: --limit is bad") == "unclear-message"  # names the option, no fix
    assert verdict(None, "") == "hang"


# --------------------------------------------------------------------------- the prompt bound on its other two paths


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    from helpers import save_tiny

    return save_tiny(tmp_path_factory.mktemp("models") / "target", 0)  # a small context (max_position_embeddings)


class Counting:
    """A tokenizer that records the length of every text it tokenizes."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def __call__(self, text, **kw):
        self.calls.append(len(text))
        return self.tokenizer(text, **kw)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_the_prompt_length_pool_is_bounded_before_it_is_tokenized(tiny_target, tmp_path):
    """--prompt-length tokenizes every candidate to set the tertiles: a prompt that cannot fit the context is refused
    by its characters first, as on the default path (issue 41 said the bound was not applied there)."""
    from specbench.config import RunConfig
    from specbench.errors import SpecbenchError
    from specbench.measure.run.planning import select_run_examples
    from specbench.models.loading import load_tokenizer
    from specbench.tasks.specs import load_task

    huge = "the cat " * 200_000  # 1.6 MB: over 512 tokens whatever the vocabulary
    task = tmp_path / "t.jsonl"
    rows = [{"prompt": p} for p in ("a short one", "a somewhat longer prompt here", huge, "mid length prompt")]
    task.write_text("".join(f'{{"prompt": "{r["prompt"]}"}}\n' for r in rows))
    config = RunConfig(tiny_target, "prompt-lookup", str(task), gamma=2, limit=1, max_new_tokens=4,
                       prompt_length="short")  # fmt: skip
    tokenizer = Counting(load_tokenizer(tiny_target))
    with pytest.raises(SpecbenchError, match=r"a prompt of [\d,]+ characters cannot fit the context of \d+ tokens"):
        select_run_examples(load_task(str(task)), config, tokenizer)
    assert max(tokenizer.calls, default=0) < 1000  # the huge prompt never reached the tokenizer
    task.write_text("".join(f'{{"prompt": "{r["prompt"]}"}}\n' for r in rows if r["prompt"] != huge))
    examples, bucket = select_run_examples(load_task(str(task)), config, tokenizer)  # the control: it still selects
    assert bucket is not None and len(examples) == 1


def test_a_later_turn_counts_toward_the_bound_before_anything_is_tokenized(tiny_target):
    """A multi-turn question is refused by the characters of all its user turns before its first turn is tokenized:
    its last turn is asked with every earlier one in the conversation (issue 41: later turns were unbounded)."""
    from types import SimpleNamespace

    from specbench.errors import SpecbenchError
    from specbench.measure.run.arms import prepare_examples
    from specbench.models.loading import load_tokenizer
    from specbench.tasks.examples import Example

    tokenizer = Counting(load_tokenizer(tiny_target))
    target = SimpleNamespace(max_positions=256, tokenizer=tokenizer)
    task = SimpleNamespace(chat_template=False, name="t")
    question = Example("q", "say hi", None, turns=("the cat " * 100_000,))
    with pytest.raises(SpecbenchError, match=r"example 'q': a prompt and its 1 later turn\(s\) of [\d,]+ characters"):
        prepare_examples(task, [question], target, 4)
    assert tokenizer.calls == []
    short = Example("q", "say hi", None, turns=("and bye",))  # the control: a short question still prepares
    assert len(prepare_examples(task, [short], target, 4)) == 1

"""The typed run specs (specbench/run_specs.py): γ parsed once into a GammaSpec that writes back the same values.

A GammaSpec replaced `int | str` γ in RunConfig; records, run ids and manifests must not notice. The ids pinned
below were computed by the code before GammaSpec (57edeb8's config.py) for the same configurations; those with draft
strings by the code before RunConfig carried a DraftSpec (a7b295e), where the draft was a plain string."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specbench.config import RunConfig, SamplingConfig
from specbench.errors import SpecbenchError
from specbench.measure.planning import run_id_for
from specbench.run_specs import MAX_GAMMA, DraftSpec, GammaSpec, parse_draft, parse_gamma


@pytest.mark.parametrize(
    "given, spec",
    [
        (4, GammaSpec(fixed=4)),
        ("4", GammaSpec(fixed=4)),
        (" 12 ", GammaSpec(fixed=12)),
        ("auto", GammaSpec(policy="auto")),
        ("Adaptive", GammaSpec(policy="adaptive")),
        ("heuristic", GammaSpec(policy="heuristic")),
        (GammaSpec(fixed=2), GammaSpec(fixed=2)),
    ],
)
def test_parse_gamma(given, spec):
    assert parse_gamma(given) == spec
    assert parse_gamma(spec.value) == spec  # the written value reads back as the same spec


@pytest.mark.parametrize("bad", [True, 2.0, "1e9", "fast", "", None])
def test_a_bad_gamma_is_one_line(bad):
    with pytest.raises(SpecbenchError, match="--gamma must be an integer or one of auto, adaptive, heuristic") as err:
        parse_gamma(bad)
    assert "\n" not in str(err.value)


def test_the_range_is_checked_by_validate():
    assert GammaSpec(fixed=MAX_GAMMA).check_range().fixed == MAX_GAMMA
    for bad in (0, MAX_GAMMA + 1):
        with pytest.raises(SpecbenchError, match=f"between 1 and {MAX_GAMMA}"):
            RunConfig("t", "d", "x", gamma=bad).validate()


def test_draft_gamma_is_gamma_or_gamma_max_under_a_policy():
    assert RunConfig("t", "d", "x", gamma=3, gamma_max=6).draft_gamma == 3
    assert RunConfig("t", "d", "x", gamma="adaptive", gamma_max=6).draft_gamma == 6


PINNED = [  # (config, its run id as computed before GammaSpec)
    (RunConfig("smollm2-135m", "prompt-lookup", "aclsum", gamma=4), "aclsum-prompt-lookup-g4-t0-338151fc"),
    (RunConfig("t", "d", "x", gamma="adaptive", gamma_max=6), "x-d-gadaptive-t0-210b7623"),
    (
        RunConfig("t", "lookup+distilled", "x", gamma="auto", dtype="auto", sampling=SamplingConfig(0.7, 5, 0.9)),
        "x-lookup_distilled-gauto-t0.7-8a8a5c6b",
    ),
    (RunConfig("t", "d", "x", gamma=3, batch_size=2, batch_policy="min"), "x-d-g3-t0-b2-min-3629ca6a"),
    (RunConfig("t", "d", "x", gamma="heuristic", prompt_length="long"), "x-d-gheuristic-t0-plong-f7c077a9"),
    # draft strings, pinned by the code before DraftSpec in RunConfig (a7b295e, draft a str there)
    (
        RunConfig("smollm2-135m", "prompt-lookup:rule=hf,max_ngram=2", "aclsum", gamma=3),
        "aclsum-prompt-lookup_rule_hf_max_ngram_2-g3-t0-15b2be89",
    ),
    (RunConfig("t", "lookup+distilled", "x", gamma=5), "x-lookup_distilled-g5-t0-71526610"),
    (
        RunConfig("t", "models/drafts/tiny-draft", "x", gamma=2, sampling=SamplingConfig(0.5, 0, 1.0)),
        "x-tiny-draft-g2-t0.5-f46e4010",
    ),
    (RunConfig("t", "auto", "x", gamma="auto"), "x-auto-gauto-t0-10488d35"),
    (
        RunConfig("t", "bigram:k=0.01,backoff=3", "x", gamma=4, prompt_length="short"),
        "x-bigram_k_0.01_backoff_3-g4-t0-pshort-15257852",
    ),
    (RunConfig("t", "hybrid:HuggingFaceTB/SmolLM2-135M", "x", gamma=4), "x-SmolLM2-135M-g4-t0-f26a14d3"),
]


@pytest.mark.parametrize("config, run_id", PINNED)
def test_run_ids_and_config_json_are_as_before(config, run_id):
    assert run_id_for(config) == run_id
    doc = json.loads(json.dumps(config.to_dict()))
    assert doc["gamma"] == config.gamma.value and type(doc["gamma"]) is type(config.gamma.value)
    assert doc["draft"] == config.draft.text and config.draft == parse_draft(config.draft.text)
    assert RunConfig.from_dict(doc) == config


def test_a_pinned_id_catches_gamma_written_as_text(monkeypatch):
    """Negative control through the same path: were γ 4 written as "4", the run id (and resume) would change."""
    monkeypatch.setattr(GammaSpec, "value", property(lambda self: str(self.fixed or self.policy)))
    config, run_id = PINNED[0]
    assert run_id_for(config) != run_id


def test_a_pinned_id_catches_the_draft_written_as_its_parts(monkeypatch):
    """Negative control: were the draft written as its parsed fields (asdict's form), ids and resume would change."""
    monkeypatch.setattr(RunConfig, "to_dict", lambda self: dataclasses.asdict(self) | {"gamma": self.gamma.value})
    config, run_id = PINNED[5]
    assert run_id_for(config) != run_id


def test_the_draft_is_parsed_once_into_a_spec():
    spec = parse_draft("prompt-lookup:rule=hf,max_ngram=2")
    assert RunConfig("t", spec, "x").draft is spec  # a spec given is carried as it is
    config = RunConfig("t", "prompt-lookup:rule=hf,max_ngram=2", "x")
    assert config.draft == spec and str(config.draft) == spec.text
    assert RunConfig("t", "auto", "x").draft == DraftSpec("auto", "auto") and RunConfig("t", "auto", "x").draft.auto
    assert not config.draft.auto
    with pytest.raises(SpecbenchError, match="max_ngram"):
        RunConfig("t", "prompt-lookup:max_ngram=0", "x")  # malformed: one line at construction, before any load

"""The typed run specs (specbench/run_specs.py): γ parsed once into a GammaSpec that writes back the same values.

A GammaSpec replaced `int | str` γ in RunConfig; records, run ids and manifests must not notice. The ids pinned
below were computed by the code before GammaSpec (57edeb8's config.py) for the same configurations; those with draft
strings by the code before RunConfig carried a DraftSpec (a7b295e), where the draft was a plain string."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specbench.config import LoadSpec, RunConfig, SamplingConfig
from specbench.errors import SpecbenchError
from specbench.measure.run.planning import run_id_for
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
        RunConfig(
            LoadSpec("t", dtype="auto"), "lookup+distilled", "x", gamma="auto", sampling=SamplingConfig(0.7, 5, 0.9)
        ),
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


# --------------------------------------------------------------------------- the load spec

# to_dict of a config with every load setting off its default, by the code before RunConfig embedded a LoadSpec
# (2e1ee79's config.py): the load fields sit flat among the others, in this order, and the run id hashes them
LOADED = RunConfig(
    LoadSpec(
        "smollm2-135m",
        device="cpu",
        dtype="bfloat16",
        trust_remote_code=True,
        backend="static",
        device_map="auto",
        max_memory="0=1GiB",
        threads=2,
    ),
    "prompt-lookup",
    "aclsum",
    gamma=3,
)
LOADED_JSON = (
    '{"target": "smollm2-135m", "draft": "prompt-lookup", "task": "aclsum", "gamma": 3, "sampling": {"temperature": '
    '0.0, "top_k": 0, "top_p": 1.0}, "limit": 8, "seed": 0, "max_new_tokens": null, "device": "cpu", "dtype": '
    '"bfloat16", "engine": "specbench", "trust_remote_code": true, "backend": "static", "device_map": "auto", '
    '"max_memory": "0=1GiB", "threads": 2}'
)


def test_the_load_spec_is_written_flat_as_config_json_always_was():
    assert json.dumps(LOADED.to_dict()) == LOADED_JSON  # the same bytes, key order included (manifests, sweep.json)
    assert run_id_for(LOADED) == "aclsum-prompt-lookup-g3-t0-0019e7b8"
    assert RunConfig.from_dict(json.loads(LOADED_JSON)) == LOADED
    assert RunConfig("t", "d", "x").load == LoadSpec("t")  # a bare target: every other load setting at its default


def test_an_older_config_without_the_later_load_fields_reads_back():
    old = {k: v for k, v in json.loads(LOADED_JSON).items() if k not in ("device_map", "max_memory", "threads")}
    config = RunConfig.from_dict(old)
    assert config.load == dataclasses.replace(LOADED.load, device_map=None, max_memory=None, threads=0)
    assert config.to_dict() == old  # the later fields at their defaults stay out of the id, as before


def test_a_pinned_id_catches_the_load_spec_written_nested(monkeypatch):
    """Negative control: were the load spec written as a nested object (asdict's form), ids and resume would change."""
    monkeypatch.setattr(
        RunConfig,
        "to_dict",
        lambda self: dataclasses.asdict(self) | {"gamma": self.gamma.value, "draft": str(self.draft)},
    )
    assert run_id_for(LOADED) != "aclsum-prompt-lookup-g3-t0-0019e7b8"


def test_the_load_spec_checks_its_own_values():
    for load, needle in (
        (LoadSpec("t", device="tpu"), "--device must be one of"),
        (LoadSpec("t", dtype="int8"), "--dtype must be one of"),
        (LoadSpec("t", backend="jit"), "--backend must be one of"),
        (LoadSpec("t", threads=-1), "--threads must be >= 0"),
        (LoadSpec("t", max_memory="0=1GiB"), "--device-map"),
    ):
        with pytest.raises(SpecbenchError, match=needle):
            RunConfig(load, "d", "x").validate()  # RunConfig.validate checks its load spec
    assert LoadSpec("t", device="cpu", dtype="auto").validate() == LoadSpec("t", device="cpu", dtype="auto")


def test_a_grid_writes_its_load_spec_flat_as_sweep_json_always_had_it():
    """SweepGrid embeds the LoadSpec too; sweep.json's grid (and the sweep id hashing it) keeps the flat keys and
    their order (pinned by 2e1ee79's sweep.py for the same grid)."""
    from specbench.measure.run.sweep import SweepGrid

    grid = SweepGrid(
        load=LOADED.load,
        drafts=("prompt-lookup",),
        gammas=(1, 3),
        temperatures=(0.0,),
        tasks=("x",),
        engine=("llama-cpp", "specbench"),
    )
    assert json.dumps(grid.to_dict()) == (
        '{"target": "smollm2-135m", "drafts": ["prompt-lookup"], "gammas": [1, 3], "temperatures": [0.0], "tasks": '
        '["x"], "top_k": 0, "top_p": 1.0, "limit": 8, "seed": 0, "max_new_tokens": null, "device": "cpu", "dtype": '
        '"bfloat16", "engine": ["llama-cpp", "specbench"], "threads": 2, "trust_remote_code": true, "backend": '
        '"static", "device_map": "auto", "max_memory": "0=1GiB"}'
    )
    cells = {c.engine: c.load for c in grid.configs()}
    assert cells["llama-cpp"] == LOADED.load and cells["specbench"] == dataclasses.replace(LOADED.load, threads=0)

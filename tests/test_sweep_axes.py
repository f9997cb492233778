"""The sweep axes of issue 15: --max-new-tokens as a list, --prompt-length buckets, --pair TARGET:DRAFT.

Old commands must keep their run and sweep ids (golden ids computed with the code before the axes existed);
each axis must give every cell its own value, its own baseline, and a summary that records it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import MAX_NEW, PROMPTS, FakeSession, StubTokenizer, make_grid, write_prompts
from typer.testing import CliRunner

import specbench.engines.torch.session as torch_session
import specbench.measure.run.planning as planning
import specbench.models.loading as loading
from specbench.cli import app
from specbench.config import RunConfig
from specbench.errors import SpecbenchError
from specbench.measure.results.records import read_records
from specbench.measure.run.buckets import bucket_of, bucket_thresholds, choose_bucket, short_bucket_note
from specbench.measure.run.planning import run_id_for
from specbench.measure.run.sweep import SweepGrid, parse_budgets, parse_pair, parse_prompt_lengths
from specbench.measure.run.sweep_run import cell_ids, run_sweep, sweep_id_for


class TargetSession(FakeSession):
    """A FakeSession that remembers which target it was loaded for, and in which order sessions were made."""

    loaded: list[str] = []

    def __init__(self, load, *args, **kwargs):
        super().__init__()
        self.load = load
        TargetSession.loaded.append(load.target)


@pytest.fixture
def task_file(tmp_path) -> str:
    return write_prompts(tmp_path)


@pytest.fixture
def stub_tokenizer(monkeypatch):
    """Buckets need the target's tokenizer before any model loads: the stub's (one token per character)."""
    monkeypatch.setattr(loading, "load_tokenizer", lambda spec, trust_remote_code=False: StubTokenizer())


# --------------------------------------------------------------------------- ids stay as they were


def test_grids_and_runs_without_the_new_axes_keep_their_ids():
    kw = dict(
        target="smollm2-135m",
        draft="prompt-lookup,lookup+distilled",
        gamma="1-4",
        temperature="0,1",
        task="ding-de-en,aclsum",
        limit=8,
        seed=0,
        device="cpu",
    )
    # golden values: sweep_id_for / run_id_for of commit 9aaf41f, before the axes existed
    assert sweep_id_for(SweepGrid.from_specs(max_new_tokens=64, **kw)) == "sweep-aclsum_ding-de-en-32cells-49cb28fd"
    grid = SweepGrid.from_specs(max_new_tokens=parse_budgets(None), **kw)
    assert sweep_id_for(grid) == "sweep-aclsum_ding-de-en-32cells-b2f830a8"
    assert run_id_for(grid.configs()[0]) == "aclsum-lookup_distilled-g1-t0-128927b0"
    assert "prompt_length" not in RunConfig("t", "d", "x").to_dict()  # at its default: out of ids
    assert set(grid.to_dict()) == {
        "target",
        "drafts",
        "gammas",
        "temperatures",
        "tasks",
        "top_k",
        "top_p",
        "limit",
        "seed",
        "max_new_tokens",
        "device",
        "dtype",
        "engine",
        "trust_remote_code",
        "backend",
    }


def test_one_budget_is_not_an_axis():
    assert parse_budgets("64") == 64 and parse_budgets("256,16,64") == (16, 64, 256) and parse_budgets(None) is None
    with pytest.raises(SpecbenchError, match="--max-new-tokens"):
        parse_budgets("16,x")


# --------------------------------------------------------------------------- --max-new-tokens 16,64,256


def test_budget_axis_gives_each_cell_its_budget_and_its_own_baseline(tmp_path, task_file):
    grid = make_grid(task_file, draft="prompt-lookup", gamma="1,4", max_new_tokens=(3, MAX_NEW))
    cells = cell_ids(grid)
    ids = [cid for cid, _ in cells]
    assert ids == ["prompts-prompt-lookup-g1-t0-n3", "prompts-prompt-lookup-g1-t0-n5", "prompts-prompt-lookup-g4-t0-n5"]
    assert grid.skipped_gammas() == [(4, 3)]  # γ 4 > budget 3: skipped, not clamped
    with pytest.warns(UserWarning, match="γ 4 at 3"):
        out = run_sweep(grid, tmp_path, session=FakeSession())
    budgets = {c.cell_id: c.summary["max_new_tokens"] for c in out.cells}
    assert budgets == {ids[0]: 3, ids[1]: 5, ids[2]: 5}
    for cell in out.cells:  # each cell's own baseline decodes its own budget
        rows = read_records(out.root / cell.cell_id / "examples.jsonl")
        assert all(len(r["baseline"]["token_ids"]) == budgets[cell.cell_id] for r in rows)


def test_a_single_budget_still_refuses_a_larger_gamma(task_file, tmp_path):
    with pytest.raises(SpecbenchError, match="--gamma 4 is more than the 3 new tokens"):
        run_sweep(make_grid(task_file, gamma="1,4", max_new_tokens=3), tmp_path, session=FakeSession())
    with pytest.raises(SpecbenchError, match="every γ of --gamma is more than every --max-new-tokens"):
        make_grid(task_file, gamma="8", max_new_tokens=(3, 5))


# --------------------------------------------------------------------------- prompt-length buckets (pure)


def test_thresholds_are_the_33rd_and_67th_percentiles():
    lengths = [5, 80, 12, 40, 41, 7, 100, 13, 60]
    assert bucket_thresholds(lengths) == pytest.approx(tuple(np.percentile(lengths, [33, 67])))
    low, high = bucket_thresholds(lengths)
    assert [bucket_of(n, (low, high)) for n in (low, low + 0.5, high, high + 1)] == [
        "short",
        "medium",
        "medium",
        "long",
    ]


def test_a_bucket_takes_its_first_examples_in_the_seeded_order():
    lengths = [50, 3, 90, 4, 60, 95, 5, 55, 99]  # tertiles 33.8 and 70.8 (numpy's linear interpolation)
    long = choose_bucket(lengths, "long", limit=2)
    assert long.indices == [2, 5] and long.available == 3 and long.token_range == (90, 99) and long.pool == 9
    assert choose_bucket(lengths, "short", limit=8).indices == [1, 3, 6]  # fewer than --limit: all of them
    assert choose_bucket(lengths, "medium", limit=8).indices == [0, 4, 7]
    assert short_bucket_note(choose_bucket(lengths, "short", 8), 8).startswith(
        "--prompt-length short: the bucket holds 3 of the 9"
    )
    assert short_bucket_note(long, 2) is None
    assert choose_bucket(lengths, "long", 2).to_dict()["thresholds"] == pytest.approx([33.8, 70.8])


def test_an_empty_bucket_is_one_line_naming_the_fix():
    with pytest.raises(SpecbenchError, match="no prompt of this task falls in that bucket") as err:
        choose_bucket([10] * 6, "long", 4)
    assert "\n" not in str(err.value)


def test_prompt_length_lists_parse_in_reading_order():
    assert parse_prompt_lengths("long,short, medium") == ["short", "medium", "long"]
    assert parse_prompt_lengths("all") == ["all"]
    with pytest.raises(SpecbenchError, match="'huge' is not one of all, short, medium, long"):
        parse_prompt_lengths("short,huge")
    with pytest.raises(SpecbenchError, match="--prompt-length must be one of"):
        RunConfig("t", "d", "x", prompt_length="tiny").validate()


# --------------------------------------------------------------------------- prompt-length buckets (sweep and run)


def test_bucket_axis_measures_each_bucket_and_records_thresholds(tmp_path, task_file, stub_tokenizer):
    grid = make_grid(task_file, draft="prompt-lookup", gamma="1", limit=2, prompt_length=("short", "long"))
    lengths = [len(p) for p in PROMPTS]  # the stub tokenizer: one token per character
    low, high = np.percentile(lengths, [33, 67])
    out = run_sweep(grid, tmp_path, session=FakeSession())
    assert [c.cell_id for c in out.cells] == ["prompts-prompt-lookup-g1-t0-pshort", "prompts-prompt-lookup-g1-t0-plong"]
    for cell in out.cells:
        s = cell.summary
        assert s["prompt_length_thresholds"] == pytest.approx([low, high])
        records = read_records(out.root / cell.cell_id / "examples.jsonl")
        sizes = [r["prompt_tokens"] for r in records]
        assert sizes and all((n <= low) if s["prompt_length"] == "short" else (n > high) for n in sizes)
        assert s["prompt_length_range"][0] <= min(sizes) and max(sizes) <= s["prompt_length_range"][1]
        manifest = json.loads((out.root / cell.cell_id / "manifest.json").read_text())
        assert manifest["prompt_length"]["bucket"] == s["prompt_length"]
    doc = json.loads((out.root / "sweep.json").read_text())
    assert doc["baselines_per_cell"] and len(doc["prompt_length"]) == 2


def test_run_prompt_length_long_on_the_cli(tmp_path, task_file, stub_tokenizer, monkeypatch):
    monkeypatch.setattr(torch_session, "TorchSession", FakeSession)
    monkeypatch.setattr(planning, "check_model_sources", lambda config: None)
    args = [
        "run",
        "--target",
        "tiny-target",
        "--draft",
        "prompt-lookup",
        "--gamma",
        "2",
        "--task",
        task_file,
        "--limit",
        "4",
        "--max-new-tokens",
        str(MAX_NEW),
        "--device",
        "cpu",
        "--prompt-length",
        "long",
        "--results-dir",
        str(tmp_path),
        "--json",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "fewer than --limit 4" in result.output  # one line says the bucket is short of examples
    summary = json.loads(result.stdout[result.stdout.index("{") :])
    assert summary["prompt_length"] == "long" and summary["n_examples"] == 1
    assert summary["run_id"].startswith("prompts-prompt-lookup-g2-t0-plong-")


# --------------------------------------------------------------------------- --pair TARGET:DRAFT


def test_a_pair_splits_on_its_first_colon_only():
    assert parse_pair("smollm2-135m:prompt-lookup:rule=hf,max_ngram=2") == (
        "smollm2-135m",
        "prompt-lookup:rule=hf,max_ngram=2",
    )
    assert parse_pair(" a : lookup+distilled ") == ("a", "lookup+distilled")
    for bad in ("smollm2-135m", ":prompt-lookup", "smollm2-135m:"):
        with pytest.raises(SpecbenchError, match="must be TARGET:DRAFT"):
            parse_pair(bad)


def test_pairs_load_each_target_once_and_keep_baselines_apart(tmp_path, task_file, monkeypatch):
    TargetSession.loaded = []
    grid = make_grid(
        task_file, gamma="1,2", pairs=("tiny-b:prompt-lookup", "tiny-a:tiny-draft", "tiny-a:prompt-lookup")
    )
    assert grid.targets == ("tiny-a", "tiny-b") and grid.load.target == ""
    targets_in_order = [c.load.target for c in grid.configs()]
    assert targets_in_order == sorted(targets_in_order)  # grouped by target
    monkeypatch.setattr(torch_session, "TorchSession", TargetSession)  # what the torch engine opens
    out = run_sweep(grid, tmp_path)
    assert TargetSession.loaded == ["tiny-a", "tiny-b"]  # one session per target, in order
    ids = [c.cell_id for c in out.cells]
    assert "tiny-a-prompts-tiny-draft-g1-t0" in ids and "tiny-b-prompts-prompt-lookup-g2-t0" in ids and len(ids) == 6
    assert {c.summary["target"] for c in out.cells} == {"tiny-a", "tiny-b"}
    doc = json.loads((out.root / "sweep.json").read_text())
    assert "baselines" not in doc and not (out.root / "baselines").exists()  # each cell timed its own
    assert doc["grid"]["pairs"] == [["tiny-a", "prompt-lookup"], ["tiny-a", "tiny-draft"], ["tiny-b", "prompt-lookup"]]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--target", "smollm2-135m"], "drop --target/--draft, or drop --pair"),
        (["--draft", "prompt-lookup"], "drop --target/--draft, or drop --pair"),
        (["--pair", "nocolon"], "must be TARGET:DRAFT"),
    ],
)
def test_pair_misuse_is_one_line(tmp_path, task_file, extra, needle):
    args = [
        "sweep",
        "--pair",
        "smollm2-135m:prompt-lookup",
        "--task",
        task_file,
        "--results-dir",
        str(tmp_path),
        *extra,
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and needle in result.output and len(result.output.strip().splitlines()) == 1, (
        result.output
    )


def test_a_draft_list_keeps_each_drafts_own_options():
    from specbench.measure.run.sweep import parse_draft_list

    assert parse_draft_list("prompt-lookup:rule=hf,max_ngram=2,distilled") == [
        "distilled",
        "prompt-lookup:rule=hf,max_ngram=2",
    ]
    assert parse_draft_list("prompt-lookup,lookup+distilled") == ["lookup+distilled", "prompt-lookup"]
    # key=value with no draft before it is not an option of anything: it stays an item (and fails as a draft later)
    assert parse_draft_list("max_ngram=2,prompt-lookup") == ["max_ngram=2", "prompt-lookup"]
    with pytest.raises(SpecbenchError, match="empty value"):
        parse_draft_list("prompt-lookup,,distilled")

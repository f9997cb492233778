"""The engine registry: the one list every engine name comes from, the rules and capabilities that refuse a
configuration in one line before any model loads, and the docs table generated from it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specbench.config import LoadSpec, RunConfig, SamplingConfig
from specbench.engines import ENGINES, check_config, engine_names, engine_rows, engine_spec, same_session
from specbench.engines.registry import ENGINE_TABLE_START, engine_table
from specbench.errors import SpecbenchError

ROOT = Path(__file__).resolve().parent.parent


def test_every_engine_is_registered_once_with_its_capabilities():
    assert engine_names()[0] == "specbench"  # the default
    assert {"specbench", "hf-assisted", "llama-cpp"} <= set(engine_names())
    for row in engine_rows():
        assert row["plain"] in ("yes", "no") and row["summary"]
    assert engine_spec("specbench").session_kind == engine_spec("hf-assisted").session_kind  # one torch session


def test_an_unknown_engine_is_one_line():
    with pytest.raises(SpecbenchError, match=r"--engine must be one of specbench, hf-assisted, llama-cpp.*got 'tgi'"):
        check_config(RunConfig("t", "prompt-lookup", "x", engine="tgi"))


@pytest.mark.parametrize(
    "engine, over, needle",
    [
        ("hf-assisted", dict(batch_size=2), "--batch-size 2 is not supported by --engine hf-assisted: it decodes one"),
        (
            "hf-assisted",
            dict(exact_shapes=True),
            "--exact-shapes is not supported by --engine hf-assisted: its passes cannot",
        ),
        (
            "hf-assisted",
            dict(gamma="adaptive"),
            "--gamma adaptive is not supported by --engine hf-assisted: a γ policy",
        ),
        ("hf-assisted", dict(draft="prompt-lookup"), "needs a model draft"),
        ("llama-cpp", dict(batch_size=2), "--batch-size 2 is not supported by --engine llama-cpp: it decodes one"),
        ("llama-cpp", dict(load=LoadSpec("t", dtype="bfloat16")), "--dtype bfloat16 does not apply"),
        (
            "specbench",
            dict(load=LoadSpec("t", threads=2)),
            "--threads is not supported by --engine specbench: its threads are the process's",
        ),
    ],
)
def test_what_an_engine_cannot_do_is_refused_in_one_line(engine, over, needle):
    fields = dict(load=LoadSpec("t"), draft="tiny-draft", task="x", engine=engine) | over
    with pytest.raises(SpecbenchError, match=needle) as err:
        check_config(RunConfig(**fields))
    assert "\n" not in str(err.value)


def test_what_an_engine_can_do_passes():
    """Control: the same options on an engine that can do them are accepted."""
    assert check_config(RunConfig("t", "prompt-lookup", "x", batch_size=2, gamma=2)).batch_size == 2
    assert check_config(RunConfig(LoadSpec("t", threads=2), "prompt-lookup", "x", engine="llama-cpp")).load.threads == 2
    hot = RunConfig("t", "tiny-draft", "x", sampling=SamplingConfig(1.0), engine="hf-assisted")
    assert check_config(hot) is hot


def test_sessions_are_shared_by_kind():
    assert same_session("torch", RunConfig("t", "prompt-lookup", "x", engine="hf-assisted"))
    assert not same_session("torch", RunConfig("t", "prompt-lookup", "x", engine="llama-cpp"))


def test_a_session_reads_its_kind_from_its_engines_spec():
    """EngineSpec.session_kind is the one source: every session class takes its kind from its engine's SPEC (no literal
    of its own that could drift), so a sweep's same_session and the registry agree on which cells share a session."""
    from specbench.engines.llama_cpp.session import LlamaSession
    from specbench.engines.torch.session import TorchSession
    from specbench.engines.vllm.session import VllmSession

    sessions = {"specbench": TorchSession, "hf-assisted": TorchSession, "llama-cpp": LlamaSession, "vllm": VllmSession}
    assert set(sessions) == set(engine_names())
    for name, cls in sessions.items():
        assert cls.session_kind == engine_spec(name).session_kind
        assert same_session(cls.session_kind, RunConfig("t", "prompt-lookup", "x", engine=name))
    literals = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in (ROOT / "specbench" / "engines").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(
            isinstance(t, ast.Name) and t.id == "session_kind"
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
        and isinstance(node.value, ast.Constant)
    ]
    assert not literals, f"a session kind written as a literal instead of read from its SPEC: {literals}"


def name_comparisons(source: str, names: set[str]) -> list[str]:
    """Every `==`/`!=`/`in` comparison in `source` with one of `names` as a literal on either side."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Constant) and s.value in names for side in sides for s in ast.walk(side)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_engine_name_is_compared_outside_the_registry():
    """The goal of the plug-in structure: an engine's name appears in its own package (and the registry), never in
    a comparison elsewhere in the package."""
    found = [
        f"{path.relative_to(ROOT)}:{hit}"
        for path in (ROOT / "specbench").rglob("*.py")
        if path.relative_to(ROOT / "specbench").parts[0] != "engines"
        for hit in name_comparisons(path.read_text(encoding="utf-8"), set(ENGINES))
    ]
    assert not found, "\n".join(found)


def test_the_comparison_scan_finds_a_comparison():
    """Negative control through the same function: planted comparisons of each form are found."""
    planted = 'if config.engine == "llama-cpp":\n    pass\nok = "vllm" in grid.engines\n'
    assert len(name_comparisons(planted, set(ENGINES))) == 2


def test_the_docs_table_is_the_registry():
    text = (ROOT / "docs" / "run.md").read_text(encoding="utf-8")
    assert ENGINE_TABLE_START in text
    assert engine_table() in text, "docs/run.md's engine table is stale: run `python -m specbench.engines`"


@pytest.mark.parametrize(
    "args",
    [["run", "--engine", "tgi"], ["verify", "--engine", "hf-assisted"], ["run", "--engine", ""]],
)
def test_an_engine_outside_the_registry_is_a_usage_error_not_a_traceback(args):
    """The registry's names are checked by the option's callback: click's one-line usage error, exit 2."""
    from typer.testing import CliRunner

    from specbench.cli import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "invalid value for --engine" in result.output and "is not one of" in result.output


def test_an_engine_name_in_any_case_is_accepted():
    """Control: the same check passes a registered name whatever its case."""
    from specbench.cli.options import one_of

    assert one_of(engine_names())("LLAMA-CPP") == "llama-cpp"

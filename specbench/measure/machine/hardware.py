"""Hardware identity: which machine produced a figure.

A speedup depends on the CPU's vector units (AVX-512, avx512_bf16, AMX) or the GPU, so every
manifest records them, and the report states them as a sentence. Two result folders from
different machines must never be mistaken for one another.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

# the ISA flags that change fp32/bf16 matmul cost on x86 (and the Arm ones that do the same)
ISA_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "bf16",
)


def _cpuinfo() -> dict[str, str]:
    """First processor's fields of /proc/cpuinfo ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model() -> str:
    info = _cpuinfo()
    name = info.get("model name") or info.get("Model") or info.get("Hardware")
    if not name and platform.system() == "Darwin":
        try:
            name = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            name = None
    return name or platform.processor() or platform.machine() or "unknown CPU"


def cpu_flags() -> list[str]:
    """The ISA_FLAGS this CPU reports, in ISA_FLAGS order (/proc/cpuinfo on Linux; sysctl on macOS, where Apple
    silicon reports bf16 as hw.optional.arm.FEAT_BF16). psutil has no ISA flags."""
    info = _cpuinfo()
    present = set((info.get("flags") or info.get("Features") or "").split())
    if not present and platform.system() == "Darwin":
        present = _darwin_flags()
    return [f for f in ISA_FLAGS if f in present]


def _darwin_flags() -> set[str]:
    """macOS: the x86 feature words (machdep.cpu.*features) or Apple silicon's FEAT_BF16 / AdvSIMD."""
    flags: set[str] = set()
    for key in (
        "machdep.cpu.features",
        "machdep.cpu.leaf7_features",
        "hw.optional.arm.FEAT_BF16",
        "hw.optional.AdvSIMD",
    ):
        try:
            value = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if key == "hw.optional.arm.FEAT_BF16" and value == "1":
            flags.add("bf16")
        elif key == "hw.optional.AdvSIMD" and value == "1":
            flags.add("asimd")
        elif key.startswith("machdep"):
            flags.update(w.lower().replace(".", "_") for w in value.split())
    return flags


def memory_gib() -> float | None:
    """Physical memory (psutil: Linux, macOS, Windows alike)."""
    import psutil

    try:
        return round(psutil.virtual_memory().total / 2**30, 1)
    except (OSError, RuntimeError):
        return None


def usable_cpus() -> int | None:
    """CPUs this process may run on (its affinity where the system has one, e.g. under taskset or a container's
    cpuset), else the logical CPUs."""
    import psutil

    try:
        return len(psutil.Process().cpu_affinity())
    except (AttributeError, OSError, psutil.Error):  # macOS has no affinity
        return psutil.cpu_count(logical=True) or os.cpu_count()


def gpu_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def gpus() -> list[dict]:
    import torch

    if not torch.cuda.is_available():
        return []
    rows = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        rows.append(
            {"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1), "capability": f"{p.major}.{p.minor}"}
        )
    return rows


def hardware_identity() -> dict:
    """What the manifest records about the machine (every field JSON-safe)."""
    import torch

    usable = usable_cpus()
    gpu_list = gpus()
    return {
        "cpu_model": cpu_model(),
        "isa_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "torch_threads": torch.get_num_threads(),
        "memory_gib": memory_gib(),
        "gpus": gpu_list,
        "cuda": torch.version.cuda if gpu_list else None,
        "gpu_driver": gpu_driver() if gpu_list else None,
        "platform": platform.platform(),
        "machine": platform.machine(),
    }


def bf16_support(device_type: str, hw: dict | None = None) -> tuple[bool, str]:
    """Whether bfloat16 runs natively on this device, and why (a phrase for the choice's reason line)."""
    if device_type == "cuda":
        import torch

        ok = torch.cuda.is_bf16_supported()
        return ok, "the GPU supports bf16" if ok else "this GPU has no bf16 support"
    if device_type == "mps":
        return False, "bf16 on MPS is not considered (float16 is its fast type)"
    flags = set(cpu_flags() if hw is None or "isa_flags" not in hw else hw["isa_flags"])
    native = [f for f in ("amx_bf16", "avx512_bf16", "bf16") if f in flags]
    if native:
        return True, f"the CPU has {', '.join(native)}"
    return False, "the CPU has no avx512_bf16 or AMX (bf16 would be emulated, slower than float32)"


def describe(hw: dict | None) -> str:
    """One sentence for the report and the run output, e.g.
    'AMD EPYC, 2 CPUs (avx2, avx512f, avx512_bf16; no AMX), 23.4 GiB, torch on 2 threads, no GPU'."""
    if not hw:
        return "unknown hardware (no record in the manifest)"
    if "cpu_model" not in hw:  # manifests from before the identity was recorded
        return (
            f"{hw.get('processor') or hw.get('machine') or 'unknown CPU'}, {hw.get('cpu_count')} CPUs (no ISA record)"
        )
    flags = [f for f in hw.get("isa_flags", []) if f != "amx_tile"]
    amx = any(f.startswith("amx") for f in flags)
    isa = ", ".join(flags) or "no ISA flags read"
    if flags and not amx and hw.get("machine") in ("x86_64", "AMD64"):
        isa += "; no AMX"
    parts = [f"{hw['cpu_model']}, {hw.get('usable_cpus') or hw.get('cpu_count')} CPUs ({isa})"]
    if hw.get("memory_gib"):
        parts.append(f"{hw['memory_gib']} GiB")
    parts.append(f"torch on {hw.get('torch_threads')} threads")
    if hw.get("gpus"):
        g = hw["gpus"]
        names = ", ".join(sorted({x["name"] for x in g}))
        parts.append(f"{len(g)}× {names} (CUDA {hw.get('cuda')}, driver {hw.get('gpu_driver') or 'unknown'})")
    else:
        parts.append("no GPU")
    return ", ".join(parts)

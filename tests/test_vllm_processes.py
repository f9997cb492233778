"""The vLLM worker's life and memory, without vLLM: the orphan guard (a worker whose parent was killed outright takes
its process group with it) and the CPU context cap (an engine whose KV cache at the model's full context does not fit
VLLM_CPU_KVCACHE_SPACE gets the longest context that does, instead of failing to start)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specbench.engines.vllm import session as vs

GUARD = Path(vs.__file__).with_name("orphan_guard.py")

# Qwen2.5-Coder's 1.5B target and 0.5B draft (their config.json fields that size the KV cache)
QWEN_15B = {"num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "hidden_size": 1536,
            "max_position_embeddings": 32768}  # fmt: skip
QWEN_05B = {"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "hidden_size": 896,
            "max_position_embeddings": 32768}  # fmt: skip
SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
           "max_position_embeddings": 8192}  # fmt: skip


def test_kv_bytes_per_token_counts_k_and_v_of_every_layer():
    assert vs.kv_bytes_per_token(QWEN_15B, 2) == 2 * 28 * 2 * 128 * 2  # 28,672: 0.875 GiB at 32k, as vLLM says
    assert vs.kv_bytes_per_token({"text_config": QWEN_05B}, 4) == 2 * 24 * 2 * 64 * 4
    assert vs.kv_bytes_per_token({"model_type": "medusa", "hidden_size": 8}, 2) is None


def test_a_draft_model_that_does_not_fit_the_kv_space_caps_the_context():
    # vLLM's own refusal on this machine: "1.25 GiB KV cache is needed ... estimated maximum model length is 25984"
    capped = vs.fitting_model_len([QWEN_15B, QWEN_05B], 1.0, 2)
    assert capped is not None and capped % 16 == 0
    need = vs.kv_bytes_per_token(QWEN_15B, 2) + vs.kv_bytes_per_token(QWEN_05B, 2)
    assert capped * need <= 2**30 < 32768 * need  # fits now; the full context did not
    assert capped > 0.9 * 2**30 / need  # and it is not needlessly short
    assert vs.fitting_model_len([QWEN_15B], 1.0, 2) is None  # the target alone fits its 32k: vLLM's own length
    assert vs.fitting_model_len([QWEN_15B, QWEN_05B], 2.0, 2) is None  # a larger space holds both
    assert vs.fitting_model_len([SMOLLM2, SMOLLM2], 1.0, 4) is None
    assert vs.fitting_model_len([QWEN_15B, {"model_type": "medusa"}], 1.0, 2) is None  # unknown: vLLM decides


def test_the_session_caps_only_where_a_draft_with_a_cache_is_loaded(tmp_path):
    target, draft = tmp_path / "t", tmp_path / "d"
    for folder, cfg in ((target, QWEN_15B), (draft, QWEN_05B)):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg))
    session = vs.VllmSession.__new__(vs.VllmSession)  # no worker: only what cpu_model_len reads
    session.folder = str(target)
    session.load = type("L", (), {"dtype": "bfloat16"})()
    session.client = type("C", (), {"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}})()
    assert session.cpu_model_len(None) is None
    assert session.cpu_model_len({"name": "ngram", "num_speculative_tokens": 4}) is None
    assert session.cpu_model_len({"name": "draft_model", "model": str(draft)}) == vs.fitting_model_len(
        [QWEN_15B, QWEN_05B], 1.0, 2
    )
    assert session.cpu_model_len({"name": "draft_model", "model": "org/hub-id"}) is None  # no local config


CHILD = """
import os, runpy, subprocess, sys, time
if sys.argv[1] == "guarded":
    runpy.run_path(sys.argv[2])["watch"](os.getppid(), 0.05)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(os.getpid(), grandchild.pid, flush=True)
time.sleep(120)
"""
PARENT = """
import subprocess, sys, time
child, mode, guard = sys.argv[1:4]
own_group = mode != "guarded-in-our-group"  # client.py starts the worker as the leader of its own group
kind = "unguarded" if mode == "unguarded" else "guarded"
subprocess.Popen([sys.executable, child, kind, guard], start_new_session=own_group)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited


def orphaned_pids(tmp_path: Path, mode: str) -> list[int]:
    """Start parent → child (its own session, guarded or not) → grandchild; kill the parent with SIGKILL; the pids of
    the child and the grandchild (mode: guarded, unguarded, or guarded-in-our-group: the child left in the killed
    parent's process group, which is this test's)."""
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "parent.py").write_text(PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "parent.py"), str(tmp_path / "child.py"), mode, str(GUARD)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    parent.kill()
    parent.wait()
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("mode", ["guarded", "unguarded", "guarded-in-our-group"])
def test_a_guarded_worker_dies_with_its_killed_parent(tmp_path, mode):
    pids = orphaned_pids(tmp_path, mode)
    deadline = time.monotonic() + (1.5 if mode == "unguarded" else 10)  # the guard polls every 0.05 s here
    awaited = pids[:1] if mode == "guarded-in-our-group" else pids  # there the child must outlive the worker
    while any(alive(p) for p in awaited) and time.monotonic() < deadline:
        time.sleep(0.05)
    if mode == "guarded-in-our-group":
        time.sleep(1.5)  # as long as the unguarded control waits: a kill of the child would have landed by now
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    if mode == "guarded":
        assert left == [], "the guarded worker or its child outlived the killed parent"
    elif mode == "unguarded":  # the negative control: without the guard both live on, as the benchmark's 13 GB did
        assert left == pids
    else:  # not its own group (started by hand): it exits but kills no group, so this test's process lives on
        assert left == pids[1:]

"""specbench's end of the pipe to the vLLM worker (worker.py), which runs in .venv-vllm.

vLLM cannot be imported here (it pins another torch and transformers), so a session starts the worker once, with
.venv-vllm's python, and keeps it for every run of the session (a sweep's cells reuse it). Requests and answers are
JSON lines; the worker's own output (vLLM's logs) goes to a log file whose last lines a failure quotes. Loading an
engine takes 15-100 s on a CPU (torch.compile unless eager), so the wait prints a status line with the seconds.

A missing .venv-vllm is a one-line SpecbenchError naming `make setup-vllm`; SPECBENCH_VLLM_PYTHON points at another
interpreter that has vLLM (an install outside a checkout).

A worker that stops answering (vLLM stuck, a deadlock) must not hang specbench: every request has a deadline
(`request_timeout`: generous, scaled by the tokens it asks for; SPECBENCH_VLLM_TIMEOUT_S or the client's timeout_s
replaces it, 0 waits for ever), after which the worker and the engine processes vLLM started under it are killed
and the run fails in one line naming the limit and how to raise it. The worker runs in its own process group for that
reason.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specbench.engines.vllm import ENGINE_NAME, SETUP_HINT
from specbench.errors import SpecbenchError

WORKER = Path(__file__).with_name("worker.py")
CHECKOUT = Path(__file__).resolve().parents[3]  # the repository root of an editable install
VENV = ".venv-vllm"
PYTHON_ENV = "SPECBENCH_VLLM_PYTHON"
STATUS_EVERY_S = 10.0  # a waiting request reports its seconds this often
TIMEOUT_ENV = "SPECBENCH_VLLM_TIMEOUT_S"  # seconds any one request may take (replaces request_timeout; 0: no limit)
# request_timeout's defaults, generous: on a 2-core CPU loaded 6-11 deep an engine took 1-3 min to load (torch.compile)
# and a tiny model decoded well under 1 s a token; only a stuck worker takes ten times that
LOAD_TIMEOUT_S = 1800.0  # info (the worker's vLLM import), load, load_planted
BASE_TIMEOUT_S = 300.0  # any other request: this much ...
PER_TOKEN_S = 5.0  # ... plus this per token it asks vLLM to generate (max_new_tokens × its requests) ...
PER_PROMPT_TOKEN_S = 0.05  # ... and this per prompt token it sends (prompts, scored sequences)


def request_timeout(op: str, fields: dict) -> float | None:
    """Seconds `op` may take before the worker counts as stuck (pure but for the environment): $SPECBENCH_VLLM_TIMEOUT_S
    when set (≤ 0: None, no limit), else LOAD_TIMEOUT_S to start or load, else BASE_TIMEOUT_S plus PER_TOKEN_S per
    token to generate and PER_PROMPT_TOKEN_S per prompt token (a load run: plus twice its arrivals' mean span). A
    value that is not a number is a one-line error."""
    given = os.environ.get(TIMEOUT_ENV, "").strip()
    if given:
        try:
            seconds = float(given)
        except ValueError:
            raise SpecbenchError(
                f"{TIMEOUT_ENV}={given!r} is not a number of seconds; set e.g. {TIMEOUT_ENV}=3600 (0: no limit)"
            ) from None
        return seconds if seconds > 0 else None
    if op in ("info", "load", "load_planted"):
        return LOAD_TIMEOUT_S
    items = fields.get("requests") or [fields]
    prompt_tokens = sum(len(item.get("prompt_ids") or ()) for item in items)
    prompt_tokens += sum(len(s) for s in fields.get("sequences") or ())  # prompt_logprobs: every sequence scored
    new_tokens = int(fields.get("max_new_tokens") or 1) * len(items)
    rate = fields.get("request_rate")  # a load run's Poisson arrivals take n / rate seconds on average to arrive
    arrivals = 2 * len(items) / float(rate) if rate else 0.0
    return BASE_TIMEOUT_S + PER_TOKEN_S * new_tokens + PER_PROMPT_TOKEN_S * prompt_tokens + arrivals


def vllm_python() -> Path:
    """The interpreter that has vLLM: $SPECBENCH_VLLM_PYTHON, else the checkout's .venv-vllm; one line if neither."""
    given = os.environ.get(PYTHON_ENV)
    path = Path(given) if given else CHECKOUT / VENV / "bin" / "python"
    if not path.exists():
        where = f"{PYTHON_ENV}={given}" if given else f"{VENV} (looked for {path})"
        raise SpecbenchError(
            f"--engine {ENGINE_NAME} needs vLLM's own venv, not found: {where}; build it with `{SETUP_HINT}`"
        )
    return path


def has_gpu() -> bool:
    import shutil

    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def worker_env(kv_space_gib: float, gpu: bool) -> dict[str, str]:
    """The worker's environment: specbench's venv and import path removed (its torch must not leak into vLLM's),
    vLLM's device and CPU KV-cache space set."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["VLLM_TARGET_DEVICE"] = env.get("VLLM_TARGET_DEVICE") or ("cuda" if gpu else "cpu")
    if not gpu:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{kv_space_gib:g}")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def default_status(message: str) -> None:
    """One status line on stderr (rewritten in place on a terminal)."""
    end = "\r" if sys.stderr.isatty() and not message.endswith("ready") else "\n"
    print(f"{ENGINE_NAME}: {message}", file=sys.stderr, end=end, flush=True)


class VllmClient:
    """One worker process and its pipe; `request` sends one JSON line and waits for its answer."""

    def __init__(
        self,
        python: Path | None = None,
        *,
        kv_space_gib: float = 1.0,
        on_status: Callable[[str], None] = default_status,
        command: list[str] | None = None,
        timeout_s: float | None = None,
    ):
        self.on_status = on_status
        self.timeout_s = timeout_s  # seconds every request may take, replacing request_timeout (None: its own)
        self.gpu = has_gpu()
        self.env = worker_env(kv_space_gib, self.gpu)
        fd, log = tempfile.mkstemp(prefix="specbench-vllm-", suffix=".log")
        self.log_path = Path(log)
        self._log = os.fdopen(fd, "w")
        argv = command or [str(python or vllm_python()), str(WORKER)]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=self.env,
            text=True,
            bufsize=1,
            start_new_session=True,  # its own process group: a timeout kills vLLM's engine processes with it
        )
        self._next_id = 0
        self.failed = False  # a request failed: its log is kept
        atexit.register(self.close)

    def request(self, op: str, status: str | None = None, **fields) -> dict:
        """Send {"op": op, **fields}; return the answer's result, or raise the worker's one-line error. No answer within
        the client's `timeout_s` (None: request_timeout's; ≤ 0: none) kills the worker and raises one line naming it."""
        if self.proc.poll() is not None:
            raise SpecbenchError(self.died(f"the vLLM worker exited (code {self.proc.returncode})"))
        limit = self.timeout_s if self.timeout_s is not None else request_timeout(op, fields)
        limit = limit if limit is None or limit > 0 else None  # ≤ 0: no limit, as the env var's 0
        self._next_id += 1
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, "id": self._next_id, **fields}) + "\n")
        self.proc.stdin.flush()
        line = self._read_line(status, limit)
        if line is None:
            self.failed = True  # its log is kept: the error names it
            self.kill()
            raise SpecbenchError(
                f"vLLM {op} gave no answer in {limit:.0f} s, so its worker was stopped (stuck or deadlocked; worker "
                f"log: {self.log_path}); if vLLM is only slow here, raise the limit with {TIMEOUT_ENV}=<seconds> "
                f"(0: no limit)"
            )
        if not line:
            raise SpecbenchError(self.died(f"the vLLM worker exited during {op}"))
        answer = json.loads(line)
        if not answer.get("ok"):
            self.failed = True  # the error names the log: close keeps it
            raise SpecbenchError(f"vLLM {op} failed: {answer.get('error')} (worker log: {self.log_path})")
        return answer["result"]

    def _read_line(self, status: str | None, limit: float | None = None) -> str | None:
        """The next answer line ("" when the worker exited, None when `limit` seconds passed without one); while it
        takes long, `status` with the seconds waited goes to on_status."""
        assert self.proc.stdout is not None
        t0 = time.monotonic()
        if status:
            self.on_status(f"{status} …")
        while True:
            left = None if limit is None else limit - (time.monotonic() - t0)
            if left is not None and left <= 0:
                return None
            wait = STATUS_EVERY_S if left is None else min(STATUS_EVERY_S, left)
            ready, _, _ = select.select([self.proc.stdout], [], [], wait)
            if ready:
                line = self.proc.stdout.readline()
                if status:
                    self.on_status(f"{status}: ready")
                return line
            if self.proc.poll() is not None:
                return ""
            if status:
                self.on_status(f"{status} … {time.monotonic() - t0:.0f} s")

    def died(self, what: str) -> str:
        """`what`, the worker log's last line and where the whole log is."""
        self._log.flush()
        try:
            lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        return f"{what}: {lines[-1] if lines else 'no output'} (worker log: {self.log_path})"

    def kill(self) -> None:
        """Stop the worker and every process of its group (vLLM's engine cores) now, without asking."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group start_new_session made: this worker's alone
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """Ask the worker to stop, then make sure it did (its engine cores stop with it)."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "shutdown", "id": 0}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.kill()
        if not self._log.closed:
            self._log.close()
            if self.proc.returncode == 0 and not self.failed:  # a clean run: its log says nothing a failure would need
                self.log_path.unlink(missing_ok=True)

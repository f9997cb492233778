"""A fresh hostile probe of every command (issue 41's second look), run as separate `specbench` processes.

    python bench/hostile_fresh.py [--only WORD] [--cheap] [--json] [--keep]

bench/hostile.py replays the defects issue 41 found, in process, on hand-made runs. This probe is the other half the
issue asks for: cases its author did not plant, each run as its own `python -m specbench.cli` process with a
timeout, as a user meets them: malformed and contradictory options, odd numbers (0, negative, NaN, inf, huge),
unknown names, damaged or foreign results folders and files, paths with spaces and unicode, the engines' capability
refusals, environment variables, the prompt bound on the bucket and multi-turn paths, and (with a real model: the
shipped default pair, `--limit 1 --max-new-tokens 4`) runs killed part way with SIGINT or SIGTERM and rerun,
concurrent writers and model output holding HTML. It prints the counts per verdict, then one line per failing case:

    ok               the case behaved: the expected exit code and, for bad input, one `error:` line naming the
                     problem and a fix
    traceback        a Python traceback or an uncaught exception's last line
    wrong-exit       an exit code other than the expected one (2: a bad command line; 1: a failure at run time)
    silent-wrong     exit 0 on bad input, or a result that looks right and is not (a figure, a count, raw HTML)
    unclear-message  not exactly one error line, or one that does not name the problem or a fix
    data-loss        a record measured before an interruption is gone or changed after the rerun
    unbounded        a prompt tokenized whole before the context bound refused it (the bound not applied there)
    hang             no answer within the case's timeout

Cases marked cheap need no model and answer in well under a second in process; tests/test_hostile_fresh.py runs them
through CliRunner. Nothing is timed here. Work folders go under $TMPDIR (removed unless --keep).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile import SPEEDUP, N, a_run  # noqa: E402  (bench/ is not a package: the hand-made runs of the first battery)

VERDICTS = ("ok", "traceback", "wrong-exit", "silent-wrong", "unclear-message", "data-loss", "unbounded", "hang")
FIX_WORDS = (
    "pass ", "use ", "rerun", "remove", "lower", "raise ", "drop ", "see ", "--help", "install", "create", "shorten",
    "pick ", "choose", "set ", "write ", "delete", "move ", "check ", "run ", "give ", "name a", "fix", "make ",
    "free ", "wait", "add ", "rename", "convert", "edit ", "omit", "unset", "point ", "must be", "one of", "split",
    "like ", "e.g.", "at most", "at least", "try ", "save ", " takes ", "must lie",
)  # fmt: skip
REPO = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    rc: int | None  # None: timed out
    out: str
    err: str


@dataclass
class Case:
    name: str
    args: list[str]  # after `specbench`; "{w}" is the case's work folder
    expect: tuple[int, ...] = (2,)  # acceptable exit codes
    words: tuple[str, ...] = ()  # what the error line must name (case-insensitive), besides a fix
    setup: Callable[[Path], None] | None = None  # prepares the work folder
    check: Callable[[Path, Result], tuple[str, str] | None] | None = None  # → (verdict, detail) when wrong
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 60
    cheap: bool = True  # no model: runs in well under a second in process (tests/test_hostile_fresh.py)
    scenario: Callable[[Path], Outcome] | None = None  # a case that runs its own processes (kills, concurrency)


@dataclass
class Outcome:
    case: str
    verdict: str
    command: str = ""
    rc: int | None = None
    one_line: bool = True  # stderr held exactly one error line (or none when it succeeded) and no traceback
    names_problem_and_fix: bool = True
    detail: str = ""


# --------------------------------------------------------------------------- running and judging


def fill(args: list[str], w: Path) -> list[str]:
    return [a.replace("{w}", str(w)) for a in args]


def specbench(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 60) -> Result:
    """One `python -m specbench.cli` process; its exit code, stdout and stderr (rc None when it timed out). It runs in
    its own process group, killed whole on a timeout (a vLLM or Ray worker it started goes with it)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    p = subprocess.Popen(
        [sys.executable, "-m", "specbench.cli", *args],
        cwd=cwd,
        env={k: v for k, v in full_env.items() if v is not None},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return Result(None, out, err)
    return Result(p.returncode, out, err)


def crashed(r: Result) -> str | None:
    """The traceback's last line, if the command printed one."""
    text = r.out + "\n" + r.err
    if "Traceback (most recent call last)" in text or re.search(r"^\w+(Error|Exception): ", r.err, re.M):
        lines = [line for line in r.err.splitlines() if line.strip()]
        return (lines[-1] if lines else "Traceback")[:200]
    return None


def error_lines(r: Result) -> list[str]:
    return [line for line in r.err.splitlines() if line.startswith("error:")]


def has_fix(line: str) -> bool:
    low = line.lower()
    return any(w in low for w in FIX_WORDS)


def judge(case: Case, r: Result, w: Path) -> Outcome:
    o = Outcome(case.name, "ok", " ".join(case.args)[:160], r.rc)
    if r.rc is None:
        o.verdict, o.detail = "hang", f"no answer in {case.timeout:g} s"
        return o
    tb = crashed(r)
    errors = error_lines(r)
    o.one_line = tb is None and (len(errors) == 1 if r.rc != 0 else not errors)
    if tb:
        o.verdict, o.detail = "traceback", tb
        return o
    if 0 not in case.expect and r.rc == 0:
        o.verdict, o.detail = "silent-wrong", "exit 0 on bad input: " + (r.out.strip().splitlines() or [""])[-1][:160]
        return o
    if r.rc not in case.expect:
        o.verdict = "wrong-exit"
        o.detail = f"exit {r.rc}, expected {'/'.join(map(str, case.expect))}: {(errors or [r.err.strip()[-160:]])[0]}"
        return o
    if r.rc != 0:
        line = errors[0] if len(errors) == 1 else ""
        named = all(word.lower() in line.lower() for word in case.words)
        o.names_problem_and_fix = bool(line) and named and has_fix(line)
        if len(errors) != 1:
            o.verdict, o.detail = "unclear-message", f"{len(errors)} error lines: {r.err.strip()[-200:]}"
            return o
        if not o.names_problem_and_fix:
            missing = [word for word in case.words if word.lower() not in line.lower()]
            o.verdict = "unclear-message"
            o.detail = (f"does not name {missing}: " if missing else "names no fix: ") + line[:200]
            return o
    if case.check is not None:
        wrong = case.check(w, r)
        if wrong:
            o.verdict, o.detail = wrong
    return o


def in_process(case: Case, w: Path) -> Outcome:
    """A cheap case through click's CliRunner in this process, from `w` (tests/test_hostile_fresh.py): judged as the
    process would be, an uncaught exception counting as a traceback."""
    from typer.testing import CliRunner

    from specbench.cli import app

    if case.setup:
        case.setup(w)
    before = os.getcwd()
    os.chdir(w)
    try:
        result = CliRunner().invoke(app, fill(case.args, w))
    finally:
        os.chdir(before)
    err = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err += f"\nTraceback (most recent call last):\n{type(result.exception).__name__}: {result.exception}"
    return judge(case, Result(result.exit_code, result.stdout, err), w)


def run_case(case: Case, root: Path, index: int = 0) -> Outcome:
    w = root / f"{index:03d}-{re.sub(r'[^A-Za-z0-9]+', '-', case.name)[:40]}"
    w.mkdir(parents=True, exist_ok=True)
    try:
        if case.setup:
            case.setup(w)
        if case.scenario:
            return dataclasses.replace(case.scenario(w), case=case.name)
        env = {k: v.replace("{w}", str(w)) for k, v in case.env.items()}
        return judge(case, specbench(fill(case.args, w), w, env, case.timeout), w)
    except Exception as exc:  # the probe's own failure is reported, never hidden
        return Outcome(case.name, "traceback", " ".join(case.args)[:160], None, False, False, f"probe: {exc!r}"[:200])


# --------------------------------------------------------------------------- inputs


PROMPTS = [
    "Translate into English: Der Hund schläft.",
    "Translate into English: Das Haus ist rot.",
    "Translate into English: Ich trinke Wasser.",
]


def task_file(w: Path, name: str = "t.jsonl", prompts: list[str] | None = None) -> Path:
    path = w / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n" for p in prompts or PROMPTS))
    return path


def with_task(w: Path) -> None:
    task_file(w)


def write(name: str, text: str | bytes) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        path = w / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        task_file(w)

    return setup


def nothing_written(w: Path, r: Result) -> tuple[str, str] | None:
    """A refused command leaves no run folder behind."""
    results = w / "results"
    if results.is_dir() and any(results.iterdir()):
        return "silent-wrong", f"refused, but left {sorted(p.name for p in results.iterdir())}"
    return None


# The cheapest real configuration: the shipped default target and a model-free draft, one example, four tokens.
RUN = ["run", "--task", "{w}/t.jsonl", "--results-dir", "{w}/results", "--limit", "1", "--max-new-tokens", "4"]
RUN += ["--draft", "prompt-lookup", "--gamma", "2"]
SWEEP = ["sweep", "--task", "{w}/t.jsonl", "--results-dir", "{w}/results", "--limit", "1", "--max-new-tokens", "4"]
SWEEP += ["--draft", "prompt-lookup"]
VERIFY = ["verify", "--task", "{w}/t.jsonl", "--results-dir", "{w}/results", "--draft", "prompt-lookup"]
DISTILL = ["distill", "--out", "{w}/draft", "--preset", "small"]


def bad(name: str, args: list[str], words: tuple[str, ...] = (), expect=(2,), **kw) -> Case:
    """A command line that must be refused in one line, leaving nothing behind."""
    setup, check = kw.pop("setup", with_task), kw.pop("check", nothing_written)
    return Case(name, args, expect, words, setup=setup, check=check, **kw)


def option_cases() -> list[Case]:
    cases = [
        # run: odd numbers
        bad("run --limit 0", [*RUN, "--limit", "0"], ("--limit",)),
        bad("run --limit -5", [*RUN, "--limit", "-5"], ("--limit",)),
        bad("run --gamma 0", [*RUN, "--gamma", "0"], ("--gamma",)),
        bad("run --gamma -2", [*RUN, "--gamma", "-2"], ("--gamma",)),
        bad("run --gamma nan", [*RUN, "--gamma", "nan"], ("--gamma",)),
        bad("run --gamma ''", [*RUN, "--gamma", ""], ("--gamma",)),
        bad("run --gamma 2.5", [*RUN, "--gamma", "2.5"], ("--gamma",)),
        bad("run --gamma-max 0", [*RUN, "--gamma-max", "0"], ("--gamma-max",)),
        bad("run --gamma-max 1000", [*RUN, "--gamma-max", "1000"], ("--gamma-max",)),
        bad("run --repeats 0", [*RUN, "--repeats", "0"], ("--repeats",)),
        bad("run --repeats 10**6", [*RUN, "--repeats", "1000000"], ("--repeats",)),
        bad("run --temperature nan", [*RUN, "--temperature", "nan"], ("--temperature",)),
        bad("run --temperature inf", [*RUN, "--temperature", "inf"], ("--temperature",)),
        bad("run --temperature -0.5", [*RUN, "--temperature", "-0.5"], ("--temperature",)),
        bad("run --temperature 1e400", [*RUN, "--temperature", "1e400"], ("--temperature",)),
        bad("run --top-p 0", [*RUN, "--top-p", "0"], ("--top-p",)),
        bad("run --top-p 1.01", [*RUN, "--top-p", "1.01"], ("--top-p",)),
        bad("run --top-p nan", [*RUN, "--top-p", "nan"], ("--top-p",)),
        bad("run --top-k -1", [*RUN, "--top-k", "-1"], ("--top-k",)),
        bad("run --max-new-tokens 0", [*RUN, "--max-new-tokens", "0"], ("--max-new-tokens",)),
        bad("run --max-new-tokens -3", [*RUN, "--max-new-tokens", "-3"], ("--max-new-tokens",)),
        bad("run --draft-confidence nan", [*RUN, "--draft-confidence", "nan"], ("--draft-confidence",)),
        bad("run --draft-confidence -1", [*RUN, "--draft-confidence", "-1"], ("--draft-confidence",)),
        bad("run --draft-confidence 1.5", [*RUN, "--draft-confidence", "1.5"], ("--draft-confidence",)),
        bad("run --batch-size 0", [*RUN, "--batch-size", "0"], ("--batch-size",)),
        bad("run --batch-size -2", [*RUN, "--batch-size", "-2"], ("--batch-size",)),
        bad("run --threads -1", [*RUN, "--threads", "-1"], ("--threads",)),
        bad("run --seed 2**70", [*RUN, "--seed", str(2**70)], ("--seed",)),
        bad("sweep --seed 2**70", [*SWEEP, "--gamma", "1", "--seed", str(2**70)], ("--seed",)),
        bad("verify --seed 2**70", [*VERIFY, "--seed", str(2**70), "--limit", "1", "--n-samples", "10", "--length",
            "2", "--step-samples", "0", "--control-samples", "0", "--pair-step-samples", "0", "--gamma", "1"],
            ("--seed",)),
        bad("distill --seed 2**70", [*DISTILL, "--seed", str(2**70)], ("--seed",)),
        # run: contradictory or malformed
        bad("run --batch-size 2 --gamma adaptive", [*RUN, "--limit", "2", "--batch-size", "2", "--gamma", "adaptive"],
            ("--gamma",)),
        bad("run --device-map '{bad json'", [*RUN, "--device-map", "{bad json"], ("--device-map",)),
        bad("run --max-memory without --device-map", [*RUN, "--max-memory", "0=20GiB"], ("--max-memory",)),
        bad("run --device-map with --engine llama-cpp", [*RUN, "--engine", "llama-cpp", "--device-map", "auto"],
            ("--device-map",)),
        bad("run --prompt-length tiny", [*RUN, "--prompt-length", "tiny"], ("--prompt-length",)),
        bad("run --run-id 'a b'", [*RUN, "--run-id", "a b"], ("--run-id",)),
        bad("run --run-id 'résumé'", [*RUN, "--run-id", "résumé"], ("--run-id",)),
        bad("run --results-dir ' '", [*RUN, "--results-dir", " "], ("--results-dir",)),
        # run: unknown names and missing files
        bad("run --task nosuch", [*RUN, "--task", "nosuch"], ("nosuch",)),
        bad("run --task missing.jsonl", [*RUN, "--task", "{w}/missing.jsonl"], ("missing.jsonl",), expect=(1, 2)),
        bad("run --task ''", [*RUN, "--task", ""], ("task",)),
        bad("run --task a folder", [*RUN, "--task", "{w}"], ("task",), expect=(1, 2)),
        bad("run --task empty.jsonl", [*RUN, "--task", "{w}/e.jsonl"], ("e.jsonl",), expect=(1, 2),
            setup=write("e.jsonl", "")),
        bad("run --task a JSON array file", [*RUN, "--task", "{w}/a.jsonl"], ("a.jsonl",), expect=(1, 2),
            setup=write("a.jsonl", json.dumps([{"prompt": "x"}]) + "\n")),
        bad("run --task prompt of wrong type", [*RUN, "--task", "{w}/n.jsonl"], ("prompt",), expect=(1, 2),
            setup=write("n.jsonl", '{"prompt": ["a", "b"]}\n')),
        bad("run --task invalid UTF-8", [*RUN, "--task", "{w}/u.jsonl"], ("u.jsonl",), expect=(1, 2),
            setup=write("u.jsonl", b'{"prompt": "\xff\xfe bad"}\n')),
        bad("run --task a .yaml that is a list", [*RUN, "--task", "{w}/l.yaml"], ("l.yaml",), expect=(1, 2),
            setup=write("l.yaml", "- a\n- b\n")),
        bad("run --draft nosuch", [*RUN, "--draft", "nosuch-draft-xyz"], ("nosuch-draft-xyz",), expect=(1, 2),
            timeout=120),
        bad("run --draft ''", [*RUN, "--draft", ""], ("--draft",)),
        bad("run --draft lookup+", [*RUN, "--draft", "lookup+"], ("--draft",)),
        bad("run --draft prompt-lookup:bogus=1", [*RUN, "--draft", "prompt-lookup:bogus=1"], ("bogus",)),
        bad("run --draft prompt-lookup:max_ngram=0", [*RUN, "--draft", "prompt-lookup:max_ngram=0"], ("max_ngram",)),
        bad("run --draft prompt-lookup:max_ngram=abc", [*RUN, "--draft", "prompt-lookup:max_ngram=abc"],
            ("max_ngram",)),
        bad("run --target /nonexistent/dir", [*RUN, "--target", "/nonexistent/dir"], ("/nonexistent/dir",),
            expect=(1, 2)),
        bad("run --target a text file", [*RUN, "--target", "{w}/t.jsonl"], ("t.jsonl",), expect=(1, 2)),
        bad("run --target an empty folder", [*RUN, "--target", "{w}/empty"], ("empty",), expect=(1, 2),
            setup=lambda w: ((w / "empty").mkdir(), task_file(w))),
        bad("run --results-dir is a file", [*RUN, "--results-dir", "{w}/t.jsonl"], ("t.jsonl",), expect=(1, 2),
            timeout=120),
        bad("run --results-dir under a file", [*RUN, "--results-dir", "{w}/t.jsonl/sub"], ("t.jsonl",),
            expect=(1, 2), timeout=120),
        bad("run --results-dir on a read-only file system", [*RUN, "--results-dir", "/proc/specbench-x"],
            ("/proc/specbench-x",), expect=(1, 2), timeout=120),
        # engines' capability refusals
        bad("run --engine bogus", [*RUN, "--engine", "bogus"], ("--engine",)),
        bad("run --engine llama-cpp --batch-size 2", [*RUN, "--engine", "llama-cpp", "--limit", "2", "--batch-size",
            "2"], ("--batch-size",)),
        bad("run --engine llama-cpp --dtype bfloat16", [*RUN, "--engine", "llama-cpp", "--dtype", "bfloat16"],
            ("--dtype",)),
        bad("run --engine llama-cpp --backend static", [*RUN, "--engine", "llama-cpp", "--backend", "static"],
            ("--backend",)),
        bad("run --engine llama-cpp --device cuda", [*RUN, "--engine", "llama-cpp", "--device", "cuda"],
            ("--device",)),
        bad("run --engine llama-cpp --threads -3", [*RUN, "--engine", "llama-cpp", "--threads", "-3"], ("--threads",)),
        bad("run --engine hf-assisted --exact-shapes", [*RUN, "--engine", "hf-assisted", "--exact-shapes"],
            ("--exact-shapes",)),
        bad("run --engine hf-assisted --bit-exact", [*RUN, "--engine", "hf-assisted", "--bit-exact"], ("--bit-exact",)),
        bad("run --engine hf-assisted --gamma adaptive", [*RUN, "--engine", "hf-assisted", "--gamma", "adaptive"],
            ("--gamma",)),
        bad("run --engine hf-assisted --threads 2", [*RUN, "--engine", "hf-assisted", "--threads", "2"],
            ("--threads",)),
        bad("run --engine hf-assisted --batch-size 2", [*RUN, "--engine", "hf-assisted", "--limit", "2",
            "--batch-size", "2"], ("--batch-size",)),
        bad("run --engine vllm --draft auto", [*RUN, "--engine", "vllm", "--draft", "auto"], ("--draft",)),
        bad("run --engine vllm --draft-confidence 0.5", [*RUN, "--engine", "vllm", "--draft-confidence", "0.5"],
            ("--draft-confidence",)),
        bad("run --engine vllm --draft unigram", [*RUN, "--engine", "vllm", "--draft", "unigram"], ("unigram",)),
        bad("run --engine vllm --draft prompt-lookup:rule=hf", [*RUN, "--engine", "vllm", "--draft",
            "prompt-lookup:rule=hf"], ("rule",)),
        bad("run --engine vllm with a missing SPECBENCH_VLLM_PYTHON", [*RUN, "--engine", "vllm"],
            ("SPECBENCH_VLLM_PYTHON",), expect=(1, 2), env={"SPECBENCH_VLLM_PYTHON": "/nonexistent/python"},
            timeout=120, cheap=False),
        bad("run --engine specbench --threads 2", [*RUN, "--threads", "2"], ("--threads",)),
        # sweep
        bad("sweep --gamma 0", [*SWEEP, "--gamma", "0"], ("--gamma",)),
        bad("sweep --gamma 1-0", [*SWEEP, "--gamma", "1-0"], ("--gamma",)),
        bad("sweep --gamma 3,x", [*SWEEP, "--gamma", "3,x"], ("--gamma",)),
        bad("sweep --gamma 10**20", [*SWEEP, "--gamma", "99999999999999999999"], ("--gamma",)),
        bad("sweep --gamma 5 --max-new-tokens 2 (every cell past its budget)", [*SWEEP, "--gamma", "5",
            "--max-new-tokens", "2"], ("--max-new-tokens",), expect=(1, 2)),
        bad("sweep --temperature nan", [*SWEEP, "--gamma", "1", "--temperature", "nan"], ("--temperature",)),
        bad("sweep --temperature 0,,1", [*SWEEP, "--gamma", "1", "--temperature", "0,,1"], ("--temperature",)),
        bad("sweep --max-new-tokens 4,x", [*SWEEP, "--gamma", "1", "--max-new-tokens", "4,x"], ("--max-new-tokens",)),
        bad("sweep --max-new-tokens 0", [*SWEEP, "--gamma", "1", "--max-new-tokens", "0"], ("--max-new-tokens",)),
        bad("sweep --batch-size 0", [*SWEEP, "--gamma", "1", "--batch-size", "0"], ("--batch-size",)),
        bad("sweep --batch-policy bogus", [*SWEEP, "--gamma", "1", "--batch-policy", "bogus"], ("--batch-policy",)),
        bad("sweep --prompt-length short,bogus", [*SWEEP, "--gamma", "1", "--prompt-length", "short,bogus"],
            ("--prompt-length",)),
        bad("sweep --prompt-length ''", [*SWEEP, "--gamma", "1", "--prompt-length", ""], ("--prompt-length",)),
        bad("sweep --engine specbench,bogus", [*SWEEP, "--gamma", "1", "--engine", "specbench,bogus"], ("bogus",)),
        bad("sweep --engine ''", [*SWEEP, "--gamma", "1", "--engine", ""], ("--engine",)),
        bad("sweep --max-cells 0", [*SWEEP, "--gamma", "1", "--max-cells", "0"], ("--max-cells",)),
        bad("sweep --gamma 1,2,3 --max-cells 2", [*SWEEP, "--gamma", "1,2,3", "--max-cells", "2"], ("--max-cells",)),
        bad("sweep --pair nocolon", [*SWEEP, "--gamma", "1", "--pair", "nocolon"], ("--pair",)),
        bad("sweep --pair :prompt-lookup", ["sweep", "--task", "{w}/t.jsonl", "--gamma", "1", "--pair",
            ":prompt-lookup"], ("--pair",)),
        bad("sweep --pair smollm2-135m:", ["sweep", "--task", "{w}/t.jsonl", "--gamma", "1", "--pair",
            "smollm2-135m:"], ("--pair",)),
        bad("sweep --cpus-per-cell 0", [*SWEEP, "--gamma", "1", "--cpus-per-cell", "0"], ("--cpus-per-cell",)),
        bad("sweep --gpus-per-cell inf --executor ray", [*SWEEP, "--gamma", "1", "--executor", "ray",
            "--gpus-per-cell", "inf"], ("--gpus-per-cell",)),
        bad("sweep --draft-confidence nan", [*SWEEP, "--gamma", "1", "--draft-confidence", "nan"],
            ("--draft-confidence",)),
        bad("sweep --draft prompt-lookup,,", ["sweep", "--task", "{w}/t.jsonl", "--gamma", "1", "--draft",
            "prompt-lookup,,"], ("--draft",)),
        bad("sweep --sweep-id a/b", [*SWEEP, "--gamma", "1", "--sweep-id", "a/b"], ("--sweep-id",)),
        bad("sweep --limit 0", [*SWEEP, "--gamma", "1", "--limit", "0"], ("--limit",)),
        bad("sweep --task ding-de-en,nosuch", [*SWEEP, "--gamma", "1", "--task", "ding-de-en,nosuch"], ("nosuch",)),
        bad("sweep --threads -1", [*SWEEP, "--gamma", "1", "--threads", "-1"], ("--threads",)),
        # verify
        bad("verify --gamma ''", [*VERIFY, "--gamma", ""], ("--gamma",)),
        bad("verify --gamma 0", [*VERIFY, "--gamma", "0"], ("--gamma",)),
        bad("verify --gamma x", [*VERIFY, "--gamma", "x"], ("--gamma",)),
        bad("verify --temperature -1", [*VERIFY, "--temperature", "-1"], ("--temperature",)),
        bad("verify --top-k -2", [*VERIFY, "--top-k", "-2"], ("--top-k",)),
        bad("verify --top-p 0", [*VERIFY, "--top-p", "0"], ("--top-p",)),
        bad("verify --limit 0", [*VERIFY, "--limit", "0"], ("--limit",)),
        bad("verify --step-samples -1", [*VERIFY, "--step-samples", "-1"], ("--step-samples",)),
        bad("verify --control-samples -5", [*VERIFY, "--control-samples", "-5"], ("--control-samples",)),
        bad("verify --pair-step-samples -1", [*VERIFY, "--pair-step-samples", "-1"], ("--pair-step-samples",)),
        bad("verify --alt-tv 0", [*VERIFY, "--alt-tv", "0"], ("--alt-tv",)),
        bad("verify --alt-tv 1.5", [*VERIFY, "--alt-tv", "1.5"], ("--alt-tv",)),
        bad("verify --alt-tv inf", [*VERIFY, "--alt-tv", "inf"], ("--alt-tv",)),
        bad("verify --engine hf-assisted", [*VERIFY, "--engine", "hf-assisted"], ("--engine",)),
        bad("verify --n-samples 10**15", [*VERIFY, "--n-samples", str(10**15)], ("--n-samples",), timeout=90),
        bad("verify --length 10**9", [*VERIFY, "--length", str(10**9)], ("--length",), timeout=90),
        bad("verify --results-dir is a file", [*VERIFY, "--results-dir", "{w}/t.jsonl"], ("t.jsonl",), expect=(1, 2),
            timeout=120),
        # distill
        bad("distill --threads -1", [*DISTILL, "--threads", "-1"], ("--threads",)),
        bad("distill --device tpu", [*DISTILL, "--device", "tpu"], ("--device",)),
        bad("distill --task ''", [*DISTILL, "--task", ""], ("--task",)),
        bad("distill --task ' , '", [*DISTILL, "--task", " , "], ("--task",)),
        bad("distill --task nosuch", [*DISTILL, "--task", "nosuch"], ("nosuch",)),
        bad("distill --steps 0", [*DISTILL, "--steps", "0"], ("--steps",)),
        bad("distill --max-session-steps -1", [*DISTILL, "--max-session-steps", "-1"], ("--max-session-steps",)),
        bad("distill --preset ''", [*DISTILL, "--preset", ""], ("preset",)),
        bad("distill --out is a file", ["distill", "--out", "{w}/t.jsonl", "--preset", "small"], ("t.jsonl",),
            expect=(1, 2)),
        bad("distill --resume without a checkpoint", [*DISTILL, "--resume"], ("--resume",), expect=(1, 2),
            timeout=120),
        # report / export options
        bad("report --margin nan", ["report", "{w}/results", "--margin", "nan"], ("--margin",), setup=one_run,
            check=None),
        bad("report --margin -0.1", ["report", "{w}/results", "--margin", "-0.1"], ("--margin",), setup=one_run,
            check=None),
        bad("report --look 0", ["report", "{w}/results", "--look", "0"], ("--look",), setup=one_run, check=None),
        bad("report --out is a file", ["report", "{w}/results", "--out", "{w}/results/r0/summary.json"],
            ("summary.json",), expect=(1, 2), setup=one_run, check=None),
        bad("report of a missing path", ["report", "{w}/nope"], ("nope",), expect=(1, 2), setup=None, check=None),
        bad("report of an empty folder", ["report", "{w}/empty"], ("empty",), expect=(1, 2),
            setup=lambda w: (w / "empty").mkdir(), check=None),
        bad("report of a regular file", ["report", "{w}/f.txt"], ("f.txt",), expect=(1, 2),
            setup=lambda w: (w / "f.txt").write_text("hello"), check=None),
        bad("report --out on a read-only file system", ["report", "{w}/results", "--out", "/proc/specbench-report"],
            ("/proc/specbench-report",), expect=(1, 2), setup=one_run, check=None),
        bad("export --format spec-bench of a sweep folder", ["export", "{w}/results", "--format", "spec-bench"],
            ("spec-bench",), expect=(1, 2), setup=two_runs, check=None),
        bad("export --examples --format spec-bench", ["export", "{w}/results/r0", "--format", "spec-bench",
            "--examples"], ("--examples",), setup=one_run, check=None),
        bad("export --out on a read-only file system", ["export", "{w}/results", "--out", "/proc/specbench.csv"],
            ("/proc/specbench.csv",), expect=(1, 2), setup=one_run, check=None),
        bad("export of a missing path", ["export", "{w}/nope"], ("nope",), expect=(1, 2), setup=None, check=None),
        # list, setup, the root
        Case("list models", ["list", "models"], (0,), check=stdout_has("smollm2")),
        Case("list drafts", ["list", "drafts"], (0,), check=stdout_has("prompt-lookup")),
        Case("list tasks", ["list", "tasks"], (0,), check=stdout_has("ding-de-en")),
        Case("list engines", ["list", "engines"], (0,), check=stdout_has("llama-cpp")),
        Case("list tasks at COLUMNS=5", ["list", "tasks"], (0,), env={"COLUMNS": "5"}, cheap=False),
        Case("list engines at COLUMNS=abc", ["list", "engines"], (0,), env={"COLUMNS": "abc"}, cheap=False),
        Case("list models with SPECBENCH_CACHE a file", ["list", "models"], (0, 1), ("SPECBENCH_CACHE",),
             setup=lambda w: (w / "cachefile").write_text("x"), env={"SPECBENCH_CACHE": "{w}/cachefile"},
             cheap=False),
        bad("list --json", ["list", "tasks", "--json"], ("--json",), setup=None, check=None),
        bad("setup --target nosuch", ["setup", "--target", "nosuch-model-xyz"], ("nosuch-model-xyz",),
            expect=(1, 2), setup=None, check=None, timeout=120),
        bad("setup --target ''", ["setup", "--target", ""], ("--target",), setup=None, check=None),
        bad("setup with SPECBENCH_CACHE a file", ["setup"], ("cachefile",), expect=(1,),
            setup=lambda w: (w / "cachefile").write_text("x"), env={"SPECBENCH_CACHE": "{w}/cachefile"}, check=None,
            cheap=False, timeout=120),
        bad("data fetch with SPECBENCH_CACHE a file", ["data", "fetch"], ("cachefile",), expect=(0, 1),  # aclsum ships
            setup=lambda w: (w / "cachefile").write_text("x"), env={"SPECBENCH_CACHE": "{w}/cachefile"}, check=None,
            cheap=False, timeout=120),
        Case("--version under LANG=C and PYTHONIOENCODING=ascii", ["--version"], (0,),
             env={"LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}, check=stdout_has("specbench"),
             cheap=False),
    ]  # fmt: skip
    return cases


def stdout_has(word: str) -> Callable[[Path, Result], tuple[str, str] | None]:
    return lambda w, r: None if word in r.out else ("silent-wrong", f"stdout lacks {word!r}: {r.out[-160:]!r}")


# --------------------------------------------------------------------------- damaged and foreign results folders


def one_run(w: Path) -> None:
    a_run(w / "results", "r0")


def two_runs(w: Path) -> None:
    a_run(w / "results", "damaged")
    a_run(w / "results", "good")


def json_edit(name: str, **changes) -> Callable[[Path], None]:
    def plant(run: Path) -> None:
        doc = json.loads((run / name).read_text())
        for key, value in changes.items():
            if "." in key:
                outer, inner = key.split(".")
                doc[outer][inner] = value
            else:
                doc[key] = value
        (run / name).write_text(json.dumps(doc))

    return plant


def raw(name: str, text: str | bytes) -> Callable[[Path], None]:
    def plant(run: Path) -> None:
        if isinstance(text, bytes):
            (run / name).write_bytes(text)
        else:
            (run / name).write_text(text)

    return plant


def records_edit(edit: Callable[[list[str]], list[str] | bytes]) -> Callable[[Path], None]:
    def plant(run: Path) -> None:
        lines = (run / "examples.jsonl").read_text().splitlines(keepends=True)
        new = edit(lines)
        if isinstance(new, bytes):
            (run / "examples.jsonl").write_bytes(new)
        else:
            (run / "examples.jsonl").write_text("".join(new))

    return plant


def record_field(index: int, arm: str | None, key: str, value) -> Callable[[Path], None]:
    def edit(lines: list[str]) -> list[str]:
        row = json.loads(lines[index])
        (row[arm] if arm else row)[key] = value
        lines[index] = json.dumps(row) + "\n"
        return lines

    return records_edit(edit)


def rename_ids(run: Path) -> None:
    """Every example id (records and manifest) made of unicode: accents, an RTL override, a CJK character."""
    ids = {f"ex{i}": f"ëx\u202e{i}-例" for i in range(N)}
    lines = (run / "examples.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    for row in rows:
        row["example_id"] = ids[row["example_id"]]
    (run / "examples.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["task"]["example_ids"] = [ids[i] for i in manifest["task"]["example_ids"]]
    (run / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False))


def huge_line(run: Path) -> None:
    lines = (run / "examples.jsonl").read_text().splitlines(keepends=True)
    row = json.loads(lines[0])
    row["speculative"]["text"] = "x" * 20_000_000
    lines[0] = json.dumps(row) + "\n"
    (run / "examples.jsonl").write_text("".join(lines))


@dataclass
class Damage:
    name: str
    plant: Callable[[Path], None]  # on the run folder "damaged" (beside a good one, "good")
    kept_n: int | None = N  # the examples the damaged run must show if an output keeps it (None: it must be left out)
    examples: bool = False  # also an `export --examples` case


DAMAGES = [
    Damage("summary.json a JSON array", raw("summary.json", "[1, 2]")),
    Damage("summary.json null", raw("summary.json", "null")),
    Damage("summary.json 0 bytes", raw("summary.json", "")),
    Damage("summary.json cut in half", lambda run: raw("summary.json", (run / "summary.json").read_text()[:200])(run)),
    Damage("summary.json invalid UTF-8", raw("summary.json", b'{"run_id": "\xff\xfe"}')),
    Damage("summary.json with a UTF-8 BOM", lambda run: raw("summary.json", b"\xef\xbb\xbf" +
           (run / "summary.json").read_bytes())(run)),
    Damage("summary speedup_geomean Infinity", lambda run: raw("summary.json", (run / "summary.json").read_text()
           .replace('"speedup_geomean": ', '"speedup_geomean": Infinity, "was": '))(run)),
    Damage("summary speedup_geomean -1.5", json_edit("summary.json", speedup_geomean=-1.5)),
    Damage("summary speedup_geomean true", json_edit("summary.json", speedup_geomean=True)),
    Damage("summary n_examples '3' (a string)", json_edit("summary.json", n_examples="3")),
    Damage("summary n_examples 1000", json_edit("summary.json", n_examples=1000)),
    Damage("summary schema_version 99 (a later version)", json_edit("summary.json", schema_version=99)),
    Damage("summary alpha 7 (impossible)", json_edit("summary.json", alpha=7.0)),
    Damage("manifest.json missing", lambda run: (run / "manifest.json").unlink()),
    Damage("manifest example_ids a string", json_edit("manifest.json", **{"task.example_ids": "ex0ex1ex2"})),
    Damage("manifest example_ids empty", json_edit("manifest.json", **{"task.example_ids": []})),
    Damage("manifest schema_version 99", json_edit("manifest.json", schema_version=99)),
    Damage("manifest a JSON list", raw("manifest.json", "[]")),
    Damage("manifest gamma -3", json_edit("manifest.json", **{"config.gamma": -3})),
    Damage("records: torn last line", records_edit(lambda ls: [*ls[:-1], ls[-1][: len(ls[-1]) // 2]]), N - 1, True),
    Damage("records: a line of invalid UTF-8", records_edit(lambda ls: "".join(ls[:-1]).encode() + b"\xff\xfe{\n"),
           N - 1),
    Damage("records: a 20 MB line", huge_line, N, True),
    Damage("records: n_tokens '20' (a string)", record_field(0, "speculative", "n_tokens", "20"), N - 1),
    Damage("records: decode_s 'fast'", record_field(0, "speculative", "decode_s", "fast"), N - 1),
    Damage("records: decode_s -1", record_field(0, "speculative", "decode_s", -1.0), N - 1),
    Damage("records: decode_s NaN", records_edit(lambda ls: [ls[0].replace('"decode_s": ', '"decode_s": NaN, "x": ',
           1), *ls[1:]]), N - 1),
    Damage("records: speculative null", record_field(0, None, "speculative", None), N - 1),
    Damage("records: accepted 1000 of 16 drafted", record_field(0, "speculative", "accepted", 1000), N - 1),
    Damage("records: unicode example ids", rename_ids, N, True),
    Damage("records: blank lines between", records_edit(lambda ls: [line + "\n" for line in ls])),
    Damage("records: CRLF line ends", records_edit(lambda ls: [line.rstrip("\n") + "\r\n" for line in ls]), N, True),
    Damage("records: a JSON array line", records_edit(lambda ls: [json.dumps([json.loads(x) for x in ls]) + "\n"]),
           None),
    Damage("records: NUL bytes after the last", records_edit(lambda ls: "".join(ls).encode() + b"\0" * 64)),
    Damage("records: an unknown extra field", record_field(0, None, "from_the_future", {"x": 1})),
    Damage("sweep.json a string", lambda run: (run.parent / "sweep.json").write_text('"cells"')),
]  # fmt: skip


def damaged_folder(damage: Damage) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        root = w / "results" / "sweep"
        a_run(root, "damaged")
        a_run(root, "good")
        (root / "sweep.json").write_text(json.dumps({"sweep_id": "sweep", "cells": []}))
        damage.plant(root / "damaged")

    return setup


def export_check(damage: Damage, examples: bool) -> Callable[[Path, Result], tuple[str, str] | None]:
    """The damaged run is either kept with its records' figures or left out and named (stderr)."""

    def check(w: Path, r: Result) -> tuple[str, str] | None:
        rows = list(csv.DictReader(io.StringIO(r.out))) if r.out.strip() else []
        mine = [row for row in rows if row["run_id"] == "damaged"]
        good = [row for row in rows if row["run_id"] == "good"]
        if len(good) != (N if examples else 1):
            return "silent-wrong", f"the good run has {len(good)} row(s)"
        if not mine:
            return None if "damaged" in r.err else ("silent-wrong", "the damaged run is left out without a word")
        if damage.kept_n is None:
            return "silent-wrong", "a run that cannot be read is exported"
        if examples:
            ok = len(mine) == damage.kept_n
            return None if ok else ("silent-wrong", f"{len(mine)} example rows, not {damage.kept_n}")
        row = mine[0]
        problems = []
        if str(row.get("n_examples")) not in (str(damage.kept_n), f"{damage.kept_n}.0"):
            problems.append(f"n_examples {row.get('n_examples')!r}, the records hold {damage.kept_n}")
        try:
            geomean = float(row.get("speedup_geomean") or "nan")
        except ValueError:
            geomean = float("nan")
        if not abs(geomean / SPEEDUP - 1) < 1e-6:
            problems.append(f"speedup_geomean {row.get('speedup_geomean')!r}, the records give {SPEEDUP}")
        if damage.kept_n != N and "damaged" not in r.err:
            problems.append("records dropped without a word")
        return ("silent-wrong", "; ".join(problems)) if problems else None

    return check


def report_check(damage: Damage) -> Callable[[Path, Result], tuple[str, str] | None]:
    def check(w: Path, r: Result) -> tuple[str, str] | None:
        payload = json.loads(r.out)
        listed = json.dumps(payload["skipped"] + payload["notes"], ensure_ascii=False)
        if payload["runs"] == 1 and "damaged" not in listed:
            return "silent-wrong", "the damaged run is left out without a word"
        if payload["runs"] == 2 and damage.kept_n is None:
            return "silent-wrong", "a run that cannot be read is reported"
        if payload["runs"] not in (1, 2):
            return "silent-wrong", f"{payload['runs']} runs, not 1 or 2"
        if payload["runs"] == 2 and damage.kept_n != N and "damaged" not in listed:
            return "silent-wrong", "records dropped without a word"
        return None

    return check


def reader_cases() -> list[Case]:
    cases = []
    for d in DAMAGES:
        setup = damaged_folder(d)
        cases.append(Case(f"report: {d.name}", ["report", "{w}/results", "--out", "{w}/rep", "--json"], (0,),
                          setup=setup, check=report_check(d), timeout=120))  # fmt: skip
        cases.append(Case(f"export: {d.name}", ["export", "{w}/results"], (0,), setup=setup,
                          check=export_check(d, False)))  # fmt: skip
        if d.examples:
            cases.append(Case(f"export --examples: {d.name}", ["export", "{w}/results", "--examples"], (0,),
                              setup=setup, check=export_check(d, True)))  # fmt: skip
    cases += [
        Case("export: the same run twice on the command line", ["export", "{w}/results", "{w}/results/r0"], (0,),
             setup=one_run, check=rows_of_run("r0", 1)),
        Case("export: a run folder with spaces and unicode", ["export", "{w}/rés ults"], (0,),
             setup=lambda w: a_run(w / "rés ults", "r ü 0"), check=rows_of_run("r ü 0", 1)),
        bad("run: resuming into a run folder from v0.1", [*RUN, "--results-dir", "{w}/v01", "--run-id", V01_RUN], (),
            expect=(1, 2), setup=v01, check=v01_untouched, timeout=120),
        Case("report: HTML in every string of a run", ["report", "{w}/results", "--out", "{w}/rep"], (0,),
             setup=html_run, check=no_raw_html, timeout=120),
        Case("report: a run folder named with a newline", ["report", "{w}/results", "--out", "{w}/rep", "--json"],
             (0,), setup=newline_run, check=warnings_one_line, timeout=120),
    ]  # fmt: skip
    return cases


def rows_of_run(run_id: str, n: int) -> Callable[[Path, Result], tuple[str, str] | None]:
    def check(w: Path, r: Result) -> tuple[str, str] | None:
        rows = [row for row in csv.DictReader(io.StringIO(r.out)) if row["run_id"] == run_id]
        return None if len(rows) == n else ("silent-wrong", f"{len(rows)} rows of {run_id!r}, not {n}")

    return check


V01 = REPO / "tests" / "fixtures" / "results_v0_1"
V01_RUN = "task-draft-g3-t0-0caf17bc"


def v01(w: Path) -> None:
    shutil.copytree(V01, w / "v01")
    task_file(w)


def v01_untouched(w: Path, r: Result) -> tuple[str, str] | None:
    for path in (V01 / V01_RUN).iterdir():
        if (w / "v01" / V01_RUN / path.name).read_bytes() != path.read_bytes():
            return "data-loss", f"the v0.1 run's {path.name} changed"
    return None


HTML = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def html_run(w: Path) -> None:
    run = a_run(w / "results", "r0")
    lines = [json.loads(line) for line in (run / "examples.jsonl").read_text().splitlines()]
    for row in lines:
        row["speculative"]["text"] = row["baseline"]["text"] = HTML
        row["reference"] = HTML
    (run / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    for name in ("summary.json", "manifest.json"):
        doc = json.loads((run / name).read_text())
        for key in ("target", "draft", "task"):
            if key in doc and isinstance(doc[key], str):
                doc[key] = HTML
        if "config" in doc:
            doc["config"] |= {"target": HTML, "draft": HTML, "task": HTML}
        (run / name).write_text(json.dumps(doc))


def no_raw_html(w: Path, r: Result) -> tuple[str, str] | None:
    page = (w / "rep" / "report.html").read_text(errors="replace")
    for needle in ("<script>alert", "<img src=x", "onerror=alert(1)>"):
        if needle in page:
            return "silent-wrong", f"report.html holds {needle!r} unescaped"
    return None


def newline_run(w: Path) -> None:
    a_run(w / "results", "good")
    run = a_run(w / "results", "r0")
    (run / "summary.json").write_text("{")  # a skip, so its folder name is printed
    run.rename(w / "results" / "bad\nname")


def warnings_one_line(w: Path, r: Result) -> tuple[str, str] | None:
    stray = [line for line in r.err.splitlines() if line.strip() and not line.startswith(("warning:", "error:"))]
    return ("unclear-message", f"a warning spans lines: {stray[:2]}") if stray else None


# --------------------------------------------------------------------------- real runs (the shipped default model)

REAL = [
    "run",
    "--draft",
    "prompt-lookup",
    "--gamma",
    "2",
    "--gamma-max",
    "2",
    "--max-new-tokens",
    "4",
    "--dtype",
    "float32",
]


def records_of(run: Path) -> list[str]:
    path = run / "examples.jsonl"
    return path.read_text().splitlines(keepends=True) if path.is_file() else []


def only_run(results: Path) -> Path | None:
    runs = [p for p in results.iterdir() if p.is_dir()] if results.is_dir() else []
    return runs[0] if len(runs) == 1 else None


def interrupted(sig: int, when: str, command: str = "run") -> Callable[[Path], Outcome]:
    """Kill a 3-example run (or a 2-cell sweep) with `sig` once `when` ("record": the first record is on disk;
    "setup": two seconds in), rerun the same command: the first records stay byte for byte, all get measured."""

    def scenario(w: Path) -> Outcome:
        task_file(w)
        if command == "run":
            args = [*REAL, "--task", str(w / "t.jsonl"), "--limit", "3", "--results-dir", str(w / "results")]
        else:
            args = ["sweep", "--draft", "prompt-lookup", "--gamma", "1,2", "--max-new-tokens", "4", "--limit", "2",
                    "--task", str(w / "t.jsonl"), "--results-dir", str(w / "results")]  # fmt: skip
        name = f"{command}: {signal.Signals(sig).name} at {when}, then rerun"
        o = Outcome(name, "ok", " ".join(args)[:160])
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        p = subprocess.Popen([sys.executable, "-m", "specbench.cli", *args], cwd=w, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline and p.poll() is None:
            found = sorted((w / "results").rglob("examples.jsonl")) if (w / "results").is_dir() else []
            if when == "setup" and (w / "results").exists():
                break
            if when == "record" and found and records_of(found[0].parent):
                break
            time.sleep(0.05)
        if p.poll() is not None:
            out, err = p.communicate()
            o.verdict, o.detail = "hang", f"finished (exit {p.returncode}) before the kill: {err.strip()[-160:]}"
            return o
        p.send_signal(sig)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            o.verdict, o.detail = "hang", f"{signal.Signals(sig).name} ignored for 60 s"
            return o
        kept = {f: records_of(f.parent) for f in (w / "results").rglob("examples.jsonl")}
        first = Result(p.returncode, out, err)
        if crashed(first):
            o.verdict, o.rc, o.detail = "traceback", p.returncode, f"the kill: {crashed(first)}"
            return o
        expected_rc = (130,) if sig == signal.SIGINT else (130, 143, -signal.SIGTERM)
        if p.returncode not in expected_rc:
            o.verdict, o.rc, o.detail = "wrong-exit", p.returncode, f"killed: exit {p.returncode}: {err[-160:]}"
            return o
        again = specbench(args, w, timeout=600)
        o.rc = again.rc
        if again.rc != 0 or crashed(again):
            o.verdict = "traceback" if crashed(again) else "wrong-exit"
            o.detail = f"rerun: exit {again.rc}: {(crashed(again) or again.err.strip()[-160:])}"
            return o
        for path, old in kept.items():
            if records_of(path.parent)[: len(old)] != old:
                o.verdict, o.detail = "data-loss", f"{path}: a record measured before the kill changed or is gone"
                return o
        per_file = [[json.loads(line)["example_id"] for line in records_of(f.parent)]
                    for f in (w / "results").rglob("examples.jsonl")]  # fmt: skip
        total, want = sum(map(len, per_file)), (3 if command == "run" else 4)
        if total != want or any(len(set(ids)) != len(ids) for ids in per_file):
            o.verdict, o.detail = "data-loss", f"{total} records after the rerun (duplicates?), not {want}"
        elif sig == signal.SIGINT and "resume" not in first.err.lower():
            o.verdict, o.detail = "unclear-message", f"no resume hint after Ctrl-C: {first.err.strip()[-160:]}"
        else:
            o.detail = f"kill exit {p.returncode}; {sum(map(len, kept.values()))} record(s) kept"
        return o

    return scenario


def torn_then_rerun(w: Path) -> Outcome:
    """A finished run whose last record is torn (half a line, no newline): the rerun keeps every whole record."""
    task_file(w)
    args = [*REAL, "--task", str(w / "t.jsonl"), "--limit", "2", "--results-dir", str(w / "results")]
    o = Outcome("run: torn last record, then rerun", "ok", " ".join(args)[:160])
    first = specbench(args, w, timeout=600)
    run = only_run(w / "results")
    if first.rc != 0 or run is None:
        return Outcome(o.case, "wrong-exit", o.command, first.rc, detail=f"first run: {first.err.strip()[-160:]}")
    lines = records_of(run)
    (run / "examples.jsonl").write_text(lines[0] + lines[1][: len(lines[1]) // 2])
    again = specbench(args, w, timeout=600)
    o.rc = again.rc
    if crashed(again) or again.rc != 0:
        o.verdict, o.detail = ("traceback" if crashed(again) else "wrong-exit"), again.err.strip()[-200:]
    elif records_of(run)[:1] != lines[:1] or len(records_of(run)) != 2:
        o.verdict, o.detail = "data-loss", f"{len(records_of(run))} records after the rerun"
    return o


def rerun_changed(w: Path) -> Outcome:
    """A finished run rerun under its id with another --max-new-tokens: refused in one line, records untouched."""
    task_file(w)
    args = [*REAL, "--task", str(w / "t.jsonl"), "--limit", "1", "--results-dir", str(w / "results"), "--run-id", "r"]
    first = specbench(args, w, timeout=600)
    o = Outcome("run: rerun of a finished id with other options", "ok", " ".join(args)[:160], first.rc)
    if first.rc != 0:
        o.verdict, o.detail = "wrong-exit", f"first run: {first.err.strip()[-160:]}"
        return o
    before = records_of(w / "results" / "r")
    changed = [a if a != "4" else "5" for a in args]
    again = specbench(changed, w, timeout=600)
    case = Case(o.case, changed, (1, 2), ("--run-id",))
    o = judge(case, again, w)
    if o.verdict == "ok" and records_of(w / "results" / "r") != before:
        o.verdict, o.detail = "data-loss", "the refused rerun changed the records"
    return o


def concurrent(same_id: bool) -> Callable[[Path], Outcome]:
    def scenario(w: Path) -> Outcome:
        task_file(w)
        base = [*REAL, "--task", str(w / "t.jsonl"), "--limit", "1", "--results-dir", str(w / "results")]
        ids = ["same", "same"] if same_id else ["a", "b"]
        name = "run: two writers of " + ("one run id" if same_id else "two run ids in one folder") + " at once"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "specbench.cli", *base, "--run-id", i],
                cwd=w,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for i in ids
        ]
        results = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                p.kill()
                return Outcome(name, "hang", " ".join(base)[:160])
            results.append(Result(p.returncode, out, err))
        o = Outcome(name, "ok", " ".join(base)[:160], results[0].rc)
        for r in results:
            if crashed(r):
                o.verdict, o.detail = "traceback", crashed(r) or ""
                return o
        codes = sorted(r.rc for r in results)  # type: ignore[type-var]
        if same_id:
            loser = [r for r in results if r.rc != 0]
            if codes not in ([0, 0], [0, 1]) or (loser and len(error_lines(loser[0])) != 1):
                o.verdict, o.detail = "wrong-exit", f"exit codes {codes}: {[r.err.strip()[-120:] for r in loser]}"
            elif len(records_of(w / "results" / "same")) != 1:
                o.verdict, o.detail = "data-loss", f"{len(records_of(w / 'results' / 'same'))} records, not 1"
        else:
            if codes != [0, 0]:
                o.verdict, o.detail = "wrong-exit", f"exit codes {codes}: {[r.err.strip()[-120:] for r in results]}"
            elif any(len(records_of(w / "results" / i)) != 1 for i in ids):
                o.verdict, o.detail = "data-loss", "a run lacks its record"
        return o

    return scenario


def report_while_writing(w: Path) -> Outcome:
    """`report` and `export` over a folder a run is writing into: never a traceback, never a half-read run."""
    task_file(w)
    args = [*REAL, "--task", str(w / "t.jsonl"), "--limit", "3", "--results-dir", str(w / "results")]
    o = Outcome("report and export while a run writes", "ok", " ".join(args)[:160])
    p = subprocess.Popen([sys.executable, "-m", "specbench.cli", *args], cwd=w, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    seen = []
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline:
        if (w / "results").is_dir():
            for cmd in (["export", str(w / "results")], ["report", str(w / "results"), "--out", str(w / "rep")]):
                r = specbench(cmd, w, timeout=120)
                seen.append(r.rc)
                if crashed(r) or r.rc not in (0, 1) or (r.rc == 1 and len(error_lines(r)) != 1):
                    p.kill()
                    p.communicate()
                    o.verdict, o.rc = ("traceback" if crashed(r) else "unclear-message"), r.rc
                    o.detail = f"{cmd[0]} mid-run: {crashed(r) or r.err.strip()[-160:]}"
                    return o
        time.sleep(0.5)
    p.communicate()
    o.rc, o.detail = p.returncode, f"outputs' exit codes {seen}"
    if p.returncode != 0:
        o.verdict = "wrong-exit"
    return o


def long_prompt(kind: str) -> Callable[[Path], Outcome]:
    """A 6 MB prompt on the paths issue 41 says the character bound skips: the --prompt-length pool and a later
    turn of a multi-turn question. It must be refused by its length in characters before it is tokenized."""

    def scenario(w: Path) -> Outcome:
        big = "Wort " * 1_200_000
        if kind == "bucket":
            task_file(w, prompts=[*PROMPTS, big])
            args = [*REAL, "--task", str(w / "t.jsonl"), "--limit", "1", "--prompt-length", "short"]
        else:
            rows = [{"question_id": 1, "category": "writing", "turns": ["Say hi.", big]}]
            (w / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (w / "mt.yaml").write_text(
                "name: mt\nsource:\n  type: spec-bench\n  path: " + str(w / "q.jsonl") + "\nfields:\n  prompt: prompt\n"
                'template: "{prompt}"\nchat_template: true\nturns: turns\nmetric: none\nmax_new_tokens: 4\n'
            )
            args = [*REAL, "--task", str(w / "mt.yaml"), "--limit", "1"]
        args += ["--results-dir", str(w / "results")]
        name = "run: a 6 MB prompt " + ("in the --prompt-length pool" if kind == "bucket" else "as a second turn")
        r = specbench(args, w, timeout=600)
        o = judge(Case(name, args, (1, 2), ("characters",), cheap=False, timeout=600), r, w)
        if o.verdict == "silent-wrong" or (o.verdict == "unclear-message" and "characters" in o.detail):
            o.verdict, o.detail = "unbounded", f"exit {r.rc}: tokenized whole: {(error_lines(r) or [''])[0][:160]}"
        return o

    return scenario


def real_ok(name: str, extra: list[str], env: dict | None = None, prompts: list[str] | None = None) -> Case:
    """A real one-example run that must succeed (or refuse in one line) and leave a complete run."""

    def setup(w: Path) -> None:
        task_file(w, "dir with space/tâche ü.jsonl", prompts)

    def check(w: Path, r: Result) -> tuple[str, str] | None:
        if r.rc != 0:
            return None
        runs = list((w / "rés ults").glob("*/summary.json"))
        if len(runs) != 1:
            return "silent-wrong", f"{len(runs)} summaries"
        summary = json.loads(runs[0].read_text())
        return None if summary.get("n_examples") == 1 else ("silent-wrong", f"n_examples {summary.get('n_examples')}")

    args = [*REAL, "--limit", "1", "--task", "{w}/dir with space/tâche ü.jsonl", "--results-dir", "{w}/rés ults",
            *extra]  # fmt: skip
    return Case(name, args, (0, 2), setup=setup, check=check, env=env or {}, timeout=300, cheap=False)


def html_prompt_report(w: Path) -> Outcome:
    """A task whose prompt and reference are HTML, run for real, then reported: the page escapes the model's echo."""
    path = w / "h.jsonl"
    path.write_text(json.dumps({"prompt": "Repeat exactly: " + HTML, "reference": HTML}) + "\n")
    args = [*REAL, "--task", str(path), "--limit", "1", "--results-dir", str(w / "results")]
    first = specbench(args, w, timeout=600)
    o = Outcome("report of a real run whose prompt and output hold HTML", "ok", " ".join(args)[:160], first.rc)
    if first.rc != 0:
        o.verdict, o.detail = "wrong-exit", first.err.strip()[-160:]
        return o
    r = specbench(["report", str(w / "results"), "--out", str(w / "rep")], w, timeout=120)
    o = judge(Case(o.case, ["report"], (0,), check=no_raw_html), r, w)
    return o


def scenario_cases() -> list[Case]:
    scen = [
        ("run: SIGINT at the first record, then rerun", interrupted(signal.SIGINT, "record")),
        ("run: SIGTERM at the first record, then rerun", interrupted(signal.SIGTERM, "record")),
        ("run: SIGINT during setup, then rerun", interrupted(signal.SIGINT, "setup")),
        ("sweep: SIGINT at the first record, then rerun", interrupted(signal.SIGINT, "record", "sweep")),
        ("run: torn last record, then rerun", torn_then_rerun),
        ("run: rerun of a finished id with other options", rerun_changed),
        ("run: two writers of one run id at once", concurrent(True)),
        ("run: two writers of two run ids in one folder at once", concurrent(False)),
        ("report and export while a run writes", report_while_writing),
        ("run: a 6 MB prompt in the --prompt-length pool", long_prompt("bucket")),
        ("run: a 6 MB prompt as a second turn", long_prompt("turn")),
        ("report of a real run whose prompt and output hold HTML", html_prompt_report),
    ]
    cases = [Case(name, [], (0,), cheap=False, scenario=fn, timeout=600) for name, fn in scen]
    cases += [
        real_ok("run: paths with spaces and unicode", []),
        real_ok("run --seed -1", ["--seed", "-1"]),
        real_ok("run under OMP_NUM_THREADS=0", [], {"OMP_NUM_THREADS": "0"}),
        real_ok("run under OMP_NUM_THREADS=abc", [], {"OMP_NUM_THREADS": "abc"}),
        real_ok("run with an empty SPECBENCH_CACHE", [], {"SPECBENCH_CACHE": ""}),
        real_ok("run --max-new-tokens 10**12", ["--max-new-tokens", str(10**12)]),
    ]
    cases[-1].expect, cases[-1].words = (1, 2), ("--max-new-tokens",)
    return cases


def all_cases() -> list[Case]:
    return option_cases() + reader_cases() + scenario_cases()


def in_process_cases() -> list[Case]:
    """The cases tests/test_hostile_fresh.py runs in process: the cheap ones, less the reports of damaged folders
    (each draws figures; their exports read the same folders through the same reader) and the cases given a longer
    timeout (they may resolve a model or reach for the network before they answer)."""
    return [
        c
        for c in all_cases()
        if c.cheap
        and c.scenario is None
        and c.timeout <= 90
        and not c.name.startswith(SLOW_IN_PROCESS)
        and "20 MB" not in c.name
    ]


SLOW_IN_PROCESS = ("report: ", "export --examples: ")  # figures; the per-run export reads the same folders


# --------------------------------------------------------------------------- the battery


def battery(
    only: str = "", cheap: bool = False, keep: bool = False, on_case=None, start: int = 0, real: bool = False
) -> list[Outcome]:
    root = Path(tempfile.mkdtemp(prefix="issue41-hostile-fresh-"))
    outcomes = []
    try:
        for index, case in enumerate(all_cases()):
            if (
                index < start
                or (only and not any(w in case.name for w in only.split("|")))
                or (cheap and not case.cheap)
                or (real and case.cheap)
            ):
                continue
            outcome = run_case(case, root, index)
            outcomes.append(outcome)
            if on_case:
                on_case(outcome)
    finally:
        if keep:
            print(f"work folders kept under {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return outcomes


def counts_of(outcomes: list[Outcome]) -> dict[str, int]:
    return {"cases": len(outcomes)} | {v: sum(o.verdict == v for o in outcomes) for v in VERDICTS}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--only", default="", help="Run the cases whose name holds this text (or one of A|B|C).")
    parser.add_argument("--start", type=int, default=0, help="Skip the cases before this index (resume a battery).")
    parser.add_argument("--real", action="store_true", help="Only the cases that are not cheap.")
    parser.add_argument("--cheap", action="store_true", help="Only the cases that need no model.")
    parser.add_argument("--json", action="store_true", help="Print every case's outcome as JSON.")
    parser.add_argument("--keep", action="store_true", help="Keep the work folders.")
    args = parser.parse_args(argv)
    lock = threading.Lock()

    def progress(o: Outcome) -> None:
        with lock:
            print(f"{o.verdict:<16}{o.case}" + (f"  [{o.detail}]" if o.detail else ""), file=sys.stderr, flush=True)
            if args.json:  # one JSON line per case as it ends: a battery stopped part way keeps what it found
                print(json.dumps(o.__dict__, ensure_ascii=False), file=sys.stderr, flush=True)

    outcomes = battery(args.only, args.cheap, args.keep, progress, args.start, args.real)
    counts = counts_of(outcomes)
    if args.json:
        print(json.dumps({**counts, "outcomes": [o.__dict__ for o in outcomes]}, ensure_ascii=False, indent=1))
    else:
        print("  ".join(f"{k} {v}" for k, v in counts.items()))
        for o in outcomes:
            if o.verdict != "ok":
                print(f"  {o.verdict}: {o.case}: {o.detail}")
    return counts


if __name__ == "__main__":
    main()

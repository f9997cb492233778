"""Progress on every wait (issue 29 item 4): an ETA from the items this call measured that counts down between
them (rich's own shows -:--:-- once an example takes over 30 s), and plain stderr lines when stderr is not a
terminal: one per phase of setup, one per tenth of the examples, each with elapsed time."""

from __future__ import annotations

import time

import pytest

from specbench.cli import output
from specbench.cli.output import LineProgress, Rate, clock, progress_bar


def test_eta_from_this_calls_items_counts_down_between_them():
    rate = Rate()
    assert rate.eta(3, 10, now=0.0) is None  # resumed at 3: nothing timed here yet
    assert rate.eta(4, 10, now=60.0) == pytest.approx(6 * 60.0)  # one item in 60 s, six left
    assert rate.eta(4, 10, now=90.0) == pytest.approx(6 * 60.0 - 30.0)  # moves while the next one runs
    assert rate.eta(5, 10, now=100.0) == pytest.approx(5 * 50.0)  # two items in 100 s
    assert rate.eta(5, None, now=100.0) is None  # an uncounted step has no ETA
    assert clock(3725) == "1:02:05" and clock(65) == "1:05"


def test_a_pipe_gets_one_line_per_phase_and_per_tenth(monkeypatch):
    lines = []
    monkeypatch.setattr(output, "say", lines.append)
    monkeypatch.setattr(output, "QUIET_S", 0.05)
    monkeypatch.setattr(output.console, "_force_terminal", False)  # as a pipe or CliRunner is
    bar = progress_bar()
    assert isinstance(bar, LineProgress)
    with bar:
        setup = bar.add_task("setup", total=None, info="loading task and models")
        time.sleep(0.2)  # a step still under way after QUIET_S gets its line
        bar.update(setup, info="calibrating float32")
        time.sleep(0.2)
        bar.update(setup, info="calibrating float32")  # the same step again: no new line
        bar.update(setup, info="a quick step")  # over before QUIET_S: no line
        job = bar.add_task("examples", total=None, info="warming up")
        bar.update(job, total=40, completed=0)
        for _ in range(40):
            bar.update(job, advance=1, info="accepted 3/4")
    time.sleep(0.2)
    setup_lines = [x for x in lines if x.startswith("setup:")]
    assert setup_lines[0] == "setup: loading task and models" and len(setup_lines) == 2, lines
    assert setup_lines[1].startswith("setup: calibrating float32 (after 0:0")
    counted = [x for x in lines if x.startswith("examples:")]
    assert len(counted) == 10, lines  # every 4 examples: 4/40 … 40/40; warming up was over at once
    assert counted[-1].startswith("examples: 40/40 (accepted 3/4), elapsed") and "ETA" not in counted[-1]
    assert "ETA" in counted[5]


def test_an_error_right_away_stays_one_line(monkeypatch):
    """Negative control for the pipe's lines: a setup that fails before QUIET_S prints no progress line."""
    lines = []
    monkeypatch.setattr(output, "say", lines.append)
    monkeypatch.setattr(output.console, "_force_terminal", False)
    with output.phase_status("loading task and models") as status:
        status("calibrating")
    time.sleep(0.1)
    assert lines == []

"""`--auto-control`: time the runner-up of an auto choice on the same examples, so the choice is checked against
the best alternative the pilot saw, measured rather than predicted.

The replay pilot (auto_pilot.py) records the runner-up (the best other draft or dtype) with its prediction; the CLI
runs it as a second configuration over the same task, limit and seed, and prints one line comparing both.
"""

from __future__ import annotations

import dataclasses

from specbench.config import RunConfig
from specbench.measure.auto import prediction as pr
from specbench.measure.auto.choose import AutoChoice
from specbench.run_specs import parse_gamma


def control_config(config: RunConfig, choice: AutoChoice) -> RunConfig | None:
    """The run that times the runner-up (the best other draft or dtype on the pilot) on the same examples
    (same task, limit and seed select them); None when there was none."""
    ru = choice.runner_up
    if not ru:
        return None
    load = dataclasses.replace(config.load, dtype=ru["dtype"])
    return dataclasses.replace(config, load=load, draft=ru["draft"], gamma=parse_gamma(ru["gamma"]))


def control_line(chosen: dict, control: dict, runner_up: dict) -> str:
    """One line: the runner-up's prediction and measurement beside the choice's, on the same examples (pure)."""

    def shown(s: dict) -> str:
        ci = s.get("speedup_geomean_ci95") or [None, None]
        g = s.get("speedup_geomean")
        if g is None:
            return "—"
        return f"{g:.2f}×" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if None not in ci else "")

    ratio = pr.ratio_to_prediction(chosen.get("speedup_geomean"), control.get("speedup_geomean"))
    return (
        f"control: runner-up {runner_up['draft']} γ {runner_up['gamma']} {runner_up['dtype']} predicted "
        f"{runner_up['speedup']:.2f}×, measured {shown(control)}; the choice measured {shown(chosen)} on the same "
        f"examples: choice ÷ runner-up {'—' if ratio is None else f'{ratio:.2f}×'}"
    )

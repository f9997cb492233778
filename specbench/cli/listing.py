"""`specbench list models|drafts|tasks|engines`: what can be passed to --target, --draft, --task and --engine.

Each listing reads its rows from the module that owns them and prints one table; listing
drafts must stay cheap (no trainer, no model load).
"""

from __future__ import annotations

import typer

from specbench.cli.output import out, rows_table

list_app = typer.Typer(no_args_is_help=True, help="List models, drafts, tasks and engines.")


@list_app.command("models")
def list_models():
    """Model presets: what exists, whether installed, size and licence."""
    from specbench.models import model_rows

    out.print(rows_table(model_rows(), "models"))


@list_app.command("drafts")
def list_drafts():
    """Draft kinds usable with --draft."""
    from specbench.decoding.drafts.factory import draft_rows

    out.print(rows_table(draft_rows(), "drafts"))


@list_app.command("tasks")
def list_tasks_command():
    """Tasks: source, size, offline availability, metric."""
    from specbench.tasks.specs import list_tasks as task_rows

    out.print(rows_table(task_rows(), "tasks"))


@list_app.command("engines")
def list_engines():
    """Engines usable with --engine, with what each can do (the registry, engines/registry.py)."""
    from specbench.engines import engine_rows

    out.print(rows_table(engine_rows(), "engines"))

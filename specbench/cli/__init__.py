"""The `specbench` command line: the Typer app, its commands, and the one place errors become one line.

Each command lives in its own module (run, sweep, report, verify, listing, setup, distill,
export) and stays thin: options in, one library call, a rendered result out. Every failure,
ours (`SpecbenchError`) or click's (a bad value, a missing argument, an unknown command),
leaves through `OneLineErrors.main` (exit_code_of) as one line on stderr: exit code 2 for a bad
command line (click's usage errors and our `UsageError`), 1 for an error while running, as click
does; `--help` and `--version` exit 0. Shell completion: `specbench --install-completion`.

Importing this package loads neither the trainer (specbench.distill) nor the report
(specbench.report): the commands that need them import them when they run.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from collections.abc import Callable

import typer
from typer.core import TyperGroup

from specbench.cli import distill, export, listing, report, run, setup, sweep, verify
from specbench.cli.output import out, print_error, say, tolerate_any_encoding, warn
from specbench.errors import SpecbenchError, UsageError

INTERRUPTED = 130  # typer turns Ctrl-C into this exit code
USAGE = 2  # a bad command line, as click exits
DISTRIBUTION = "specbench-sd"  # the name pip knows this package by (pyproject's [project] name)
# Recent typer vendors click (typer._click), older typer raises click's own: take the exceptions from the
# module typer's public BadParameter comes from, so we catch what this typer raises.
click_errors = importlib.import_module(typer.BadParameter.__module__)
NoArgsIsHelp = getattr(click_errors, "NoArgsIsHelpError", ())  # click < 8.2 exits 0 itself instead of raising


class OneLineErrors(TyperGroup):
    """The root command group: runs the command with click's own error printing off and maps every
    error to one line. CliRunner and the `specbench` script both enter here."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        tolerate_any_encoding()

        def invoke():
            with warnings.catch_warnings():  # a warning (e.g. a skipped record) is one line too
                warnings.showwarning = lambda message, *_args, **_kw: warn(one_line(str(message)))
                return super(OneLineErrors, self).main(args, prog_name, complete_var, standalone_mode=False, **extra)

        code = exit_code_of(invoke)
        if standalone_mode:
            sys.exit(code)
        return code


def exit_code_of(invoke: Callable[[], object]) -> int:
    """Run the command; print any error as one line; the process's exit code."""
    try:
        result = invoke()
    except NoArgsIsHelp as exc:  # `specbench`, `specbench list`: the help is the answer
        out.print(exc.format_message(), highlight=False, markup=False)
        return 0
    except click_errors.UsageError as exc:
        print_error(usage_line(exc))
        return USAGE
    except click_errors.ClickException as exc:  # e.g. click's FileError
        print_error(sentence_case(exc.format_message()))
        return 1
    except typer.Abort:
        print_error("aborted")
        return 1
    except UsageError as exc:
        print_error(one_line(str(exc)))
        return USAGE
    except SpecbenchError as exc:
        print_error(one_line(str(exc)))
        return 1
    code = result if isinstance(result, int) and not isinstance(result, bool) else 0  # a typer.Exit's code
    if code == INTERRUPTED:
        say("interrupted: everything measured so far is saved; rerun the same command to resume")
    return code


def usage_line(exc) -> str:
    """click's usage error as "<problem> (<what the parameter takes>); see <command> --help"."""
    if isinstance(exc, (click_errors.MissingParameter, click_errors.BadParameter)) and exc.param is not None:
        name = parameter_name(exc.param)
        problem = (
            f"missing {name}"
            if isinstance(exc, click_errors.MissingParameter)
            else f"invalid value for {name}: {exc.message}"
        )
        problem = f"{problem.rstrip('.')} ({first_sentence(exc.param)})" if first_sentence(exc.param) else problem
    else:
        problem = exc.format_message()
    command = exc.ctx.command_path if exc.ctx is not None else "specbench"
    return f"{sentence_case(problem)}; see {command} --help"


def parameter_name(param) -> str:
    if param.param_type_name == "option":
        return param.opts[0]
    return f"argument {(param.name or '').upper()}"


def first_sentence(param) -> str:
    """The start of the parameter's help, which says what it takes."""
    text = one_line(getattr(param, "help", None) or "")
    return text.split(". ")[0].rstrip(".")


def one_line(text: str) -> str:
    """Whitespace and line breaks collapsed: a message stays one line whatever it quotes."""
    return " ".join(text.split())


def sentence_case(text: str) -> str:
    """click's "No such option: --x." as our messages read: "no such option: --x" (acronyms kept)."""
    text = one_line(text).rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def version_text() -> str:
    """`specbench --version`: the installed distribution's version (a source tree run without installing says so)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"specbench {version(DISTRIBUTION)} ({DISTRIBUTION})"
    except PackageNotFoundError:
        return f"specbench (not installed: pip install -e . or pip install {DISTRIBUTION})"


def show_version(value: bool) -> None:
    if value:
        out.print(version_text(), highlight=False)
        raise typer.Exit()


app = typer.Typer(
    cls=OneLineErrors,
    name="specbench",
    add_completion=True,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Benchmark and verify speculative decoding (Leviathan et al., ICML 2023).",
)


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=show_version, help="Print the version and exit."
    ),
) -> None:
    """Benchmark and verify speculative decoding (Leviathan et al., ICML 2023)."""


def with_example_block(doc: str | None) -> str | None:
    """A command's docstring with its "Example: ..." lines gathered under "Examples:" as one block click prints
    as written (a paragraph opened by \\b is not re-wrapped), one example a line, instead of running together."""
    if not doc:
        return doc
    lines = inspect.cleandoc(doc).splitlines()
    examples = [line.strip()[len("Example:") :].strip() for line in lines if line.strip().startswith("Example:")]
    if not examples:
        return doc
    rest = "\n".join(line for line in lines if not line.strip().startswith("Example:")).rstrip()
    return rest + "\n\nExamples:\n\n\b\n" + "\n".join(f"  {e}" for e in examples)


for name, command in (
    ("run", run.run),
    ("sweep", sweep.sweep),
    ("report", report.report),
    ("verify", verify.verify),
    ("export", export.export),
    ("setup", setup.setup),
    ("distill", distill.distill_command),
):
    app.command(name, help=with_example_block(command.__doc__))(command)
app.add_typer(listing.list_app, name="list")
app.add_typer(setup.data_app, name="data")


def main() -> None:
    """The `specbench` script (pyproject's entry point) and `python -m specbench.cli`."""
    app()

"""The one error type users see.

Every bad input (a missing model, γ < 1, an unwritable folder, ...) is raised as a
`SpecbenchError` whose message names the problem and the fix; the CLI maps it to one line
on stderr and exit code 1, never a traceback. A bad option value found while the options are
checked, before anything runs, is a `UsageError` (exit code 2, as click's own usage errors).
"""


class SpecbenchError(Exception):
    """A user-facing error: one line that names the problem and how to fix it."""


class UsageError(SpecbenchError):
    """A bad option or value on the command line (exit code 2): the command never started."""

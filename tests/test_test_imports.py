"""Test modules share code through tests/conftest.py and tests/helpers.py, never by importing each other: a test
module imported as a library runs its module-level fixtures twice and hides which helpers are shared (issue 25)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def imported_test_modules(source: str) -> list[str]:
    """The test_* modules that `source` imports (at any depth: a function-level import counts too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [name for name in found if name.split(".")[0].startswith("test_")]


def test_no_test_module_imports_another():
    offenders = {
        path.name: names
        for path in sorted(TESTS.glob("*.py"))
        if (names := imported_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, f"move what these import into tests/helpers.py or tests/conftest.py: {offenders}"


def test_the_check_sees_imports_at_module_and_function_level():  # negative control: the check must fire
    source = "from test_cli import save_tiny\nimport helpers\n\ndef f():\n    import test_sweep as s\n"
    assert imported_test_modules(source) == ["test_cli", "test_sweep"]
    assert imported_test_modules("from helpers import save_tiny\nfrom conftest import tiny_llama\n") == []

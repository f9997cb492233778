"""The package's layers point one way (DESIGN.md, "The layout, grown up"): a module imports only from its own layer
or below, and no two modules import each other, directly or round a loop.

Every import is read from the source with ast — module-level and inside functions alike (a function-level import
is a dependency all the same; it only moves the failure to run time) — so the test needs no import of the package
and catches an arrow the day it is written. Layer order, lowest first:

  errors, files → config, placement → tasks, models → decoding → engines → measure → evidence → distill → report → cli

engines sits on decoding (the loops and drafts an engine runs) and under measure (which times whatever engine the
registry names). No import loop either, counting names imported under TYPE_CHECKING for annotations only.

distill sits above evidence and measure: its pipeline measures the drafts it trains (measure) and nothing below it
needs it. report reads results (measure's records and metrics, evidence's verdicts, distill's metadata).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "specbench"

LAYERS = [  # lowest first; a module may import its own layer and every layer before it
    {"errors", "files", "faces", "__init__"},
    {"config", "placement", "run_specs"},
    {"tasks", "models"},
    {"decoding"},
    {"engines"},
    {"measure"},
    {"evidence"},
    {"distill"},
    {"report"},
    {"cli"},
]

# Known arrows still to be removed, each with the issue that removes it. Empty when the tree is clean.
KNOWN_CYCLES: set[frozenset[str]] = set()


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against `module`)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (names for annotations only, never imported at run time)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports_of(module: str, path: Path, known: set[str], type_checking: bool = True) -> set[str]:
    """Every specbench module `module` imports, at any depth of its source (module level, inside functions,
    conditionals); those under `if TYPE_CHECKING:` too unless `type_checking` is False."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    skip = set() if type_checking else type_checking_nodes(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(module, is_package, node)
            # `from specbench.measure.run import turns` names a module; `from x import f` names x
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            if not name.startswith("specbench"):
                continue
            while name not in known and "." in name:  # `import specbench.measure.run.runner.x` → the module
                name = name.rsplit(".", 1)[0]
            if name in known and name != module:
                out.add(name)
    return out


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for i, layer in enumerate(LAYERS):
        if top in layer:
            return i
    raise AssertionError(f"{module}: no layer declared for specbench.{top}; add it to LAYERS in tests/test_layers.py")


def import_graph(type_checking: bool = True) -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports_of(m, p, known, type_checking) for m, p in mods.items()}


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a lower layer into a higher one, as 'a → b' lines."""
    return sorted(
        f"{a} (layer {layer_of(a)}) → {b} (layer {layer_of(b)})"
        for a, deps in graph.items()
        for b in deps
        if layer_of(b) > layer_of(a) and a != "specbench" and b != "specbench"
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each holds at least one import loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph with each package's __init__ left out: a package's own __init__ re-exporting its modules (which
    import the package's siblings) is not a loop between two modules."""
    inits = {m for m, p in modules().items() if p.name == "__init__.py"}
    return {a: {b for b in deps if b not in inits} for a, deps in graph.items() if a not in inits}


def test_no_import_against_the_layer_order():
    arrows = upward_arrows(import_graph())
    assert not arrows, (
        "imports against the layer order (lowest first: "
        + " → ".join("/".join(sorted(layer)) for layer in LAYERS)
        + "):\n"
        + "\n".join(arrows)
    )


def test_no_import_cycle_between_modules():
    """A loop of imports that run (module level or in a function); a name imported under TYPE_CHECKING for an
    annotation only is no loop at run time (it still counts for the layer order above)."""
    found = [c for c in cycles(package_edges(import_graph(False))) if frozenset(c) not in KNOWN_CYCLES]
    assert not found, "import cycles (module-level and function-level imports both count):\n" + "\n".join(
        " ↔ ".join(c) for c in found
    )


def test_no_import_cycle_counting_type_checking_imports():
    """Not even an annotation-only import closes a loop: each such loop is a contract living in the wrong module."""
    found = cycles(package_edges(import_graph(True)))
    assert not found, "import cycles through TYPE_CHECKING imports:\n" + "\n".join(" ↔ ".join(c) for c in found)


MAX_MODULES_PER_PACKAGE = 15
MAX_MODULE_LINES = 450


def test_packages_and_modules_stay_small():
    """A package a newcomer can hold in mind (≤ 15 modules) and modules a reader can read through (≤ 450 lines)."""
    packages: dict[Path, int] = {}
    long = []
    for path in ROOT.rglob("*.py"):
        if path.name != "__init__.py":
            packages[path.parent] = packages.get(path.parent, 0) + 1
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(ROOT.parent)}: {n} lines")
    crowded = [f"{p.relative_to(ROOT.parent)}: {n} modules" for p, n in packages.items() if n > MAX_MODULES_PER_PACKAGE]
    assert not crowded and not long, "\n".join(crowded + long)


def test_known_cycles_are_still_there():
    """An exception listed in KNOWN_CYCLES that no longer occurs must be removed from the list."""
    found = {frozenset(c) for c in cycles(package_edges(import_graph(False)))}
    stale = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not stale, f"remove from KNOWN_CYCLES (fixed): {stale}"


# Negative controls: the same functions must find an upward arrow and a loop in a graph that has them.


def test_an_upward_arrow_is_found():
    graph = {"specbench.decoding.x": {"specbench.measure.y"}, "specbench.measure.y": set()}
    assert upward_arrows(graph) == ["specbench.decoding.x (layer 3) → specbench.measure.y (layer 5)"]


def test_a_function_level_import_is_read(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from specbench.measure.run import runner\n    import specbench.report.render as r\n")
    known = {"specbench.measure", "specbench.measure.run.runner", "specbench.report.render"}
    assert imports_of("specbench.decoding.m", src, known) == {"specbench.measure.run.runner", "specbench.report.render"}


def test_a_type_checking_import_counts_for_layers_not_for_cycles(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specbench.measure.timing import Clock\n"
    )
    known = {"specbench.measure.timing"}
    assert imports_of("specbench.decoding.m", src, known) == {"specbench.measure.timing"}
    assert imports_of("specbench.decoding.m", src, known, type_checking=False) == set()


@pytest.mark.parametrize(
    "graph, loop",
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ],
)
def test_a_cycle_is_found(graph, loop):
    assert cycles(graph) == loop

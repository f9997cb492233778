"""`python -m specbench.engines [PATH]`: set the registry's engine table into docs/run.md (or PATH; "-" prints it)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from specbench.engines.registry import ENGINE_TABLE_END, ENGINE_TABLE_START, engine_table


def main(argv: list[str]) -> None:
    if argv and argv[0] == "-":
        print(engine_table())
        return
    path = Path(argv[0] if argv else "docs/run.md")
    text = path.read_text(encoding="utf-8")
    block = re.compile(re.escape(ENGINE_TABLE_START) + ".*?" + re.escape(ENGINE_TABLE_END), re.S)
    path.write_text(block.sub(lambda _: engine_table(), text), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])

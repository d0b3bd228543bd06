#!/usr/bin/env bash
# Run the test suite against the bounds-checked debug build of the compiled kernels.
#
# FASTNN_DEBUG=1 turns Cython's boundscheck, wraparound, initializedcheck and nonecheck
# on and compiles with -O0 -g (see setup.py), so an out-of-range index raises instead
# of corrupting memory.  The build happens in a throwaway clone: the checkout's own
# .so files (optimised, maybe in use by others) are never touched.
#
#   tools/debug_suite.sh                 # committed HEAD, whole suite
#   tools/debug_suite.sh -k fuzz -x      # extra arguments go to pytest
#   FASTNN_DEBUG_TREE=1 tools/debug_suite.sh   # the working tree (uncommitted files too)
#   FASTNN_KEEP=1 ...                    # keep the temporary copy (path printed)
#   PYTHON=/path/to/python ...           # interpreter with the build + test deps
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/fastnn-debug.XXXXXX")"
if [ "${FASTNN_KEEP:-0}" = "0" ]; then
    trap 'rm -rf "$TMP"' EXIT
fi
echo "debug build in $TMP"

if [ "${FASTNN_DEBUG_TREE:-0}" != "0" ]; then
    # tracked and untracked-but-not-ignored files as they are now
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard) |
        (cd "$ROOT" && while IFS= read -r -d '' f; do
            [ -f "$f" ] && printf '%s\0' "$f"
        done) |
        (cd "$ROOT" && xargs -0 cp --parents -t "$TMP")
else
    git clone --quiet --no-hardlinks "$ROOT" "$TMP"
fi

cd "$TMP"
# base variant only: the debug build is about memory safety, not speed
FASTNN_DEBUG=1 FASTNN_VARIANTS="${FASTNN_VARIANTS:-base}" "$PY" setup.py build_ext --inplace \
    -j "${FASTNN_BUILD_JOBS:-2}" > "$TMP/build.log" 2>&1 || { tail -50 "$TMP/build.log"; exit 1; }

# the suite must import the debug kernels from this copy, not an installed fastnn
"$PY" - <<'PY'
import os, fastnn, fastnn.cpu
mods = fastnn.cpu.compiled_modules()
assert all(m.__file__.startswith(os.getcwd()) for m in mods), [m.__file__ for m in mods]
print(f"debug kernels: {len(mods)} families from {os.getcwd()}")
PY
# not exec: the EXIT trap must still remove the copy
status=0
"$PY" -m pytest tests -p no:cacheprovider "$@" || status=$?
echo "debug suite: pytest exit status $status"
exit $status

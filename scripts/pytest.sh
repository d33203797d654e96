#!/usr/bin/env bash
# Run the suite; a run that collected no test is a failure (pytest exits 5 then).
set -u
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest ran no test: failing the run" >&2
  exit 1
fi
exit "$status"

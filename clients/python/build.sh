#!/usr/bin/env bash
# Checks the Python client: byte-compiles the package and runs its unit
# tests (in-process fake nodes; no firn node needed) with Debian's
# /usr/bin/python3. Exits nonzero on a failure. Takes a few seconds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
py=/usr/bin/python3
"$py" -c 'import grpc, google.protobuf' 2>/dev/null || { echo "build.sh: grpcio/protobuf missing for $py (run install.sh)" >&2; exit 1; }
"$py" -m compileall -q firn_client tests >/dev/null
PYTHONPATH="$here" "$py" -m unittest discover -s tests -t . "$@"

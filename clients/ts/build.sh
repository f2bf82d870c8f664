#!/usr/bin/env bash
# build.sh: compiles the TypeScript client (dist/) and runs its unit tests.
# Run install.sh first. Exits nonzero when the build or a test fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rm -rf dist
[ -x node_modules/.bin/tsc ] || { echo "build.sh: node_modules/.bin/tsc missing: run install.sh first" >&2; exit 1; }
node_modules/.bin/tsc -p .
node --test dist/test/

#!/usr/bin/env bash
# build.sh: compiles the TypeScript client (dist/) and runs its unit tests.
# Run install.sh first. Exits nonzero when the build or a test fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rm -rf dist
npx --no-install tsc -p .
node --test dist/test/

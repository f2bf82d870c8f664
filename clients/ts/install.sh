#!/usr/bin/env bash
# install.sh: installs the TypeScript client's dependencies (package-lock.json,
# exactly) into clients/ts/node_modules. Idempotent: does nothing when they
# are there already and match the lock file.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
stamp=node_modules/.firn-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"

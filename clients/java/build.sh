#!/usr/bin/env bash
# Builds the client, its tests, the conformance runner and the benchmark
# offline with Debian's jars (/usr/share/java), then runs the unit tests.
# Exit status nonzero when the build or a test fails.
# Usage: build.sh [--no-test]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
source "$here/classpath.sh"
rm -rf build/classes build/test-classes
mkdir -p build/classes build/test-classes
javac -nowarn -encoding UTF-8 --release 17 -d build/classes -cp "$FIRN_MAIN_CP" \
  $(find src/main/java src/main/generated src/debian/java -name '*.java' | LC_ALL=C sort) 2>&1 | { grep -v '^Note:' || true; }
test -f build/classes/io/github/firnid/firn/client/FirnClient.class
javac -nowarn -encoding UTF-8 --release 17 -d build/test-classes -cp "build/classes:$FIRN_TEST_CP" \
  $(find src/test/java -name '*.java' | LC_ALL=C sort) 2>&1 | { grep -v '^Note:' || true; }
test -f build/test-classes/io/github/firnid/firn/conformance/Runner.class
if [[ "${1:-}" != "--no-test" ]]; then
  java -cp "build/test-classes:build/classes:$FIRN_TEST_CP" org.junit.runner.JUnitCore \
    io.github.firnid.firn.client.FirnClientTest
fi

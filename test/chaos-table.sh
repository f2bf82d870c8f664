#!/usr/bin/env bash
# Puts the table of a chaos run into docs/reliability.md, between its
# markers: the report the chaos suite writes (test/artifacts/chaos.md, or
# the file given), never a hand-edited copy.
#
#   go test -race -count=1 ./test/cluster/ && bash test/chaos-table.sh
#   bash test/chaos-table.sh /tmp/fresh/test/artifacts/chaos.md   # another clone's run
set -euo pipefail
cd "$(dirname "$0")/.."
table=${1:-test/artifacts/chaos.md}
doc=docs/reliability.md
[ -s "$table" ] || { echo "chaos-table: no $table: run go test ./test/cluster/ first"; exit 1; }
grep -q '^| scenario ' "$table" || { echo "chaos-table: $table holds no table"; exit 1; }
if grep -q -i '| fail |' "$table"; then
	echo "chaos-table: $table is the report of a failed run"; exit 1
fi
grep -q '^<!-- chaos table: begin' "$doc" && grep -q '^<!-- chaos table: end' "$doc" ||
	{ echo "chaos-table: $doc lacks its markers"; exit 1; }
out=$(mktemp)
awk -v t="$table" '
	/^<!-- chaos table: begin/ { print; while ((getline l < t) > 0) if (l != "") print l; skip = 1; next }
	/^<!-- chaos table: end/ { skip = 0 }
	!skip' "$doc" >"$out"
mv "$out" "$doc"
echo "chaos-table: $doc now holds the table of $table"

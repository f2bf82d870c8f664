#!/usr/bin/env bash
# The whole test suite: installs what the tests need on a bare Debian 12
# machine, then runs vet, a gofmt check and every test under -race.
#
#   bash test/run.sh            # the full suite
#   FIRN_SKIP_INSTALL=1 bash test/run.sh   # skip the apt step (packages present)
set -euo pipefail
cd "$(dirname "$0")/.."

# --- system packages the tests start as real processes --------------------
need=()
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
if [ "${FIRN_SKIP_INSTALL:-0}" != 1 ] && [ ${#need[@]} -gt 0 ]; then
	echo "test/run.sh: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

echo "== go vet"
go vet ./...

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt: these files need formatting:"; echo "$unformatted"; exit 1
fi

echo "== go test -race"
go test -race -timeout 20m ./...

echo "== fuzz seeds (brief)"
for f in FuzzParseLayout FuzzDecode FuzzRoundTrip; do
	go test -run '^$' -fuzz "^${f}\$" -fuzztime 5s ./generator >/dev/null
done
echo "test/run.sh: all passed"

#!/usr/bin/env bash
# Throughput of each client's next(), side by side in one run, through the
# conformance runners' bench command (test/conformance/README.md):
#   - from a warm buffer: a segment generator, whose node hands out
#     ranges of any size in one call, so the client's own take is what is
#     measured, not the node's rate;
#   - end to end on the default snowflake generator (one worker: 4,096
#     IDs per millisecond at most), beside `firn bench --mode prefetch`.
#
#   bash test/bench/clients.sh [SECONDS] [CLIENTS]     # default 3 s; go,java,ts,python
#
# Each client's runner must be built (clients/<lang>/build.sh). The runs
# take turns: one client at a time, on the same node.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-3}
langs=${2:-go,java,ts,python}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/firn" ./cmd/firn
go build -o "$work/gorunner" ./test/conformance/gorunner
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
grpc=127.0.0.1:$(port); http=127.0.0.1:$(port)
"$work/firn" serve --data-dir "$work/data" --grpc-addr "$grpc" --http-addr "$http" --unchecked-clock-ok \
	--embedded-client-addr 127.0.0.1:$(port) --embedded-peer-addr 127.0.0.1:$(port) \
	--generator default=snowflake --generator orders=segment >"$work/node.log" 2>&1 &
for _ in $(seq 100); do curl -sf "http://$http/readyz" >/dev/null && break; sleep 0.1; done
ms=$((secs * 1000))
printf '%-8s %-22s %8s %14s\n' client run callers 'IDs/s'
for lang in ${langs//,/ }; do
	if [ "$lang" = go ]; then runner=$work/gorunner; else runner=clients/$lang/runner; fi
	{
		echo "{\"op\":\"open\",\"endpoints\":[\"$grpc\"],\"generator\":\"orders\"}"
		echo "{\"op\":\"bench\",\"callers\":1,\"warm_ms\":1000,\"for_ms\":$ms}"
		echo "{\"op\":\"bench\",\"callers\":4,\"warm_ms\":1000,\"for_ms\":$ms}"
		echo "{\"op\":\"open\",\"endpoints\":[\"$grpc\"]}"
		echo "{\"op\":\"bench\",\"callers\":4,\"warm_ms\":1000,\"for_ms\":$ms}"
	} | "$runner" 2>"$work/$lang.err" | python3 -c '
import json, sys
lang = sys.argv[1]
runs = ["warm buffer (segment)", "warm buffer (segment)", "end to end (snowflake)"]
callers = [1, 4, 4]
i = 0
for line in sys.stdin:
    a = json.loads(line)
    if not a.get("ok"):
        print(lang, "refused:", a.get("error")); sys.exit(1)
    if "ids" in a and isinstance(a["ids"], int):
        rate = a["ids"] / a["seconds"]
        print("%-8s %-22s %8d %14s%s" % (lang, runs[i], callers[i], format(int(rate), ","), "" if not a.get("errors") else "  (%d errors)" % a["errors"]))
        i += 1
' "$lang" || { cat "$work/$lang.err"; exit 1; }
done
ids=$("$work/firn" bench --target "$grpc" --mode prefetch --callers 4 --duration "${secs}s" 2>&1 | sed -n 's/^  rpc\/s [0-9]*  ids\/s \([0-9]*\).*/\1/p')
printf '%-8s %-22s %8d %14s\n' 'bench' 'firn bench prefetch' 4 "$(python3 -c "print(format(int('$ids'), ','))")"

#!/usr/bin/env bash
# Regenerates the performance figures (docs/performance.md) that test/bench/perf.sh does
# not: where the node spends its CPU under unary load, on a wide
# generator and on a segment generator's ranges (profile shares), the
# --workers auto timeline and the 128-worker rate. It prints the machine
# first; run it on a quiet one:
#
#   bash test/bench/figures.sh
#
# The load comes from `firn bench` (internal/load); profiles from the
# node's own --pprof-addr, read with `go tool pprof`.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"' EXIT
go build -o "$W/firn" ./cmd/firn
F="$W/firn"
T=127.0.0.1:17400
H=http://127.0.0.1:17401
P=127.0.0.1:17460

echo "## machine"
echo "$(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), Linux $(uname -r), $(go version | cut -d' ' -f3)"

serve() { # data-dir, extra flags...; sets pid, returns once /readyz is 200
	local dir=$1; shift
	"$F" serve --data-dir "$dir" --grpc-addr "$T" --http-addr "${H#http://}" \
		--embedded-client-addr 127.0.0.1:17410 --embedded-peer-addr 127.0.0.1:17411 \
		--pprof-addr "$P" --log-level warn "$@" >"$dir.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 600); do
		curl -fsS -o /dev/null "$H/readyz" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "the node never became ready:"; tail -20 "$dir.log"; exit 1
}
stop() {
	kill -TERM "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}
# profile <name>: 5 s of CPU profile of the node, taken while a load runs.
profile() {
	curl -fsS -o "$W/$1.pprof" "http://$P/debug/pprof/profile?seconds=5"
}
# share <name> <label> <regexp>: the largest cumulative share of the
# node's CPU samples among the functions matching regexp.
share() {
	go tool pprof -top -cum -nodecount=100000 "$F" "$W/$1.pprof" 2>/dev/null |
		awk -v re="$3" -v label="$2" '$5 ~ /%$/ && $6 ~ re { v = $5 + 0; if (v > m) m = v }
			END { printf "  %-58s %5.1f %% of the node'"'"'s CPU samples\n", label, m }'
}
used() { # the profile's samples as a share of one core
	go tool pprof -top -nodecount=1 "$F" "$W/$1.pprof" 2>/dev/null | sed -n 's/^Duration: .*Total samples = .*(\(.*\))$/  CPU used: \1 of one core/p'
}
workers() { # the default generator's firn_workers_serving
	curl -fsS "$H/metrics" | sed -n 's/^firn_workers_serving{generator="default"} //p'
}

echo "## where a unary call's CPU goes: K = 16 callers over 4 connections, 5 s profile"
serve "$W/unary"
"$F" bench --target "$T" --callers 16 --conns 4 --duration 5s --warmup 0s --quiet >/dev/null
"$F" bench --target "$T" --callers 16 --conns 4 --duration 8s --warmup 1s --quiet >/dev/null &
load=$!
sleep 2
profile unary
wait "$load"
share unary "metrics interceptor (client_golang's grpc interceptor)" 'UnaryServerInterceptor'
share unary "ring buffer take" 'ringbuffer\.\(\*[A-Za-z]*\)\.Take'
share unary "goroutine stack growth (runtime.newstack)" 'runtime\.newstack$'
share unary "garbage collection (gcBgMarkWorker)" 'runtime\.gcBgMarkWorker$'
stop

echo "## a wide generator: --workers 32, ranges of 2,000,000, 8 callers, 5 s profile"
serve "$W/wide" --workers 32
"$F" bench --target "$T" --mode ranges --batch 2000000 --callers 8 --conns 4 --warmup 2s --duration 8s --quiet &
load=$!
sleep 3
profile wide
wait "$load"
used wide
stop

echo "## a segment generator: ranges of 1,000,000 from 8 callers, 5 s profile"
serve "$W/seg" --generator default=snowflake --generator orders=segment
"$F" bench --target "$T" --generator orders --node-metrics "$H/metrics" --mode ranges --batch 1000000 --callers 8 --conns 4 \
	--warmup 2s --duration 8s --quiet >"$W/seg.bench" &
load=$!
sleep 3
profile seg
wait "$load"
grep -E 'ids/s|latency|server cpu|counter writes|duplicates' "$W/seg.bench" | sed 's/^ */  /'
used seg
share seg "the claims (coordinator.ClaimSegment, the node's side)" 'coordinator\.ClaimSegment$'
share seg "the embedded etcd's Txn (the claims' writes)" 'etcdserver\.\(\*EtcdServer\)\.Txn$'
share seg "the takes (segment/source Take)" 'source\.\(\*Source\)\.Take$'
share seg "NextRange handler" '_IDService_NextRange_Handler$'
share seg "gRPC's writer (loopyWriter)" 'loopyWriter\)\.run$'
stop

echo "## --workers 128, ranges of 8,000,000, 5 s"
serve "$W/w128" --workers 128
"$F" bench --target "$T" --mode ranges --batch 8000000 --callers 8 --conns 4 --warmup 2s --duration 5s --quiet
stop

echo "## --workers auto: ranges of 1,000,000 from 8 callers for 40 s, then idle"
serve "$W/auto" --workers auto
start=$(date +%s)
"$F" bench --target "$T" --mode ranges --batch 1000000 --callers 8 --conns 4 --warmup 0s --duration 40s --quiet >"$W/auto.bench" &
load=$!
last=""
while kill -0 "$load" 2>/dev/null; do
	w=$(workers)
	[ "$w" = "$last" ] || echo "  +$(($(date +%s) - start)) s: $w workers serving"
	last=$w
	sleep 1
done
wait "$load"
grep -E 'ids/s|errors|duplicates' "$W/auto.bench" | sed 's/^ */  /'
ended=$(date +%s)
for _ in $(seq 1 150); do
	w=$(workers)
	[ "$w" = "$last" ] || echo "  +$(($(date +%s) - ended)) s after the load: $w workers serving"
	last=$w
	[ "$w" = 1 ] && break
	sleep 1
done
"$F" bench --target "$T" --idle 30s --pid "$pid" --quiet
stop

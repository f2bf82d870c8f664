#!/usr/bin/env bash
# Reproduces the performance tables of docs/performance.md on this machine: the node
# against the gRPC no-op floor (unary at K = 1, 16, 64 over C = 4; batches of
# 1000 from 8 callers; the Go client's prefetch), the same with mTLS, start
# and restart times of the embedded default, idle CPU/RSS on the
# embedded and on an external etcd, and a segment generator (below). Run it
# on a quiet machine:
#
#   bash test/bench/perf.sh [duration] [pairs] [section]   # default 5s per measured run, 9 pairs, all
#
# section segment runs only the segment generator's rows: a node serving
# `--generator default=snowflake --generator orders=segment`, NextRange of
# 1,000,000 from 8 callers and unary NextID from 16, each against the
# no-op floor in interleaved pairs (the floor shaped as a segment
# generator: one run per call), with each server's CPU per call and the
# node's counter writes per second over each window (--node-metrics); then
# the Go client's Next from segment runs in process (BenchmarkNextSegment).
#
# section seq runs only the sequence generator's rows: a node serving
# `--generator default=snowflake --generator chats=seq` (64 sections),
# NextSeq from 16 callers on 100,000 keys (uniform, then zipf) and
# NextSeqs of 100 keys from 8 callers, each against the no-op floor in
# interleaved pairs (the floor shaped as a sequence generator owning every
# section: a counter), with each server's CPU per call, the node's writes
# of its sections' maxima per second (--node-metrics), the WRONG_NODE
# refusals followed (0 on one node) and every response through the
# per-key checker (firn bench exits 3 on a violation).
#
# The load comes from `firn bench` (internal/load, built into the binary).
# A freshly started node gets 5 s of unmeasured calls before its first
# measured row. On this 2-core VM one node/no-op pair can differ by ±30 %
# from the next; the ratios are medians over the pairs.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=${1:-5s}
P=${2:-9}
S=${3:-all}
case "$S" in all | segment | seq) ;; *) echo "section $S: want all, segment or seq" >&2; exit 2 ;; esac
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"' EXIT
go build -o "$W/firn" ./cmd/firn
F="$W/firn"

serve() { # data-dir, extra flags...; sets pid
	local dir=$1; shift
	"$F" serve --data-dir "$dir" --grpc-addr 127.0.0.1:17300 --http-addr 127.0.0.1:17301 \
		--embedded-client-addr 127.0.0.1:17310 --embedded-peer-addr 127.0.0.1:17311 --log-level warn "$@" \
		>"$dir.log" 2>&1 &
	pid=$!
}
warm() { # a freshly started node: 5 s of unmeasured calls before the first measured row (extra bench flags)
	"$F" bench --target 127.0.0.1:17300 "$@" --callers 16 --conns 4 --duration 5s --warmup 0s --quiet >/dev/null
}
stop() { # signal
	kill "-$1" "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
}
ready_after() { # seconds until /readyz is 200 (TLS: extra curl flags)
	local start; start=$(date +%s.%N)
	for _ in $(seq 1 600); do
		if curl -fsS "$@" -o /dev/null "${URL:-http://127.0.0.1:17301}/readyz" 2>/dev/null; then
			awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.3f\n", a - b }'; return 0
		fi
		sleep 0.01
	done
	echo "never"; return 1
}

segment() {
	echo "## segment generator: orders=segment beside the snowflake default, embedded coordinator"
	serve "$W/d4" --generator default=snowflake --generator orders=segment
	ready_after >/dev/null
	warm --generator orders
	local seg=(--target 127.0.0.1:17300 --generator orders --node-metrics http://127.0.0.1:17301/metrics)
	# Unary first: after the ranges rows the node holds a claim sized
	# for them (up to the step's maximum), and the unary windows would
	# see no claim at all.
	echo "## unary NextID of the segment generator, K=16, vs the no-op floor (median of $P interleaved pairs)"
	"$F" bench "${seg[@]}" --callers 16 --conns 4 --duration "$D" --compare noop --pairs "$P" --pin --quiet
	echo "## NextRange(1,000,000) of the segment generator, 8 callers, vs the no-op floor (median of $P interleaved pairs)"
	"$F" bench "${seg[@]}" --mode ranges --batch 1000000 --callers 8 --conns 4 --warmup 2s --duration "$D" \
		--compare noop --pairs "$P" --pin --quiet
	stop TERM
	echo "## the Go client's Next from segment runs, in process (serial, 16 goroutines)"
	(cd client && go test -run '^$' -bench 'NextSegment' -benchmem -benchtime 2s -count 3)
}
seqgen() {
	echo "## sequence generator: chats=seq beside the snowflake default, embedded coordinator"
	serve "$W/d5" --generator default=snowflake --generator chats=seq
	ready_after >/dev/null
	local sq=(--target 127.0.0.1:17300 --generator chats --node-metrics http://127.0.0.1:17301/metrics)
	"$F" bench --target 127.0.0.1:17300 --generator chats --mode seq --callers 16 --conns 4 --duration 5s --warmup 0s --quiet >/dev/null
	echo "## NextSeq(1), K=16, 100,000 keys uniform, vs the no-op floor (median of $P interleaved pairs)"
	"$F" bench "${sq[@]}" --mode seq --callers 16 --conns 4 --duration "$D" --compare noop --pairs "$P" --pin --quiet
	echo "## NextSeq(1), K=16, 100,000 keys zipf, vs the no-op floor (median of $P interleaved pairs)"
	"$F" bench "${sq[@]}" --mode seq --key-dist zipf --callers 16 --conns 4 --duration "$D" --compare noop --pairs "$P" --pin --quiet
	echo "## NextSeqs of 100 keys, 8 callers, uniform, vs the no-op floor (median of $P interleaved pairs)"
	"$F" bench "${sq[@]}" --mode seqs --batch 100 --callers 8 --conns 4 --duration "$D" --compare noop --pairs "$P" --pin --quiet
	stop TERM
}
if [ "$S" = segment ]; then
	segment
	exit 0
fi
if [ "$S" = seq ]; then
	seqgen
	exit 0
fi

echo "## start and restart of the embedded default"
serve "$W/d1"; t1=$(ready_after); echo "first start: ${t1}s to /readyz 200"
"$F" bench --target 127.0.0.1:17300 --duration 1s --warmup 0s --quiet >/dev/null
stop TERM
serve "$W/d1"; t2=$(ready_after); echo "graceful restart (after SIGTERM): ${t2}s"
"$F" bench --target 127.0.0.1:17300 --duration 1s --warmup 0s --quiet >/dev/null
stop KILL
serve "$W/d1"; t3=$(ready_after); echo "crash restart (after kill -9): ${t3}s"
warm

echo "## unary NextID vs the no-op floor (C=4, median of $P interleaved pairs)"
for k in 1 16 64; do
	"$F" bench --target 127.0.0.1:17300 --compare noop --pairs "$P" --pin --callers "$k" --conns 4 --duration "$D" --quiet
done
echo "## NextIDs(1000) from 8 callers, sustained 10s"
"$F" bench --target 127.0.0.1:17300 --mode batch --batch 1000 --callers 8 --conns 4 --duration 10s --pin --quiet
echo "## Go client prefetch, 10s"
"$F" bench --target 127.0.0.1:17300 --mode prefetch --callers 2 --duration 10s --pin --quiet
echo "## idle, embedded coordinator, 60s"
"$F" bench --target 127.0.0.1:17300 --idle 60s --pid "$pid" --quiet
stop TERM

echo "## mTLS"
C="$W/certs"; mkdir -p "$C"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
	-keyout "$C/ca.key" -out "$C/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
	-keyout "$C/server.key" -out "$C/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$C/server.ext"
openssl x509 -req -in "$C/server.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -days 2 \
	-extfile "$C/server.ext" -out "$C/server.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=bench-client \
	-keyout "$C/client.key" -out "$C/client.csr" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >"$C/client.ext"
openssl x509 -req -in "$C/client.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -days 2 \
	-extfile "$C/client.ext" -out "$C/client.pem" 2>/dev/null
serve "$W/d2" --tls-cert "$C/server.pem" --tls-key "$C/server.key" --tls-client-ca "$C/ca.pem"
URL=https://127.0.0.1:17301 ready_after --cacert "$C/ca.pem" >/dev/null
TLS=(--tls-ca "$C/ca.pem" --tls-cert "$C/client.pem" --tls-key "$C/client.key")
warm "${TLS[@]}"
for k in 1 16 64; do
	"$F" bench --target 127.0.0.1:17300 "${TLS[@]}" --compare noop --pairs "$P" --noop-tls mtls --pin --callers "$k" --conns 4 --duration "$D" --quiet
done
"$F" bench --target 127.0.0.1:17300 "${TLS[@]}" --mode batch --batch 1000 --callers 8 --conns 4 --duration 10s --pin --quiet
stop TERM

echo "## idle, external etcd (Debian's etcd), 60s"
etcd --name p --data-dir "$W/etcd" --listen-client-urls http://127.0.0.1:17320 --advertise-client-urls http://127.0.0.1:17320 \
	--listen-peer-urls http://127.0.0.1:17321 --initial-advertise-peer-urls http://127.0.0.1:17321 \
	--initial-cluster p=http://127.0.0.1:17321 >"$W/etcd.log" 2>&1 &
sleep 2
serve "$W/d3" --etcd 127.0.0.1:17320
ready_after >/dev/null
"$F" bench --target 127.0.0.1:17300 --idle 60s --pid "$pid" --quiet
stop TERM

segment
seqgen

#!/usr/bin/env bash
# Time from exec to /readyz 200, three starts each: the embedded default
# (no coordinator flag) and a node on an external etcd with the default
# flags (it waits the restore guard). Run from the root: bash test/startup.sh
set -u
w=$(mktemp -d); F=${F:-$w/firn}; [ -x "$F" ] || go build -o "$F" ./cmd/firn || exit 1
ready() { local s=$(date +%s%N); for _ in $(seq 1000); do curl -sf -o /dev/null http://$1/readyz && break; sleep 0.02; done; echo $(( ($(date +%s%N)-s)/1000000 )); }
for i in 1 2 3; do
  $F serve --data-dir $w/e$i --grpc-addr 127.0.0.1:17600 --http-addr 127.0.0.1:17601 --embedded-client-addr 127.0.0.1:17610 --embedded-peer-addr 127.0.0.1:17611 >$w/e$i.log 2>&1 & p=$!
  echo "embedded default, start $i: $(ready 127.0.0.1:17601) ms"; kill $p; wait $p 2>/dev/null
done
etcd --data-dir $w/etcd --listen-client-urls http://127.0.0.1:17630 --advertise-client-urls http://127.0.0.1:17630 --listen-peer-urls http://127.0.0.1:17631 --initial-advertise-peer-urls http://127.0.0.1:17631 --initial-cluster default=http://127.0.0.1:17631 >$w/etcd.log 2>&1 & e=$!
sleep 2
for i in 1 2 3; do
  $F serve --data-dir $w/n$i --etcd http://127.0.0.1:17630 --unchecked-clock-ok --grpc-addr 127.0.0.1:17700 --http-addr 127.0.0.1:17701 >$w/n$i.log 2>&1 & p=$!
  echo "external etcd (defaults), start $i: $(ready 127.0.0.1:17701) ms"; kill $p; wait $p 2>/dev/null
done
kill $e; wait 2>/dev/null; rm -rf $w

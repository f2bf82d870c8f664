// Package cluster holds firn's cluster and chaos tests: real firn processes
// (the built binary) on a real 3-member etcd cluster and a real ZooKeeper
// ensemble, faults injected (clock offsets through the nodes' fault
// listener, SIGKILL/SIGSTOP, partitions through TCP proxies in front of
// every coordinator endpoint), and a checker that looks at every ID any
// client received: uniqueness, reservation intervals, per-caller order,
// bounded disorder, and honest availability — and, for segment generators,
// the IDs received against the counter the coordinator keeps (CheckCounter);
// for sequence generators, every routed call's values per key
// (internal/seqcheck: no value twice, none below one returned before the
// call began) and every CurrentSeq against them (CheckCurrents).
//
// Run with `go test ./test/cluster/` (part of the README's test command).
// At the end the suite prints a table of the scenarios and writes it as
// JSON to test/artifacts/chaos.json.
package cluster

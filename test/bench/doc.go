// Package bench holds firn's side-by-side benchmarks: the generator and the
// ring buffer against peer ID generators (bwmarrin/snowflake,
// sony/sonyflake, and a textbook mutex snowflake written here as the
// reference), each reporting IDs per second and its share of its layout's
// limit. Run:
//
//	go test -run '^$' -bench . -benchmem -benchtime 2s ./test/bench/
//
// There are no tests here: speed is measured, never asserted by a timed
// test. A firn figure above 100.5% of its layout's limit fails the
// benchmark, since it would mean IDs issued faster than the layout allows.
package bench

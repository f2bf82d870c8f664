package main

import (
	"io"
)

// benchChildCommand is the hidden subcommand of the no-op floor server.
const benchChildCommand = "__bench-noop"

func cmdBench(args []string, stdout, stderr io.Writer) int {
	return fail(stderr, exitFailure, "bench: not wired yet")
}

func cmdBenchChild(args []string, stdout, stderr io.Writer) int {
	return fail(stderr, exitFailure, "bench: not wired yet")
}

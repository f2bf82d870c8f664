package main

import (
	"io"

	"github.com/firnid/firn/internal/load"
)

// benchChildCommand is the hidden subcommand of the no-op floor server that
// `firn bench --target noop` starts as a child process.
const benchChildCommand = load.NoopCommand

func cmdBench(args []string, stdout, stderr io.Writer) int { return load.Main(args, stdout, stderr) }

func cmdBenchChild(args []string, stdout, stderr io.Writer) int {
	return load.NoopMain(args, stdout, stderr)
}

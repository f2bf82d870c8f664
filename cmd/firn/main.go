// Command firn is the single binary of the firn ID service: `firn serve`
// runs a node; the other subcommands talk to one (next, info, decode,
// fault), to the coordinator (workers, coordinator bump), or measure
// (bench).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1 // the command ran and failed
	exitUsage    = 2 // bad flags or arguments
	exitNotReady = 3 // the node answered that it is not serving
)

const usage = `firn — a distributed 64-bit ID service that never issues an ID twice.

Usage: firn <command> [flags]

Commands:
  serve                 run a node (no flags: the embedded coordinator in ./firn-data)
  next                  get IDs from a node            firn next [-n N] [--generator G] [--addr A]
  decode                split an ID into its fields    firn decode [--generator G | --layout L] ID
  info                  describe a node and its generators
  workers               list worker IDs; "workers release W" frees one (fenced)
  coordinator bump      raise every reservation after a coordinator restore
  fault clock           set a node's injected clock offset (fault injection)
  bench                 load a node, or the gRPC no-op floor, and measure
  version               print the version

Run "firn <command> --help" for a command's flags. Every serve flag can also be
set as FIRN_<FLAG> in the environment (dashes become underscores) and as a key of
the YAML file given by --config; a flag beats the environment, which beats the
file, which beats the default. workers and coordinator bump read the coordinator
flags (--etcd, --zookeeper, --cluster, ...) the same way, from the same file, so
on a node's host they need no flags. Flags may follow arguments
(firn decode ID --layout snowflake). Secrets can come from files
(--etcd-password-file, --zookeeper-auth-file).

Exit codes: 0 done; 1 error (including a node that cannot be reached);
2 usage (a bad flag, argument or environment value); 3 the node answered
that it does not serve (the cause is printed).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return cmdServe(rest, stdout, stderr)
	case "next":
		return cmdNext(rest, stdout, stderr)
	case "decode":
		return cmdDecode(rest, stdout, stderr)
	case "info":
		return cmdInfo(rest, stdout, stderr)
	case "workers":
		return cmdWorkers(rest, stdout, stderr)
	case "coordinator":
		return cmdCoordinator(rest, stdout, stderr)
	case "fault":
		return cmdFault(rest, stdout, stderr)
	case "bench":
		return cmdBench(rest, stdout, stderr)
	case benchChildCommand:
		return cmdBenchChild(rest, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, readBuild())
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "firn: unknown command %q (run firn --help)\n", cmd)
	return exitUsage
}

// fail prints one line on stderr and returns the code.
func fail(stderr io.Writer, code int, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	msg = strings.ReplaceAll(strings.TrimSpace(msg), "\n", " ")
	fmt.Fprintln(stderr, "firn:", msg)
	return code
}

func isHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

// parseQuiet parses args into fs without the flag package's own output
// (its error line and the full usage): the caller prints the error in one
// line. --help still prints the usage. Flags may follow the positional
// arguments (firn decode ID --layout snowflake); after "--" everything is
// positional. fs.Args() then holds the positional arguments in order.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := parseInterspersed(fs, args)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) && usage != nil {
		usage()
	}
	return err
}

func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		// The flag package consumes a "--" it stops at; see whether it did.
		before := len(args)
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		consumed := before - len(rest)
		if len(rest) == 0 {
			break
		}
		if consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

// Command firn is the single binary of the firn ID service: `firn serve`
// runs a node; the other subcommands talk to one (next, info, decode,
// fault), to the coordinator (workers, generator, coordinator bump), or measure
// (bench).
package main

import (
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
  generator             define generators in the coordinator: create, list, describe, retire
  fault clock           set a node's injected clock offset (fault injection)
  bench                 load a node, or the gRPC no-op floor, and measure
  version               print the version
  help [COMMAND]        this text, or a command's (as firn COMMAND --help)

Run "firn <command> --help" for a command's flags. Flags take two dashes
(--addr); a few have a one-letter form (-n). Flags may follow arguments
(firn decode ID --layout snowflake); "--" ends them. Every serve flag can
also be set as FIRN_<FLAG> in the environment (dashes become underscores)
and as a key of the YAML file given by --config; a flag beats the
environment, which beats the file, which beats the default. workers,
generator and coordinator bump read the coordinator flags (--etcd, --zookeeper,
--cluster, ...) the same way, from the same file; next, decode and info
read the node's address and TLS certificate from it (FIRN_GRPC_ADDR,
FIRN_TLS_CERT, or --config), so on a node's host they need no flags. A list
(--etcd, --zookeeper, --ntp, --admin-names, --generator) is the flag
repeated, or its items separated by commas (FIRN_NTP=a,b), or a YAML list
in the file. Secrets can come from files (--etcd-password-file,
--zookeeper-auth-file).

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
	case "generator":
		return cmdGenerator(rest, stdout, stderr)
	case "fault":
		return cmdFault(rest, stdout, stderr)
	case "bench":
		return cmdBench(rest, stdout, stderr)
	case benchChildCommand:
		return cmdBenchChild(rest, stdout, stderr)
	case "version", "--version":
		return cmdVersion(rest, stdout, stderr)
	case "help", "-h", "--help":
		if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
			// firn help CMD [SUB]: the command's own help.
			return run(append(rest, "--help"), stdout, stderr)
		}
		if len(rest) > 0 {
			return fail(stderr, exitUsage, "help: unexpected argument %q (firn help [COMMAND])", rest[0])
		}
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

package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// version is stamped by release builds (-ldflags "-X main.version=v1.2.3",
// deploy/release.sh and deploy/Dockerfile). A build without it reports the
// module version Go recorded (`go install …@v1.2.3`), else "dev".
var version = ""

// cmdVersion is `firn version`: the one line of readBuild. It takes no
// flags and no arguments.
func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("firn version", "Usage: firn version\n\nPrints the version, the VCS revision and the Go version of this binary.", stdout)
	if err := parseFlags(fs, args); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "version: %v", err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, exitUsage, "version: %v", unexpectedArg(fs, 0))
	}
	fmt.Fprintln(stdout, readBuild())
	return exitOK
}

// buildInfo is what the binary knows of its own build.
type buildInfo struct {
	Version   string // module version, or "dev"
	Revision  string // VCS revision ("" when the build recorded none)
	Time      string // VCS commit time (RFC 3339), when recorded
	Modified  bool   // built from a tree with uncommitted changes
	GoVersion string
}

// readBuild reads the stamped version and what the Go toolchain recorded.
func readBuild() buildInfo {
	b := buildInfo{Version: version}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		b.GoVersion = bi.GoVersion
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

// String is the one line `firn version` prints.
func (b buildInfo) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "firn %s", b.Version)
	if b.Revision != "" {
		fmt.Fprintf(&s, " (revision %s", b.Revision)
		if b.Time != "" {
			fmt.Fprintf(&s, ", %s", b.Time)
		}
		if b.Modified {
			s.WriteString(", modified")
		}
		s.WriteString(")")
	}
	if b.GoVersion != "" {
		fmt.Fprintf(&s, " %s", b.GoVersion)
	}
	return s.String()
}

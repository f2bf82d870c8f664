package deploy

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const dockerfile = "Dockerfile"

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd  string // upper case: FROM, RUN, ...
	Args string
}

// stage is one FROM ... up to the next FROM.
type stage struct {
	From, Name string
	Inst       []instruction
}

// parseDockerfile reads instructions and stages; ARGs before the first
// FROM are returned with their defaults.
func parseDockerfile(t *testing.T) (args map[string]string, stages []*stage) {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	args = map[string]string{}
	var cur strings.Builder
	var insts []instruction
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, rest, _ := strings.Cut(cur.String(), " ")
		insts = append(insts, instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(rest)})
		cur.Reset()
	}
	for _, in := range insts {
		switch {
		case in.Cmd == "FROM":
			f := strings.Fields(in.Args)
			st := &stage{From: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.Name = f[2]
			}
			stages = append(stages, st)
		case len(stages) == 0 && in.Cmd == "ARG":
			k, v, _ := strings.Cut(in.Args, "=")
			args[k] = v
		case len(stages) == 0:
			t.Fatalf("%s: %s before the first FROM", dockerfile, in.Cmd)
		default:
			stages[len(stages)-1].Inst = append(stages[len(stages)-1].Inst, in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("%s: want a multi-stage build, got %d stage(s)", dockerfile, len(stages))
	}
	return args, stages
}

func (s *stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.Inst {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func (s *stage) last(t *testing.T, cmd string) string {
	t.Helper()
	all := s.all(cmd)
	if len(all) == 0 {
		t.Fatalf("%s: final stage has no %s", dockerfile, cmd)
	}
	return all[len(all)-1].Args
}

// dockerfileUID is the numeric user of the final stage.
func dockerfileUID(t *testing.T) int64 {
	t.Helper()
	_, stages := parseDockerfile(t)
	user := stages[len(stages)-1].last(t, "USER")
	u, _, _ := strings.Cut(user, ":")
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil {
		t.Fatalf("%s: USER %q is not numeric (Kubernetes' runAsNonRoot needs a numeric user)", dockerfile, user)
	}
	return uid
}

var digestRef = regexp.MustCompile(`^[a-z0-9./_-]+(:[A-Za-z0-9._-]+)?@sha256:[0-9a-f]{64}$`)

func TestDockerfile(t *testing.T) {
	args, stages := parseDockerfile(t)
	final := stages[len(stages)-1]

	if uid := dockerfileUID(t); uid == 0 {
		t.Error("USER is root")
	}
	if _, gid, ok := strings.Cut(final.last(t, "USER"), ":"); ok {
		if _, err := strconv.Atoi(gid); err != nil {
			t.Errorf("USER group %q is not numeric", gid)
		}
	}
	// Base images: the builder pinned by digest, the runtime empty.
	for _, s := range stages {
		from := s.From
		if strings.HasPrefix(from, "${") {
			from = args[strings.Trim(from, "${}")]
		}
		if from != "scratch" && !digestRef.MatchString(from) {
			t.Errorf("stage %q: base image %q is not pinned by digest", s.Name, from)
		}
	}

	var entry []string
	if err := json.Unmarshal([]byte(final.last(t, "ENTRYPOINT")), &entry); err != nil {
		t.Fatalf("ENTRYPOINT is not in exec form: %v", err)
	}
	if len(entry) != 2 || filepath.Base(entry[0]) != "firn" || entry[1] != "serve" {
		t.Errorf("ENTRYPOINT %v, want [.../firn serve]", entry)
	}
	hc := final.last(t, "HEALTHCHECK")
	i := strings.Index(hc, "CMD ")
	if i < 0 {
		t.Fatalf("HEALTHCHECK %q has no CMD", hc)
	}
	var check []string
	if err := json.Unmarshal([]byte(hc[i+4:]), &check); err != nil {
		t.Fatalf("HEALTHCHECK CMD is not in exec form (the image has no shell): %v", err)
	}
	if len(check) != 2 || !strings.HasSuffix(check[1], "/healthz") {
		t.Errorf("HEALTHCHECK %v, want the check binary on /healthz (never /readyz)", check)
	}

	// What the final stage copies from the build stage.
	copied := map[string]bool{}
	for _, c := range final.all("COPY") {
		f := strings.Fields(c.Args)
		var paths []string
		for _, x := range f {
			if !strings.HasPrefix(x, "--") {
				paths = append(paths, x)
			}
		}
		dst := paths[len(paths)-1]
		for _, src := range paths[:len(paths)-1] {
			if strings.HasSuffix(dst, "/") {
				copied[dst+filepath.Base(src)] = true
			} else {
				copied[dst] = true
			}
		}
	}
	for _, bin := range []string{entry[0], check[0]} {
		if !copied[bin] {
			t.Errorf("%s is not copied into the final stage (copied: %v)", bin, sortedKeys(copied))
		}
	}
}

// TestDockerfileBuildIsStatic runs the build stage's `go build` commands
// as written, outside Docker (the stage's WORKDIR is the repository root
// and /out a temporary directory), and checks that each output is a static
// ELF binary: no program interpreter, no shared libraries.
func TestDockerfileBuildIsStatic(t *testing.T) {
	_, stages := parseDockerfile(t)
	build := stages[0]
	out := t.TempDir()
	env := append(os.Environ(), "VERSION=dev")
	for _, e := range build.all("ENV") {
		for _, kv := range strings.Fields(e.Args) {
			env = append(env, kv)
		}
	}
	built := 0
	for _, r := range build.all("RUN") {
		if !strings.Contains(r.Args, "go build") {
			continue
		}
		if !strings.Contains(r.Args, "/out/") {
			t.Fatalf("RUN %q does not write to /out/", r.Args)
		}
		cmdline := strings.ReplaceAll(r.Args, "/out/", out+"/")
		cmd := exec.Command("sh", "-c", cmdline)
		cmd.Dir = repoRoot
		cmd.Env = env
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("RUN %s: %v\n%s", r.Args, err, b)
		}
		built++
	}
	if built < 2 {
		t.Fatalf("found %d go build commands in the build stage, want firn and firn-healthz", built)
	}
	for _, name := range []string{"firn", "firn-healthz"} {
		p := filepath.Join(out, name)
		f, err := elf.Open(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: not a static binary", name)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v", name, libs)
		}
		f.Close()
	}
	// A static binary that runs, with the version stamped by the build.
	if b, err := exec.Command(filepath.Join(out, "firn"), "version").CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "firn dev "+runtime.Version() {
		t.Errorf("built firn version: %q %v", b, err)
	}
}

// TestELFCheckSeesDynamicBinary keeps the static check honest: a binary
// built with cgo on has an interpreter.
func TestELFCheckSeesDynamicBinary(t *testing.T) {
	p, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	p, _ = filepath.EvalSymlinks(p)
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	interp := false
	for _, prog := range f.Progs {
		interp = interp || prog.Type == elf.PT_INTERP
	}
	if !interp {
		t.Fatalf("%s (dynamically linked on Debian) shows no PT_INTERP: the check cannot see dynamic binaries", p)
	}
}

package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	unitFile = "systemd/firn.service"
	envFile  = "systemd/firn.env"
)

// unit is a parsed systemd unit: section → key → values (keys repeat).
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: bad line %q", path, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// parseEnvFile reads KEY=value lines.
func parseEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: bad line %q", path, line)
		}
		env[k] = v
	}
	return env
}

func TestSystemdUnit(t *testing.T) {
	u := parseUnit(t, unitFile)
	if !strings.Contains(" "+u.get("Unit", "After")+" ", " chronyd.service ") {
		t.Errorf("After=%q does not name chronyd.service", u.get("Unit", "After"))
	}
	for k, want := range map[string]string{
		"NoNewPrivileges": "yes",
		"ProtectSystem":   "strict",
		"ProtectHome":     "yes",
		"PrivateTmp":      "yes",
		"ProtectClock":    "yes",
		"User":            "firn",
		"Group":           "firn",
		"StateDirectory":  "firn",
		"EnvironmentFile": "/etc/firn/firn.env",
	} {
		if got := u.get("Service", k); got != want {
			t.Errorf("[Service] %s=%q, want %q", k, got, want)
		}
	}
	exec := strings.Fields(u.get("Service", "ExecStart"))
	if len(exec) < 2 || filepath.Base(exec[0]) != "firn" || exec[1] != "serve" {
		t.Fatalf("ExecStart %v, want .../firn serve", exec)
	}
	checkArgs(t, "ExecStart", exec[2:])

	env := parseEnvFile(t, envFile)
	for k := range env {
		if _, ok := flagOfEnv(k); !ok {
			t.Errorf("%s: %s is not FIRN_<FLAG> of a serve flag", envFile, k)
		}
	}
	if env["FIRN_DATA_DIR"] != "/var/lib/"+u.get("Service", "StateDirectory") {
		t.Errorf("FIRN_DATA_DIR %q is not the unit's StateDirectory", env["FIRN_DATA_DIR"])
	}
	shutdown, err := time.ParseDuration(env["FIRN_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("FIRN_SHUTDOWN_TIMEOUT: %v", err)
	}
	stop, err := time.ParseDuration(u.get("Service", "TimeoutStopSec"))
	if err != nil || stop < shutdown+10*time.Second {
		t.Errorf("TimeoutStopSec=%s, want at least FIRN_SHUTDOWN_TIMEOUT (%v) + 10s", u.get("Service", "TimeoutStopSec"), shutdown)
	}
}

// TestSystemdVerify has systemd itself check the unit (unknown keys,
// bad values) and its hardening score, with ExecStart pointed at the
// built binary.
func TestSystemdVerify(t *testing.T) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "firn.service")
	text := strings.Replace(string(b), "ExecStart=/usr/local/bin/firn serve", "ExecStart="+firnBin+" serve", 1)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := systemdAnalyze(t, "verify", p)
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Exposure 0 (locked down) .. 100 (unprotected); keep it under 2.0.
	if out, err := systemdAnalyze(t, "security", "--offline=yes", "--threshold=20", p); err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0: %v\n%s", err, lastLines(out, 3))
	}
	// verify does complain about an unknown key.
	bad := filepath.Join(dir, "bad.service")
	os.WriteFile(bad, []byte(strings.Replace(text, "NoNewPrivileges=", "NoNewPrivilege=", 1)), 0o644)
	if out, _ := systemdAnalyze(t, "verify", bad); !strings.Contains(out, "Unknown key") {
		t.Errorf("systemd-analyze verify did not notice an unknown key:\n%s", out)
	}
}

func systemdAnalyze(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatalf("systemd-analyze: %v (Debian's systemd package ships it)", err)
	}
	cmd := exec.Command("systemd-analyze", args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

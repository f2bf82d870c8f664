package clientnode

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/devpki"
	"github.com/firnid/firn/internal/testing/freeport"
)

// The client conformance suite (test/conformance/README.md): every
// scenario of test/conformance/scenarios.json, against real nodes, for
// each client's runner. FIRN_CONFORMANCE names the clients (comma-
// separated; default all four); a client whose runner is not built fails
// its test, naming the build script.
func TestConformance(t *testing.T) {
	raw, err := os.ReadFile("../conformance/scenarios.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		About     string     `json:"about"`
		Scenarios []scenario `json:"scenarios"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("scenarios.json: %v", err)
	}
	if len(file.Scenarios) == 0 {
		t.Fatal("scenarios.json holds no scenario")
	}
	langs := []string{"go", "java", "ts", "python"}
	if v := os.Getenv("FIRN_CONFORMANCE"); v != "" {
		langs = strings.Split(v, ",")
	}
	bin := buildFirn(t)
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			// The clients run at once: most of a scenario is nodes
			// starting and waiting out their guards, not CPU.
			t.Parallel()
			runner := runnerPath(t, lang)
			for _, sc := range file.Scenarios {
				t.Run(sc.Name, func(t *testing.T) { runScenario(t, bin, runner, sc) })
			}
		})
	}
}

// runnerPath is the runner of a client: the Go one built here, the others
// as their build scripts leave them.
func runnerPath(t *testing.T, lang string) string {
	t.Helper()
	if lang == "go" {
		p := filepath.Join(t.TempDir(), "gorunner")
		if out, err := exec.Command("go", "build", "-race", "-o", p, "github.com/firnid/firn/test/conformance/gorunner").CombinedOutput(); err != nil {
			t.Fatalf("go build gorunner: %v\n%s", err, out)
		}
		return p
	}
	p, err := filepath.Abs(filepath.Join("..", "..", "clients", lang, "runner"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("the %s runner %s is missing or not executable (build it with clients/%s/build.sh): %v", lang, p, lang, err)
	}
	return p
}

type scenario struct {
	Name  string     `json:"name"`
	About string     `json:"about"`
	DNS   string     `json:"dns"`
	Nodes []nodeSpec `json:"nodes"`
	Steps []step     `json:"steps"`
}

type nodeSpec struct {
	Name   string   `json:"name"`
	Args   []string `json:"args"`
	TLS    string   `json:"tls"`
	Faults bool     `json:"faults"`
}

type action struct {
	Act       string `json:"act"`
	Node      string `json:"node"`
	OffsetMS  int64  `json:"offset_ms"`
	MS        int64  `json:"ms"`
	Generator string `json:"generator"`
	AfterMS   int64  `json:"after_ms"`
}

type step struct {
	action
	Cmd    map[string]any `json:"cmd"`
	During []action       `json:"during"`
	Expect expect         `json:"expect"`
}

type expect struct {
	Errors         *int     `json:"errors"`
	AllFail        bool     `json:"all_fail"`
	Reasons        []string `json:"reasons"`
	WantReason     string   `json:"want_reason"`
	Retry          bool     `json:"retry"`
	MinIDs         int64    `json:"min_ids"`
	Above          string   `json:"above"`
	From           []string `json:"from"`
	MaxMS          int64    `json:"max_ms"`
	MaxCloseMS     int64    `json:"max_close_ms"`
	CurrentAtLeast *struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"current_at_least"`
}

// The runner's answers (README: The runner protocol).
type answer struct {
	OK      bool           `json:"ok"`
	Error   string         `json:"error"`
	Callers []callerAnswer `json:"callers"`
	CloseMS *int64         `json:"close_ms"`
}

type callerAnswer struct {
	IDs    []string    `json:"ids"`
	Runs   [][2]string `json:"runs"`
	Errors []callErr   `json:"errors"`
}

type callErr struct {
	At      int    `json:"at"`
	Reason  string `json:"reason"`
	Code    string `json:"code"`
	RetryMS *int64 `json:"retry_ms"`
	Message string `json:"message"`
}

// confNode is a started node of a scenario.
type confNode struct {
	*node
	name      string
	faultAddr string
	workers   map[[2]uint64]bool // (datacenter, worker) of its default generator
}

// world is one scenario's nodes and what the driver has seen.
type world struct {
	t       *testing.T
	nodes   map[string]*confNode
	order   []*confNode
	certs   *devpki.Files
	dnsPort string
	layout  generator.Layout // the default generator's
	// generator is the one the open client draws from ("" the default).
	generator string
	kinds     map[string]string // generator name → kind ("" key: default)
	seen      map[string]map[uint64]bool
	seqs      map[string][][2]uint64 // key → every range handed out
	last      uint64                 // the most recent default-generator ID
}

func runScenario(t *testing.T, bin, runnerBin string, sc scenario) {
	w := &world{t: t, nodes: map[string]*confNode{}, seen: map[string]map[uint64]bool{}, seqs: map[string][][2]uint64{}}
	w.start(bin, sc)
	r := startRunner(t, runnerBin)
	for i, st := range sc.Steps {
		if st.Cmd == nil {
			w.act(st.action)
			continue
		}
		cmd := w.rewrite(st.Cmd, sc)
		if op := cmd["op"]; op == "open" {
			w.generator, _ = cmd["generator"].(string)
		}
		var wg sync.WaitGroup
		for _, d := range st.During {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(d.AfterMS) * time.Millisecond)
				w.act(d)
			}()
		}
		start := time.Now()
		a := r.send(cmd)
		took := time.Since(start)
		wg.Wait()
		if !a.OK {
			t.Fatalf("step %d (%v): the runner did not carry it out: %s%s", i, cmd["op"], a.Error, r.stderrTail())
		}
		w.check(i, cmd, st.Expect, a, took)
		if t.Failed() {
			t.Logf("runner stderr:%s", r.stderrTail())
			return
		}
	}
}

// start starts the scenario's nodes: the first with the embedded
// coordinator, the others joining it.
func (w *world) start(bin string, sc scenario) {
	t := w.t
	for _, ns := range sc.Nodes {
		if ns.TLS != "" && w.certs == nil {
			c, err := devpki.Write(t.TempDir(), "conformance-client")
			if err != nil {
				t.Fatal(err)
			}
			w.certs = c
		}
	}
	// Every address a node listens on is held open from its choice until
	// the node starts (portHold): a port closed and handed out again by
	// the next listen — four clients' scenarios run at once — would
	// collide (seen: a node's gRPC address given to an embedded etcd).
	ports := &portHold{t: t, held: map[int][]net.Listener{}}
	defer ports.releaseAll()
	if sc.DNS != "" {
		w.dnsPort = ports.shared(len(sc.Nodes))
	}
	addrs := make([]string, len(sc.Nodes))
	for i := range sc.Nodes {
		if sc.DNS != "" {
			addrs[i] = fmt.Sprintf("127.0.0.%d:%s", i+1, w.dnsPort)
		} else {
			addrs[i] = "127.0.0.1:" + ports.take(i, "127.0.0.1")
		}
	}
	etcdURL := ""
	for i, ns := range sc.Nodes {
		addr := addrs[i]
		args := slices.Clone(ns.Args)
		if i == 0 {
			args = append(args, "--embedded-client-addr", "127.0.0.1:"+ports.take(i, "127.0.0.1"),
				"--embedded-peer-addr", "127.0.0.1:"+ports.take(i, "127.0.0.1"))
		} else {
			args = append(args, "--etcd", etcdURL)
		}
		args = append(args, "--http-addr", "127.0.0.1:"+ports.take(i, "127.0.0.1"))
		cn := &confNode{name: ns.Name, workers: map[[2]uint64]bool{}}
		if ns.Faults {
			cn.faultAddr = "127.0.0.1:" + ports.take(i, "127.0.0.1")
			args = append(args, "--enable-fault-injection", "--fault-addr", cn.faultAddr)
		}
		var creds credentials.TransportCredentials = insecure.NewCredentials()
		switch ns.TLS {
		case "":
		case "tls", "mtls":
			args = append(args, "--tls-cert", w.certs.ServerCert, "--tls-key", w.certs.ServerKey)
			if ns.TLS == "mtls" {
				args = append(args, "--tls-client-ca", w.certs.CA)
			}
			cfg, err := w.certs.ClientTLS(ns.TLS == "mtls")
			if err != nil {
				t.Fatal(err)
			}
			creds = credentials.NewTLS(cfg)
		default:
			t.Fatalf("node %s: tls %q is neither tls nor mtls", ns.Name, ns.TLS)
		}
		ports.release(i) // its listeners open now
		cn.node = launchNode(t, bin, addr, creds, args...)
		w.nodes[ns.Name] = cn
		w.order = append(w.order, cn)
		if i > 0 {
			continue // the others join at once, and are waited for below
		}
		cn.waitServing(t)
		info := cn.info(t)
		etcdURL = info.GetEmbeddedEtcdUrl()
		w.kinds = map[string]string{}
		for _, g := range info.GetGenerators() {
			w.kinds[g.GetName()] = g.GetKind()
			if g.GetIsDefault() && g.GetKind() == "snowflake" {
				w.kinds[""] = g.GetKind()
				l, err := generator.ParseLayout(g.GetLayout())
				if err != nil {
					t.Fatalf("the default generator's layout %q: %v", g.GetLayout(), err)
				}
				w.layout = l
			}
		}
	}
	// A node joining a coordinator waits out its restore guard (a few
	// seconds) before it serves: the joiners start together.
	for _, cn := range w.order {
		cn.waitServing(t)
		for _, g := range cn.info(t).GetGenerators() {
			if !g.GetIsDefault() || g.GetKind() != "snowflake" {
				continue
			}
			cn.workers[[2]uint64{uint64(g.GetDatacenter()), uint64(g.GetWorker())}] = true
			for _, wk := range g.GetWorkers() {
				cn.workers[[2]uint64{uint64(g.GetDatacenter()), uint64(wk)}] = true
			}
		}
	}
}

// portHold chooses free ports and keeps each open, under the node that
// will listen on it, until that node starts: no two choices of one
// scenario, nor of scenarios running at once, name the same port.
type portHold struct {
	t    *testing.T
	held map[int][]net.Listener // node index → its ports
}

// take holds a free port on host for node i and returns it. The port lies
// outside the ephemeral range: one from it could be taken, between release
// and the node's listen, as the local port of some outgoing connection.
func (p *portHold) take(i int, host string) string {
	p.t.Helper()
	l := freeport.Listen(p.t, host)
	p.held[i] = append(p.held[i], l)
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// shared holds one port free on 127.0.0.1 to 127.0.0.n, the one on
// 127.0.0.(i+1) for node i, and returns it.
func (p *portHold) shared(n int) string {
	p.t.Helper()
	for try := 0; try < 20; try++ {
		port := p.take(0, "127.0.0.1")
		ok := true
		for i := 2; i <= n && ok; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i), port))
			if err != nil {
				ok = false
				continue
			}
			p.held[i-1] = append(p.held[i-1], l)
		}
		if ok {
			return port
		}
	}
	p.t.Fatalf("no port free on 127.0.0.1-%d", n)
	return ""
}

// release closes node i's ports, as it starts.
func (p *portHold) release(i int) {
	for _, l := range p.held[i] {
		l.Close()
	}
	delete(p.held, i)
}

// releaseAll closes every port still held.
func (p *portHold) releaseAll() {
	for i := range p.held {
		p.release(i)
	}
}

// rewrite puts addresses, certificate paths and the resolver map into a
// command.
func (w *world) rewrite(in map[string]any, sc scenario) map[string]any {
	cmd := map[string]any{}
	for k, v := range in {
		cmd[k] = v
	}
	if eps, ok := in["endpoints"].([]any); ok {
		var out []string
		for _, e := range eps {
			name, _ := e.(string)
			if name == "dns" {
				out = append(out, "dns:///"+sc.DNS+":"+w.dnsPort)
				continue
			}
			n, ok := w.nodes[name]
			if !ok {
				w.t.Fatalf("endpoint %q names no node of the scenario", name)
			}
			out = append(out, n.addr)
		}
		cmd["endpoints"] = out
		if sc.DNS != "" {
			var addrs []string
			for _, n := range w.order {
				host, _, _ := strings.Cut(n.addr, ":")
				addrs = append(addrs, host)
			}
			cmd["resolve"] = map[string][]string{sc.DNS: addrs}
		}
	}
	switch in["tls"] {
	case nil:
	case "ca":
		cmd["tls"] = map[string]string{"ca": w.certs.CA}
	case "mtls":
		cmd["tls"] = map[string]string{"ca": w.certs.CA, "cert": w.certs.ClientCert, "key": w.certs.ClientKey}
	default:
		w.t.Fatalf("cmd tls %v is neither ca nor mtls", in["tls"])
	}
	return cmd
}

// act takes a driver action.
func (w *world) act(a action) {
	t := w.t
	n := func() *confNode {
		if a.Node == "serving" {
			for _, cn := range w.order {
				if w.owns(cn, w.last) {
					return cn
				}
			}
			t.Fatalf("no node issued the most recent ID %d", w.last)
		}
		cn, ok := w.nodes[a.Node]
		if !ok {
			t.Fatalf("act %s: no node %q", a.Act, a.Node)
		}
		return cn
	}
	switch a.Act {
	case "kill":
		cn := n()
		cn.cmd.Process.Kill()
		<-cn.done
	case "freeze":
		cn := n()
		if err := cn.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cn.cmd.Process.Signal(syscall.SIGCONT) })
	case "thaw":
		if err := n().cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	case "clock_offset":
		cn := n()
		off := (time.Duration(a.OffsetMS) * time.Millisecond).String()
		resp, err := http.PostForm("http://"+cn.faultAddr+"/debug/fault/clock-offset", url.Values{"offset": {off}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("fault injection on %s: %s", cn.name, resp.Status)
		}
	case "sleep":
		time.Sleep(time.Duration(a.MS) * time.Millisecond)
	case "settle_sections":
		waitFor(t, 30*time.Second, "every section of "+a.Generator+" to have one serving owner", func() bool {
			var first string
			for _, cn := range w.order {
				m, ok := sectionMap(t, cn.node, a.Generator)
				if !ok || (first != "" && m != first) {
					return false
				}
				first = m
			}
			return true
		})
	default:
		t.Fatalf("unknown act %q", a.Act)
	}
}

// sectionMap is a node's section map of a sequence generator, and whether
// every section has a serving owner.
func sectionMap(t *testing.T, n *node, gen string) (string, bool) {
	for _, g := range n.info(t).GetGenerators() {
		if g.GetName() != gen {
			continue
		}
		owners := make([]string, g.GetSections())
		ok := len(g.GetSectionOwners()) == len(owners) && len(owners) > 0
		for _, o := range g.GetSectionOwners() {
			owners[o.GetSection()] = o.GetAddress()
			ok = ok && o.GetAddress() != "" && o.GetServing()
		}
		return strings.Join(owners, ","), ok
	}
	t.Fatalf("node %s runs no generator %q", n.addr, gen)
	return "", false
}

// owns says whether node cn issued id (its worker field), for the default
// generator.
func (w *world) owns(cn *confNode, id uint64) bool {
	p, err := w.layout.Decode(id)
	return err == nil && cn.workers[[2]uint64{p.Datacenter, p.Worker}]
}

// check verifies an answer: the scenario's expectations, then what holds
// always (no ID twice, each caller's order, each key's values).
func (w *world) check(i int, cmd map[string]any, ex expect, a answer, took time.Duration) {
	t := w.t
	op, _ := cmd["op"].(string)
	where := fmt.Sprintf("step %d (%s)", i, op)
	calls, failed := 0, 0
	var errs []callErr
	var total int64
	gen := w.generator
	if w.seen[gen] == nil {
		w.seen[gen] = map[uint64]bool{}
	}
	// IDs of the default generator decode to their node; the others are
	// checked for order over all of a caller's IDs.
	snowflake := gen == "" && w.kinds[""] == "snowflake"
	key := ""
	switch {
	case cmd["key_base64"] != nil:
		b, err := base64.StdEncoding.DecodeString(cmd["key_base64"].(string))
		if err != nil {
			t.Fatalf("%s: key_base64: %v", where, err)
		}
		key = string(b)
	case cmd["key"] != nil:
		key = cmd["key"].(string)
	}
	above := uint64(0)
	if ex.Above != "" {
		v, err := strconv.ParseUint(ex.Above, 10, 64)
		if err != nil {
			t.Fatalf("%s: above %q: %v", where, ex.Above, err)
		}
		above = v
	}
	from := map[string]bool{}
	for c, ca := range a.Callers {
		errs = append(errs, ca.Errors...)
		failed += len(ca.Errors)
		ids := make([]uint64, 0, len(ca.IDs))
		for _, s := range ca.IDs {
			ids = append(ids, parseID(t, where, s))
		}
		switch op {
		case "next", "next_n", "next_range", "close_while_waiting":
			if op == "next_range" {
				for _, run := range ca.Runs {
					first, n := parseID(t, where, run[0]), parseID(t, where, run[1])
					if n == 0 {
						t.Errorf("%s: caller %d got an empty run at %d", where, c, first)
					}
					for v := first; v < first+n; v++ {
						ids = append(ids, v)
					}
				}
			}
			for _, id := range ids {
				if w.seen[gen][id] {
					t.Fatalf("%s: ID %d handed out twice (caller %d)", where, id, c)
				}
				w.seen[gen][id] = true
				if id <= above {
					t.Errorf("%s: ID %d is not above %d", where, id, above)
				}
				if snowflake {
					for _, cn := range w.order {
						if w.owns(cn, id) {
							from[cn.name] = true
						}
					}
				}
			}
			total += int64(len(ids))
			if op == "next" {
				w.checkOrder(where, c, ids, snowflake)
			}
			if len(ids) > 0 && snowflake {
				w.last = ids[len(ids)-1]
			}
		case "next_seq":
			var prev uint64
			for _, run := range ca.Runs {
				first, n := parseID(t, where, run[0]), parseID(t, where, run[1])
				if first == 0 || n == 0 {
					t.Errorf("%s: caller %d got values [%d, +%d): values start at 1 and a call returns at least one", where, c, first, n)
				}
				if first <= prev {
					t.Errorf("%s: caller %d got %d after %d for key %q: a caller's values increase", where, c, first, prev, key)
				}
				prev = first + n - 1
				w.seqs[key] = append(w.seqs[key], [2]uint64{first, n})
				total += int64(n)
			}
		case "current_seq":
			for _, run := range ca.Runs {
				v := parseID(t, where, run[0])
				total++
				if ex.CurrentAtLeast != nil && ex.CurrentAtLeast.Key == key {
					want := parseID(t, where, ex.CurrentAtLeast.Value)
					if v < want {
						t.Errorf("%s: current value %d of %q is below %d", where, v, key, want)
					}
				}
				var top uint64
				for _, r := range w.seqs[key] {
					top = max(top, r[0]+r[1]-1)
				}
				if v < top {
					t.Errorf("%s: current value %d of %q is below %d, a value already handed out", where, v, key, top)
				}
			}
		}
		calls += len(ca.IDs) + len(ca.Runs) + len(ca.Errors)
	}
	if op == "next_seq" {
		rs := slices.Clone(w.seqs[key])
		slices.SortFunc(rs, func(x, y [2]uint64) int { return cmpU(x[0], y[0]) })
		for j := 1; j < len(rs); j++ {
			if rs[j][0] < rs[j-1][0]+rs[j-1][1] {
				t.Errorf("%s: key %q: values [%d, +%d) and [%d, +%d) overlap: a value handed out twice", where, key, rs[j-1][0], rs[j-1][1], rs[j][0], rs[j][1])
			}
		}
	}
	// Expectations.
	if ex.Errors != nil && failed != *ex.Errors {
		t.Errorf("%s: %d calls failed, want %d: %s", where, failed, *ex.Errors, summarize(errs))
	}
	if ex.AllFail {
		for c, ca := range a.Callers {
			if len(ca.IDs) > 0 || len(ca.Runs) > 0 {
				t.Errorf("%s: caller %d got IDs (%d) or values (%d) where every call must fail", where, c, len(ca.IDs), len(ca.Runs))
			}
		}
		if failed == 0 {
			t.Errorf("%s: no call failed", where)
		}
	}
	if len(ex.Reasons) > 0 {
		for _, e := range errs {
			if !slices.Contains(ex.Reasons, e.Reason) {
				t.Errorf("%s: a call failed with reason %s (code %q: %s), want one of %v", where, e.Reason, e.Code, e.Message, ex.Reasons)
				break
			}
		}
		if len(errs) == 0 {
			t.Errorf("%s: no call failed; want a failure with one of %v", where, ex.Reasons)
		}
	}
	if ex.WantReason != "" && !slices.ContainsFunc(errs, func(e callErr) bool { return e.Reason == ex.WantReason }) {
		t.Errorf("%s: no call failed with reason %s: %s", where, ex.WantReason, summarize(errs))
	}
	if ex.Retry {
		found := false
		for _, e := range errs {
			found = found || (e.RetryMS != nil && *e.RetryMS > 0)
		}
		if !found {
			t.Errorf("%s: no failed call carried a RetryInfo delay: %s", where, summarize(errs))
		}
	}
	if total < ex.MinIDs {
		t.Errorf("%s: %d IDs or values in all, want at least %d (errors: %s)", where, total, ex.MinIDs, summarize(errs))
	}
	for _, name := range ex.From {
		if !from[name] {
			t.Errorf("%s: no ID came from node %s (IDs came from %v)", where, name, keys(from))
		}
	}
	if ex.MaxMS > 0 && took > time.Duration(ex.MaxMS)*time.Millisecond {
		t.Errorf("%s: answered in %v, want within %d ms (refusals come at once)", where, took, ex.MaxMS)
	}
	if ex.MaxCloseMS > 0 && (a.CloseMS == nil || *a.CloseMS > ex.MaxCloseMS) {
		t.Errorf("%s: close took %v ms, want at most %d", where, a.CloseMS, ex.MaxCloseMS)
	}
	if op != "open" && op != "close" && op != "stats" {
		t.Logf("%s: %d callers, %d calls, %d failed, %d IDs or values, %v", where, len(a.Callers), calls, failed, total, took.Round(time.Millisecond))
	}
}

// checkOrder: a caller's successive IDs from Next increase while one node
// serves it (for a snowflake generator, per issuing worker; otherwise over
// all of them).
func (w *world) checkOrder(where string, c int, ids []uint64, snowflake bool) {
	prev := map[[2]uint64]uint64{}
	for _, id := range ids {
		k := [2]uint64{}
		if snowflake {
			p, err := w.layout.Decode(id)
			if err != nil {
				w.t.Errorf("%s: ID %d does not decode: %v", where, id, err)
				return
			}
			k = [2]uint64{p.Datacenter, p.Worker}
		}
		if p, ok := prev[k]; ok && id <= p {
			w.t.Errorf("%s: caller %d got %d after %d from one node: a caller's IDs from one node increase", where, c, id, p)
			return
		}
		prev[k] = id
	}
}

func parseID(t *testing.T, where, s string) uint64 {
	t.Helper()
	v, ok := new(big.Int).SetString(s, 10)
	if !ok || v.Sign() < 0 || !v.IsUint64() {
		t.Fatalf("%s: %q is not a decimal 64-bit unsigned number", where, s)
	}
	return v.Uint64()
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// summarize counts failures by reason, with one message of each.
func summarize(errs []callErr) string {
	if len(errs) == 0 {
		return "none"
	}
	n := map[string]int{}
	msg := map[string]string{}
	for _, e := range errs {
		n[e.Reason]++
		msg[e.Reason] = e.Message
	}
	var parts []string
	for r, c := range n {
		parts = append(parts, fmt.Sprintf("%s ×%d (%s)", r, c, msg[r]))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// runnerProc is a started runner.
type runnerProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func startRunner(t *testing.T, path string) *runnerProc {
	t.Helper()
	r := &runnerProc{t: t, cmd: exec.Command(path), stderr: &lockedBuffer{}}
	r.cmd.Stderr = r.stderr
	var err error
	if r.in, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.out = bufio.NewScanner(out)
	r.out.Buffer(make([]byte, 1<<20), 1<<28)
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting the runner %s: %v", path, err)
	}
	t.Cleanup(func() {
		r.in.Close()
		done := make(chan error, 1)
		go func() { done <- r.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil && !t.Failed() {
				t.Errorf("the runner exited with %v after its input ended%s", err, r.stderrTail())
			}
		case <-time.After(15 * time.Second):
			r.cmd.Process.Kill()
			<-done
			t.Errorf("the runner did not exit within 15 s of its input ending%s", r.stderrTail())
		}
	})
	return r
}

// send writes one command and reads its answer (at most 2 minutes).
func (r *runnerProc) send(cmd map[string]any) answer {
	t := r.t
	b, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.in.Write(append(b, '\n')); err != nil {
		t.Fatalf("writing to the runner: %v%s", err, r.stderrTail())
	}
	got := make(chan bool, 1)
	go func() { got <- r.out.Scan() }()
	select {
	case ok := <-got:
		if !ok {
			t.Fatalf("the runner ended without answering %s: %v%s", b, r.out.Err(), r.stderrTail())
		}
	case <-time.After(2 * time.Minute):
		r.cmd.Process.Kill()
		t.Fatalf("the runner did not answer %s within 2 minutes%s", b, r.stderrTail())
	}
	var a answer
	if err := json.Unmarshal(r.out.Bytes(), &a); err != nil {
		t.Fatalf("the runner's answer to %s is not JSON: %v: %.300s", b, err, r.out.Bytes())
	}
	return a
}

func (r *runnerProc) stderrTail() string {
	r.stderr.mu.Lock()
	defer r.stderr.mu.Unlock()
	s := r.stderr.b.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	if s == "" {
		return ""
	}
	return "\nrunner stderr:\n" + s
}

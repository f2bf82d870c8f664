package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server"
	"github.com/firnid/firn/server/core"
)

// roots is a client TLS configuration trusting the CA only (no client
// certificate).
func roots(t *testing.T, c *etcdtest.Certs) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no CA certificate")
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// serveTLS gives the node the server certificate of c, as `firn serve
// --tls-cert --tls-key` loads it; mutual adds --tls-client-ca (c's CA).
func serveTLS(t *testing.T, c *etcdtest.Certs, mutual bool) func(*core.Config) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(c.ServerCert, c.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if mutual {
		tc.ClientCAs = roots(t, c).RootCAs
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return func(cfg *core.Config) { cfg.TLS = tc }
}

func httpsClient(tc *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}

// grpcCall makes one NextID over a fresh connection with the given TLS
// configuration (nil: plaintext).
func grpcCall(t *testing.T, addr string, tc *tls.Config) error {
	t.Helper()
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = tlsCreds(tc)
	}
	conn := dialGRPC(t, addr, creds)
	defer conn.Close()
	_, err := firnv1.NewIDServiceClient(conn).NextID(ctx(t), &firnv1.NextIDRequest{})
	return err
}

func post(c *http.Client, u string) (int, string, error) {
	resp, err := c.Post(u, "application/x-www-form-urlencoded", strings.NewReader(""))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TLS: with a server certificate (--tls-cert/--tls-key), gRPC and HTTP work for a client that
// trusts the CA; a client that does not, or speaks plaintext, is refused;
// POST /admin/resume is refused without mTLS.
func TestTLS(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	certs := etcdtest.MakeCerts(t, "firn-client")
	other := etcdtest.MakeCerts(t, "stranger")
	n := startNode(t, e.Endpoints, t.TempDir(), serveTLS(t, certs, false))
	good := roots(t, certs)
	conn := dialGRPC(t, n.node.GRPCAddr(), tlsCreds(good))
	cli := firnv1.NewIDServiceClient(conn)
	waitServing(t, cli, "", 10*time.Second)

	if err := grpcCall(t, n.node.GRPCAddr(), good); err != nil {
		t.Fatalf("gRPC over TLS with the CA: %v", err)
	}
	if err := grpcCall(t, n.node.GRPCAddr(), roots(t, other)); status.Code(err) != codes.Unavailable {
		t.Fatalf("gRPC trusting another CA: %v, want refused (Unavailable)", err)
	}
	if err := grpcCall(t, n.node.GRPCAddr(), nil); err == nil {
		t.Fatal("plaintext gRPC to a TLS node succeeded")
	}

	base := "https://" + n.node.HTTPAddr()
	code, body := httpGet(t, httpsClient(good), base+"/v1/ids?count=3")
	if code != 200 {
		t.Fatalf("HTTPS /v1/ids: %d %s", code, body)
	}
	parseIDs(t, body, 3)
	if _, err := httpsClient(roots(t, other)).Get(base + "/v1/ids"); err == nil {
		t.Fatal("HTTPS trusting another CA succeeded")
	}
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + n.node.HTTPAddr() + "/v1/ids"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatalf("plaintext HTTP to a TLS node: 200 %s", b)
		}
	}
	// The refused handshakes are in the node's log, not on the process's
	// standard error. The server logs a handshake's failure on its own
	// goroutine, after the client has seen it: a moment to land.
	for end := time.Now().Add(2 * time.Second); !strings.Contains(n.logs.String(), "TLS handshake error") && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(n.logs.String(), "TLS handshake error") {
		t.Fatalf("the node's log does not record the refused TLS handshakes:\n%s", n.logs)
	}
	// TLS without client certificates, on loopback: the admin endpoint
	// answers (the caller is on the node's host).
	code, body, err := post(httpsClient(good), base+"/admin/resume")
	if err != nil || code != 200 {
		t.Fatalf("POST /admin/resume without mTLS on a loopback listener: %d %s %v, want 200", code, body, err)
	}
}

// Without mTLS, the admin endpoints answer only on a loopback listener: a
// node listening on every interface refuses, naming why, even to a caller
// on its own host.
func TestAdminOffWithoutMTLSOffLoopback(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.HTTPAddr = "0.0.0.0:0" })
	waitServing(t, n.ids, "", 10*time.Second)
	_, port, _ := net.SplitHostPort(n.node.HTTPAddr())
	code, body, err := post(&http.Client{Timeout: 5 * time.Second}, "http://127.0.0.1:"+port+"/admin/resume")
	if err != nil || code != 403 || !strings.Contains(body, "loopback") || !strings.Contains(body, "--admin-names") {
		t.Fatalf("POST /admin/resume to a node on 0.0.0.0 without mTLS: %d %s %v, want 403 naming the two ways", code, body, err)
	}
}

// mTLS: with client certificates required (--tls-client-ca), gRPC and HTTP need a client certificate from
// that CA; POST /admin/resume works with it and ends a manual-recovery
// hold after a clock rollback.
func TestMTLSAndAdminResume(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	certs := etcdtest.MakeCerts(t, "firn-operator")
	other := etcdtest.MakeCerts(t, "stranger")
	n := startNode(t, e.Endpoints, t.TempDir(), serveTLS(t, certs, true), faultInjection,
		func(c *core.Config) { c.RollbackRecovery, c.AdminNames = "manual", []string{"firn-operator"} })
	good := certs.ClientTLS(t)
	conn := dialGRPC(t, n.node.GRPCAddr(), tlsCreds(good))
	cli := firnv1.NewIDServiceClient(conn)
	waitServing(t, cli, "", 10*time.Second)

	if err := grpcCall(t, n.node.GRPCAddr(), good); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if err := grpcCall(t, n.node.GRPCAddr(), roots(t, certs)); err == nil {
		t.Fatal("gRPC without a client certificate succeeded")
	}
	// A certificate from another CA, presented to a server the client trusts.
	stranger := other.ClientTLS(t)
	stranger.RootCAs = good.RootCAs
	if err := grpcCall(t, n.node.GRPCAddr(), stranger); err == nil {
		t.Fatal("gRPC with a client certificate from another CA succeeded")
	}

	base := "https://" + n.node.HTTPAddr()
	if code, body := httpGet(t, httpsClient(good), base+"/v1/ids"); code != 200 {
		t.Fatalf("HTTPS /v1/ids with a client certificate: %d %s", code, body)
	}
	// A certificate from another CA is refused at the handshake.
	if resp, err := httpsClient(stranger).Get(base + "/v1/ids"); err == nil {
		resp.Body.Close()
		t.Fatalf("HTTPS with another CA's certificate: %s", resp.Status)
	}
	if code, _, err := post(httpsClient(stranger), base+"/admin/resume"); err == nil {
		t.Fatalf("POST /admin/resume with another CA's certificate: %d", code)
	}
	// Without a client certificate, probes and scrapes work (kubelet, the
	// image's health check, Prometheus) but the ID API and /admin refuse.
	anon := httpsClient(roots(t, certs))
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/"} {
		if code, body := httpGet(t, anon, base+path); code != 200 {
			t.Fatalf("HTTPS %s without a client certificate: %d %s", path, code, body)
		}
	}
	if code, body := httpGet(t, anon, base+"/v1/ids"); code != 403 {
		t.Fatalf("HTTPS /v1/ids without a client certificate: %d %s, want 403", code, body)
	}
	if code, _, err := post(anon, base+"/admin/resume"); err != nil || code != 403 {
		t.Fatalf("POST /admin/resume without a client certificate: %d %v, want 403", code, err)
	}

	// A rollback beyond max-lead with manual recovery: the node stays out
	// after the clock caught up, until an operator resumes it.
	n.setOffset(t, -5*time.Second)
	waitNotServing(t, cli, "", 3*time.Second)
	// Resuming while the clock is still behind the last ID is refused.
	code, body, err := post(httpsClient(good), base+"/admin/resume")
	if err != nil || code != 400 || !strings.Contains(body, "not resumed") {
		t.Fatalf("POST /admin/resume with the clock 5s behind: %d %s %v, want 400", code, body, err)
	}
	if code, body, err := post(httpsClient(good), base+"/admin/resume?generator=nope"); err != nil || code != 404 {
		t.Fatalf("POST /admin/resume?generator=nope: %d %s %v, want 404", code, body, err)
	}
	n.setOffset(t, 0)
	time.Sleep(700 * time.Millisecond) // auto recovery would be back by now
	if info := infoOf(t, cli, ""); info.GetServing() || !strings.Contains(info.GetReason(), "clock rolled back") {
		t.Fatalf("manual recovery: serving=%v reason %q after the clock caught up; want held", info.GetServing(), info.GetReason())
	}
	code, body, err = post(httpsClient(good), base+"/admin/resume")
	if err != nil || code != 200 || !strings.Contains(body, "default") {
		t.Fatalf("POST /admin/resume with mTLS: %d %s %v", code, body, err)
	}
	waitServing(t, cli, "", 3*time.Second)
	if err := grpcCall(t, n.node.GRPCAddr(), good); err != nil {
		t.Fatalf("NextID after resume: %v", err)
	}
}

// Over mTLS, an ID caller is not an admin: a verified client certificate
// whose name is not in --admin-names gets IDs but not /admin/resume, and
// the refusal names the certificate and the flag.
func TestAdminNamesSeparateAdminsFromIDCallers(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	certs := etcdtest.MakeCerts(t, "orders-service")
	n := startNode(t, e.Endpoints, t.TempDir(), serveTLS(t, certs, true),
		func(c *core.Config) { c.AdminNames = []string{"firn-operator", "ops.example"} })
	caller := httpsClient(certs.ClientTLS(t))
	base := "https://" + n.node.HTTPAddr()
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := httpGet(t, caller, base+"/readyz"); code == 200 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("not ready within 10 s")
		}
	}
	if code, body := httpGet(t, caller, base+"/v1/ids"); code != 200 {
		t.Fatalf("/v1/ids with the caller's certificate: %d %s", code, body)
	}
	code, body, err := post(caller, base+"/admin/resume")
	if err != nil || code != 403 || !strings.Contains(body, `\"orders-service\" is not in --admin-names`) {
		t.Fatalf("POST /admin/resume as an ID caller: %d %s %v, want 403 naming the certificate", code, body, err)
	}
}

// TestAllowCallersPerGenerator: a generator with an allow list serves the
// client certificates it names and refuses every other caller
// PERMISSION_DENIED (HTTP 403), naming the generator and nothing else —
// not its bounds, not the list, not the name the caller was seen as —
// over gRPC and HTTP, for every call that names it; a generator without a
// list serves every caller; an allow list without mTLS is refused at
// start.
func TestAllowCallersPerGenerator(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	certs := etcdtest.MakeCerts(t, "billing")
	allow := func(c *core.Config) {
		generators("default=snowflake", "orders=snowflake")(c)
		c.Generators[1].Allow = []string{"billing", "billing.internal"}
	}
	n := startNode(t, e.Endpoints, t.TempDir(), serveTLS(t, certs, true), allow, seqGen("chats", "seq,sections=2"),
		func(c *core.Config) { c.Generators[2].Allow = []string{"billing"} })
	billing, shop := certs.ClientTLS(t), certs.ClientTLSAs(t, "shop")
	base := "https://" + n.node.HTTPAddr()
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := httpGet(t, httpsClient(billing), base+"/readyz?generator=chats"); code == 200 {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("not ready within 20 s")
		}
	}
	ids := func(tc *tls.Config) firnv1.IDServiceClient {
		conn := dialGRPC(t, n.node.GRPCAddr(), tlsCreds(tc))
		t.Cleanup(func() { conn.Close() })
		return firnv1.NewIDServiceClient(conn)
	}
	asBilling, asShop := ids(billing), ids(shop)
	c := ctx(t)
	if _, err := asBilling.NextID(c, &firnv1.NextIDRequest{Generator: "orders"}); err != nil {
		t.Fatalf("billing, on the list: NextID(orders): %v", err)
	}
	for _, who := range []firnv1.IDServiceClient{asBilling, asShop} {
		if _, err := who.NextID(c, &firnv1.NextIDRequest{Generator: "default"}); err != nil {
			t.Fatalf("NextID(default), no list: %v", err)
		}
	}
	// Every call naming orders (or chats), refused alike; a bad count
	// too: the caller learns no bound.
	for what, call := range map[string]func() error{
		"NextID": func() error { _, err := asShop.NextID(c, &firnv1.NextIDRequest{Generator: "orders"}); return err },
		"NextIDs": func() error {
			_, err := asShop.NextIDs(c, &firnv1.NextIDsRequest{Generator: "orders", Count: 3})
			return err
		},
		"NextIDs count 0": func() error { _, err := asShop.NextIDs(c, &firnv1.NextIDsRequest{Generator: "orders"}); return err },
		"NextRange": func() error {
			_, err := asShop.NextRange(c, &firnv1.NextRangeRequest{Generator: "orders", Count: 10})
			return err
		},
		"Decode": func() error {
			_, err := asShop.Decode(c, &firnv1.DecodeRequest{Generator: "orders", Id: 1})
			return err
		},
		"NextSeq": func() error {
			_, err := asShop.NextSeq(c, &firnv1.NextSeqRequest{Generator: "chats", Key: []byte("k"), Count: 1})
			return err
		},
		"CurrentSeq": func() error {
			_, err := asShop.CurrentSeq(c, &firnv1.CurrentSeqRequest{Generator: "chats", Key: []byte("k")})
			return err
		},
	} {
		err := call()
		gen := "orders"
		if strings.Contains(what, "Seq") {
			gen = "chats"
		}
		wantCode(t, "shop: "+what, err, codes.PermissionDenied, `"`+gen+`"`)
		wantInfo(t, "shop: "+what, err, "PERMISSION_DENIED", map[string]string{"generator": gen})
		if msg := status.Convert(err).Message(); strings.Contains(msg, "billing") || strings.Contains(msg, "shop") || strings.Contains(msg, "[1,") {
			t.Errorf("shop: %s: the refusal %q tells more than the generator", what, msg)
		}
		if md := errorInfo(err).GetMetadata(); len(md) != 1 {
			t.Errorf("shop: %s: ErrorInfo metadata %v, want the generator alone", what, md)
		}
	}
	// HTTP: the same rule, 403.
	for _, u := range []string{"/v1/ids?generator=orders", "/v1/ids?generator=orders&count=0", "/v1/ranges?generator=orders&count=5", "/v1/decode/1?generator=orders"} {
		code, body := httpGet(t, httpsClient(shop), base+u)
		if code != 403 || !strings.Contains(body, "PERMISSION_DENIED") || strings.Contains(body, "billing") {
			t.Errorf("shop: GET %s: %d %s; want 403 PERMISSION_DENIED", u, code, body)
		}
		if code, body := httpGet(t, httpsClient(billing), base+strings.Replace(u, "count=0", "count=1", 1)); code != 200 {
			t.Errorf("billing: GET %s: %d %s; want 200", u, code, body)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/seq", strings.NewReader(`{"generator":"chats","key":"k"}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := httpsClient(shop).Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("shop: POST /v1/seq: %v %v; want 403", resp.Status, err)
	} else {
		resp.Body.Close()
	}

	// An allow list needs mTLS: the names are a verified certificate's.
	cfg := core.DefaultConfig()
	allow(&cfg)
	if err := cfg.Finish(time.Now()); err == nil || !strings.Contains(err.Error(), "--allow-callers") || !strings.Contains(err.Error(), "mTLS") {
		t.Fatalf("an allow list without mTLS: %v, want a refusal naming --allow-callers and mTLS", err)
	}
}

// TestDefinitionsFollowed: a node follows what the coordinator's
// definitions say of the generators it runs (firn generator create and
// retire): an allow list stored there is enforced within a read
// (defsEvery), and a retirement makes every call to the generator
// NOT_FOUND naming it, while the node's other generators serve on.
func TestDefinitionsFollowed(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	certs := etcdtest.MakeCerts(t, "billing")
	n := startNode(t, e.Endpoints, t.TempDir(), serveTLS(t, certs, true), generators("default=snowflake", "orders=snowflake"))
	billing, shop := certs.ClientTLS(t), certs.ClientTLSAs(t, "shop")
	for _, tc := range []*tls.Config{billing, shop} {
		for start := time.Now(); grpcCall(t, n.node.GRPCAddr(), tc) != nil; time.Sleep(50 * time.Millisecond) {
			if time.Since(start) > 15*time.Second {
				t.Fatal("not serving within 15 s")
			}
		}
	}
	conn := dialGRPC(t, n.node.GRPCAddr(), tlsCreds(shop))
	defer conn.Close()
	asShop := firnv1.NewIDServiceClient(conn)
	if _, err := asShop.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "orders"}); err != nil {
		t.Fatalf("shop before any definition: %v", err)
	}
	defs := n.coord.(coordinator.Definitions)
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "orders", Definition: "snowflake",
		Allow: []string{"billing"}, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// Within a read of the definitions: shop refused, billing served.
	var err error
	for start := time.Now(); time.Since(start) < 2*time.Second+5*time.Second; time.Sleep(50 * time.Millisecond) {
		if _, err = asShop.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "orders"}); err != nil {
			break
		}
	}
	wantInfo(t, "shop after the allow list was stored", err, "PERMISSION_DENIED", map[string]string{"generator": "orders"})
	if err := grpcCallGen(t, n.node.GRPCAddr(), billing, "orders"); err != nil {
		t.Fatalf("billing, on the stored list: %v", err)
	}
	// Retired: NOT_FOUND naming the retirement, for every caller; the
	// default generator serves on.
	if _, err := defs.RetireDefinition(ctx(t), "orders", "replaced by orders2", time.Now()); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 7*time.Second; time.Sleep(50 * time.Millisecond) {
		if err = grpcCallGen(t, n.node.GRPCAddr(), billing, "orders"); status.Code(err) == codes.NotFound {
			break
		}
	}
	wantCode(t, "NextID of a retired generator", err, codes.NotFound, "retired", "replaced by orders2")
	wantInfo(t, "NextID of a retired generator", err, "NOT_FOUND", map[string]string{"generator": "orders"})
	if err := grpcCallGen(t, n.node.GRPCAddr(), shop, "default"); err != nil {
		t.Fatalf("the default generator after orders retired: %v", err)
	}
	code, body := httpGet(t, httpsClient(billing), "https://"+n.node.HTTPAddr()+"/v1/ids?generator=orders")
	if code != 404 || !strings.Contains(body, "retired") {
		t.Fatalf("GET /v1/ids of a retired generator: %d %s, want 404 naming the retirement", code, body)
	}
}

// grpcCallGen is grpcCall for generator gen.
func grpcCallGen(t *testing.T, addr string, tc *tls.Config, gen string) error {
	t.Helper()
	conn := dialGRPC(t, addr, tlsCreds(tc))
	defer conn.Close()
	_, err := firnv1.NewIDServiceClient(conn).NextID(ctx(t), &firnv1.NextIDRequest{Generator: gen})
	return err
}

// TestDefinitionDisagreementStopsStart: a node whose --generator names
// another definition than the coordinator stores for that name does not
// start (it would pin its own, and the generator would have two), naming
// both; one that names the stored definition starts.
func TestDefinitionDisagreementStopsStart(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	cfg, err := nodeConfig(generators("default=snowflake", "legacy=compact"))
	if err != nil {
		t.Fatal(err)
	}
	ec := etcd.DefaultConfig()
	ec.Endpoints, ec.Cluster, ec.Timing, ec.Clock = e.Endpoints, cfg.Cluster, cfg.Timing, clockguard.NewSystem()
	coord, err := etcd.New(ec)
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	if err := coord.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "legacy", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	node, err := server.New(cfg, coord, st, clockguard.NewSystem(), "disagrees")
	if err != nil {
		t.Fatal(err)
	}
	err = node.Start(context.Background())
	if err == nil {
		node.Shutdown(context.Background())
		t.Fatal("a node whose --generator legacy=compact disagrees with the stored legacy=snowflake started")
	}
	if !errors.Is(err, core.ErrConfig) || !strings.Contains(err.Error(), "legacy") || !strings.Contains(err.Error(), "snowflake") {
		t.Fatalf("start: %v, want a configuration error naming legacy and both definitions", err)
	}
	n := startNode(t, e.Endpoints, t.TempDir(), generators("default=snowflake", "legacy=snowflake"))
	waitServing(t, n.ids, "legacy", 15*time.Second)
}

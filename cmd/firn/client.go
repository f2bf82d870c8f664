package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/spf13/pflag"

	"github.com/firnid/firn/client"
	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/generator"
)

// dialFlags are the connection flags of the client commands (next,
// decode, info). Their node is --addr, else FIRN_ADDR, else the node the
// serve configuration names — FIRN_GRPC_ADDR, else grpc-addr in the
// --config file (a serve file: its other keys are ignored), a wildcard
// host read as loopback — else 127.0.0.1:7300; so on a node's host, with
// the node's environment or its file, they reach that node with no
// flags. TLS: --tls-ca (else FIRN_TLS_CA) verifies the node; without it,
// a node whose configuration (FIRN_TLS_CERT, tls-cert) serves TLS is
// dialled with TLS and trusted by that very certificate file.
type dialFlags struct {
	addr, ca, cert, key string
	timeout             time.Duration
	config              string
	// nodeCert is the certificate file the node's configuration serves
	// ("" when none, or when --tls-ca or --tls-cert is given).
	nodeCert string
}

// clientUsage is the help's text after a client command's usage line.
const clientUsage = `
The node is --addr, else FIRN_ADDR, else the gRPC address of the node that FIRN_GRPC_ADDR or the
--config file (the node's serve file) names, else 127.0.0.1:7300. With the node's TLS certificate
in FIRN_TLS_CERT or the file, and no --tls-ca, the node is trusted by that certificate.`

func (d *dialFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.addr, "addr", "", "node gRPC address (default: see above)")
	fs.StringVar(&d.config, "config", "", "the node's serve YAML file: its grpc-addr and tls-cert are read")
	fs.StringVar(&d.ca, "tls-ca", "", "CA of the node's certificate (turns on TLS; default FIRN_TLS_CA)")
	fs.StringVar(&d.cert, "tls-cert", "", "client certificate (mTLS)")
	fs.StringVar(&d.key, "tls-key", "", "client key (mTLS)")
	fs.DurationVar(&d.timeout, "timeout", 5*time.Second, "call timeout")
}

// parse parses args into fs, then fills what the flags left open from
// the environment (getenv) and the node's configuration (see dialFlags).
func (d *dialFlags) parse(fs *pflag.FlagSet, args []string, getenv func(string) string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if d.addr == "" {
		d.addr = getenv("FIRN_ADDR")
	}
	if d.ca == "" {
		d.ca = getenv("FIRN_TLS_CA")
	}
	// The node's own configuration, layered as serve layers it.
	sc := defaultServeConfig()
	var nodeArgs []string
	if d.config != "" {
		nodeArgs = []string{"--config", d.config}
	}
	if err := sc.parse(newServeFlagSet(&sc, io.Discard), nodeArgs, getenv); err != nil {
		return fmt.Errorf("the node's configuration: %w", err)
	}
	if d.addr == "" {
		d.addr = localAddr(sc.node.GRPCAddr)
	}
	if d.ca == "" && d.cert == "" && sc.tlsCert != "" {
		d.nodeCert = sc.tlsCert
		if sc.tlsClientCA != "" {
			return flagErr("tls-cert", "the node asks for a client certificate (its tls-client-ca is set): give --tls-cert, --tls-key and --tls-ca")
		}
	}
	return nil
}

// localAddr is a listen address as a client on the same host dials it:
// a wildcard host (0.0.0.0, ::, none) is loopback.
func localAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

func (d *dialFlags) tlsConfig() (*tls.Config, error) {
	if d.nodeCert != "" {
		return pinnedTLS(d.nodeCert)
	}
	if d.ca == "" && d.cert == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if d.ca != "" {
		pem, err := os.ReadFile(d.ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca: %s holds no PEM certificate", d.ca)
		}
		c.RootCAs = pool
	}
	if d.cert != "" {
		kp, err := tls.LoadX509KeyPair(d.cert, d.key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert: %w", err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}

// pinnedTLS trusts exactly the node certificate in file (its first PEM
// certificate, the one the node presents): the node's own configuration
// names it, so no CA and no name in it are needed.
func pinnedTLS(file string) (*tls.Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("the node's tls-cert: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("the node's tls-cert: %s holds no PEM certificate", file)
	}
	leaf := block.Bytes
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain and name checks are replaced by the pin below.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], leaf) {
				return fmt.Errorf("the node's certificate is not the one in %s (its tls-cert): give --tls-ca", file)
			}
			return nil
		},
	}, nil
}

func (d *dialFlags) dial() (firnv1.IDServiceClient, func(), error) {
	tc, err := d.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, fmt.Errorf("--addr %s: %w", d.addr, err)
	}
	return firnv1.NewIDServiceClient(conn), func() { conn.Close() }, nil
}

// rpcFail prints a gRPC error in one line with a meaningful exit code:
// exitNotReady only when the node answered that it does not serve (its
// refusal carries firn's ErrorInfo); a node that cannot be reached is a
// failure, not "not serving".
func rpcFail(stderr io.Writer, what, addr string, err error) int {
	st := status.Convert(err)
	code := exitFailure
	reason := client.Reason(err)
	switch {
	case st.Code() == codes.Unavailable && reason != firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		return fail(stderr, exitNotReady, "%s: not serving (%s): %s", what, reason, st.Message())
	case st.Code() == codes.Unavailable:
		return fail(stderr, exitFailure, "%s: cannot reach the node at %s: %s", what, addr, st.Message())
	case st.Code() == codes.InvalidArgument, st.Code() == codes.NotFound:
		code = exitUsage
	}
	return fail(stderr, code, "%s: %s: %s", what, st.Code(), st.Message())
}

func cmdNext(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("firn next", "Usage: firn next [-n N] [--generator G] [flags]\n\nGets IDs from a node, one a line.\n"+clientUsage, stdout)
	n := fs.IntP("count", "n", 1, "how many IDs")
	gen := fs.String("generator", "", "generator name (default: the node's default)")
	var d dialFlags
	d.register(fs)
	if err := d.parse(fs, args, os.Getenv); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "next: %v", err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, exitUsage, "next: %v", unexpectedArg(fs, 0))
	}
	if *n < 1 {
		return fail(stderr, exitUsage, "next: -n/--count %d must be at least 1", *n)
	}
	cli, closeFn, err := d.dial()
	if err != nil {
		return fail(stderr, exitUsage, "next: %v", err)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	if *n == 1 {
		resp, err := cli.NextID(ctx, &firnv1.NextIDRequest{Generator: *gen})
		if err != nil {
			return rpcFail(stderr, "next", d.addr, err)
		}
		fmt.Fprintln(stdout, resp.GetId())
		return exitOK
	}
	resp, err := cli.NextIDs(ctx, &firnv1.NextIDsRequest{Generator: *gen, Count: uint32(min(*n, 1<<31))})
	if err != nil {
		return rpcFail(stderr, "next", d.addr, err)
	}
	var b strings.Builder
	for _, id := range resp.GetIds() {
		b.WriteString(strconv.FormatUint(id, 10))
		b.WriteByte('\n')
	}
	io.WriteString(stdout, b.String())
	return exitOK
}

func cmdDecode(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("firn decode", "Usage: firn decode [--generator G | --layout L] [flags] ID\n\nSplits an ID into time, datacenter, worker and sequence: with --layout here, else asking the node.\n"+clientUsage, stdout)
	gen := fs.String("generator", "", "decode with this generator's layout, asking the node")
	layout := fs.String("layout", "", "decode locally with this layout (preset or canonical string)")
	var d dialFlags
	d.register(fs)
	if err := d.parse(fs, args, os.Getenv); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "decode: %v", err)
	}
	if fs.NArg() != 1 {
		return fail(stderr, exitUsage, "decode: want one ID argument (firn decode [--generator G | --layout L] ID)")
	}
	id, err := strconv.ParseUint(fs.Arg(0), 10, 64)
	if err != nil {
		return fail(stderr, exitUsage, "decode: %q is not a decimal 64-bit unsigned integer", fs.Arg(0))
	}
	if *layout != "" && *gen != "" {
		return fail(stderr, exitUsage, "decode: --layout and --generator exclude each other")
	}
	if *layout != "" {
		l, err := generator.ParseLayout(*layout)
		if err != nil {
			return fail(stderr, exitUsage, "decode: --layout: %v", err)
		}
		p, err := l.Decode(id)
		if err != nil {
			return fail(stderr, exitUsage, "decode: %v", err)
		}
		fmt.Fprintf(stdout, "time=%s datacenter=%d worker=%d sequence=%d\n", p.Time.UTC().Format(time.RFC3339Nano), p.Datacenter, p.Worker, p.Sequence)
		return exitOK
	}
	cli, closeFn, err := d.dial()
	if err != nil {
		return fail(stderr, exitUsage, "decode: %v", err)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	resp, err := cli.Decode(ctx, &firnv1.DecodeRequest{Generator: *gen, Id: id})
	if err != nil {
		return rpcFail(stderr, "decode", d.addr, err)
	}
	fmt.Fprintf(stdout, "time=%s datacenter=%d worker=%d sequence=%d\n",
		resp.GetTime().AsTime().UTC().Format(time.RFC3339Nano), resp.GetDatacenter(), resp.GetWorker(), resp.GetSequence())
	return exitOK
}

func cmdInfo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("firn info", "Usage: firn info [--json] [flags]\n\nDescribes a node and each of its generators: serving or not and why, workers, reservations, clock lead.\n"+clientUsage, stdout)
	asJSON := fs.Bool("json", false, "print JSON")
	var d dialFlags
	d.register(fs)
	if err := d.parse(fs, args, os.Getenv); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "info: %v", err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, exitUsage, "info: %v", unexpectedArg(fs, 0))
	}
	cli, closeFn, err := d.dial()
	if err != nil {
		return fail(stderr, exitUsage, "info: %v", err)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	resp, err := cli.Info(ctx, &firnv1.InfoRequest{})
	if err != nil {
		return rpcFail(stderr, "info", d.addr, err)
	}
	if *asJSON {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(resp)
		if err != nil {
			return fail(stderr, exitFailure, "info: %v", err)
		}
		fmt.Fprintln(stdout, string(b))
		return exitOK
	}
	fmt.Fprintf(stdout, "node %s (instance %s, version %s), cluster %s, coordinator %s\n",
		resp.GetNodeName(), resp.GetInstanceId(), resp.GetVersion(), resp.GetCluster(), resp.GetCoordinator())
	if u := resp.GetEmbeddedEtcdUrl(); u != "" {
		fmt.Fprintf(stdout, "embedded etcd: %s\n", u)
	}
	if c := resp.GetClockCheck(); c != "" {
		fmt.Fprintf(stdout, "clock check: %s\n", c)
	}
	for _, g := range resp.GetGenerators() {
		state := "SERVING"
		if !g.GetServing() {
			state = "NOT SERVING (" + g.GetCause() + "): " + g.GetReason()
		}
		pinned := ""
		if g.GetDatacenterFixed() {
			pinned = " (pinned)"
		}
		def := ""
		if g.GetIsDefault() {
			def = " (default)"
		}
		if g.GetKind() == "seq" {
			per := map[string]int{}
			unowned := 0
			for _, o := range g.GetSectionOwners() {
				if o.GetAddress() == "" {
					unowned++
					continue
				}
				per[fmt.Sprintf("%s (%s)", o.GetNode(), o.GetAddress())]++
			}
			owners := make([]string, 0, len(per))
			for k, v := range per {
				owners = append(owners, fmt.Sprintf("%s: %d", k, v))
			}
			sort.Strings(owners)
			fmt.Fprintf(stdout, "generator %s%s: %s\n  sequence %s\n  sections by owner: %s; without an owner: %d\n  keys in memory here %d, values issued %d\n",
				g.GetName(), def, state, g.GetLayout(), strings.Join(owners, ", "), unowned, g.GetSeqKeys(), g.GetIdsIssued())
			continue
		}
		if g.GetKind() == "segment" {
			fmt.Fprintf(stdout, "generator %s%s: %s\n  segment %s\n  counter next %d (as this node last wrote it), step %d, skipped %d, max batch %d, max range %d, issued %d\n",
				g.GetName(), def, state, g.GetLayout(), g.GetCounterNext(), g.GetSegmentStep(), g.GetSegmentSkipped(),
				g.GetMaxBatch(), g.GetMaxRange(), g.GetIdsIssued())
			continue
		}
		fmt.Fprintf(stdout, "generator %s%s: %s\n  layout %s\n  worker %d datacenter %d%s, reserved until %s, clock lead %s (max-lead %s), max batch %d, issued %d\n",
			g.GetName(), def, state, g.GetLayout(), g.GetWorker(), g.GetDatacenter(), pinned,
			g.GetReservedUntil().AsTime().UTC().Format(time.RFC3339Nano), g.GetClockLead().AsDuration(), g.GetMaxLead().AsDuration(),
			g.GetMaxBatch(), g.GetIdsIssued())
		if ws := g.GetWorkers(); len(ws) > 1 || g.GetWorkersWanted() > 1 {
			names := make([]string, len(ws))
			for i, w := range ws {
				names[i] = strconv.FormatUint(uint64(w), 10)
			}
			fmt.Fprintf(stdout, "  workers %d serving of %d wanted: %s; max range %d\n", len(ws), g.GetWorkersWanted(), strings.Join(names, ", "), g.GetMaxRange())
		}
		if g.GetNtpChecked() {
			fmt.Fprintf(stdout, "  NTP offset %s\n", g.GetNtpOffset().AsDuration())
		}
	}
	return exitOK
}

func cmdFault(args []string, stdout, stderr io.Writer) int {
	const faultUsage = "Usage: firn fault clock --offset D [--addr A]\n\nSets the injected clock offset of a node started with --enable-fault-injection (tests only)."
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
		fmt.Fprintln(stdout, faultUsage)
		return exitOK
	}
	if len(args) == 0 || args[0] != "clock" {
		return fail(stderr, exitUsage, "fault: want \"firn fault clock --addr ADDR --offset D\"")
	}
	fs := newFlagSet("firn fault clock", faultUsage, stdout)
	offset := fs.String("offset", "", "clock offset, a Go duration (absolute; 0 clears it)")
	addr := fs.String("addr", "127.0.0.1:7302", "the node's --fault-addr")
	if err := parseFlags(fs, args[1:]); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "fault clock: %v", err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, exitUsage, "fault clock: %v", unexpectedArg(fs, 0))
	}
	if _, err := time.ParseDuration(*offset); err != nil {
		return fail(stderr, exitUsage, "fault clock: --offset %q is not a Go duration (e.g. -5s)", *offset)
	}
	resp, err := http.PostForm("http://"+*addr+"/debug/fault/clock-offset", url.Values{"offset": {*offset}})
	if err != nil {
		return fail(stderr, exitFailure, "fault clock: %v (is the node running with --enable-fault-injection?)", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fail(stderr, exitFailure, "fault clock: %s: %s", resp.Status, body)
	}
	fmt.Fprintf(stdout, "%s", body)
	return exitOK
}

// Command gorunner is the Go client's conformance runner: it reads the
// commands of test/conformance/README.md, one JSON object per line, from
// standard input, carries each out with the client, and answers on
// standard output. The driver (TestConformance) builds and starts it.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"google.golang.org/grpc/status"

	"github.com/firnid/firn/client"
	firnv1 "github.com/firnid/firn/client/firnv1"
)

// command is every field any command carries.
type command struct {
	Op            string              `json:"op"`
	Endpoints     []string            `json:"endpoints"`
	Generator     string              `json:"generator"`
	TLS           *tlsFiles           `json:"tls"`
	Resolve       map[string][]string `json:"resolve"`
	CallTimeoutMS int64               `json:"call_timeout_ms"`
	MaxAgeMS      int64               `json:"max_age_ms"`
	Callers       int                 `json:"callers"`
	Calls         int                 `json:"calls"`
	ForMS         int64               `json:"for_ms"`
	PauseMS       int64               `json:"pause_ms"`
	DeadlineMS    int64               `json:"deadline_ms"`
	N             int                 `json:"n"`
	Key           *string             `json:"key"`
	KeyBase64     *string             `json:"key_base64"`
	Count         int                 `json:"count"`
	WaitMS        int64               `json:"wait_ms"`
	WarmMS        int64               `json:"warm_ms"`
}

type tlsFiles struct {
	CA   string `json:"ca"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

type callError struct {
	At      int    `json:"at"`
	Reason  string `json:"reason"`
	Code    string `json:"code"`
	RetryMS *int64 `json:"retry_ms"`
	Message string `json:"message"`
}

type callerResult struct {
	IDs    []string    `json:"ids"`
	Runs   [][2]string `json:"runs"`
	Errors []callError `json:"errors"`
}

type answer struct {
	OK           bool           `json:"ok"`
	IDs          *int64         `json:"ids,omitempty"`
	Errors       *int64         `json:"errors,omitempty"`
	Seconds      *float64       `json:"seconds,omitempty"`
	Error        string         `json:"error,omitempty"`
	Callers      []callerResult `json:"callers,omitempty"`
	CloseMS      *int64         `json:"close_ms,omitempty"`
	Failovers    *uint64        `json:"failovers,omitempty"`
	SeqRedirects *uint64        `json:"seq_redirects,omitempty"`
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r := &runner{log: log}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		var cmd command
		var a answer
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			a = answer{Error: fmt.Sprintf("bad command: %v", err)}
		} else {
			a = r.do(cmd)
		}
		b, _ := json.Marshal(a)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	if err := in.Err(); err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(os.Stderr, "gorunner:", err)
		os.Exit(1)
	}
	r.close()
}

type runner struct {
	log *slog.Logger
	c   *client.Client
}

func (r *runner) close() {
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
}

func (r *runner) do(cmd command) answer {
	switch cmd.Op {
	case "open":
		r.close()
		opts := []client.Option{client.WithLogger(r.log), client.WithGenerator(cmd.Generator)}
		if cmd.TLS != nil {
			cfg, err := client.LoadTLS(cmd.TLS.CA, cmd.TLS.Cert, cmd.TLS.Key, "")
			if err != nil {
				return answer{Error: err.Error()}
			}
			opts = append(opts, client.WithTLS(cfg))
		}
		if cmd.Resolve != nil {
			names := cmd.Resolve
			opts = append(opts, client.WithLookup(func(_ context.Context, host string) ([]string, error) {
				if a, ok := names[host]; ok {
					return a, nil
				}
				return nil, fmt.Errorf("gorunner: no addresses for %q", host)
			}))
		}
		if cmd.CallTimeoutMS > 0 {
			opts = append(opts, client.WithCallTimeout(ms(cmd.CallTimeoutMS)))
		}
		if cmd.MaxAgeMS > 0 {
			opts = append(opts, client.WithMaxAge(ms(cmd.MaxAgeMS)))
		}
		c, err := client.New(cmd.Endpoints, opts...)
		if err != nil {
			return answer{Error: err.Error()}
		}
		r.c = c
		return answer{OK: true}
	case "close":
		r.close()
		return answer{OK: true}
	case "stats":
		if r.c == nil {
			return answer{Error: "no client open"}
		}
		s := r.c.Stats()
		return answer{OK: true, Failovers: &s.Failovers, SeqRedirects: &s.SeqRedirects}
	case "close_while_waiting":
		return r.closeWhileWaiting(cmd)
	case "bench":
		if r.c == nil {
			return answer{Error: "no client open"}
		}
		return r.bench(cmd)
	case "next", "next_n", "next_range", "next_seq", "current_seq":
		if r.c == nil {
			return answer{Error: "no client open"}
		}
		call, err := r.call(cmd)
		if err != nil {
			return answer{Error: err.Error()}
		}
		return answer{OK: true, Callers: callers(cmd, call)}
	}
	return answer{Error: fmt.Sprintf("unknown op %q", cmd.Op)}
}

// call is one client call of a command: it adds what it got to res.
type call func(ctx context.Context, res *callerResult) error

func (r *runner) call(cmd command) (call, error) {
	c := r.c
	key := []byte(nil)
	switch {
	case cmd.KeyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*cmd.KeyBase64)
		if err != nil {
			return nil, fmt.Errorf("key_base64: %v", err)
		}
		key = b
	case cmd.Key != nil:
		key = []byte(*cmd.Key)
	}
	switch cmd.Op {
	case "next":
		return func(ctx context.Context, res *callerResult) error {
			id, err := c.Next(ctx)
			if err == nil {
				res.IDs = append(res.IDs, dec(id))
			}
			return err
		}, nil
	case "next_n":
		return func(ctx context.Context, res *callerResult) error {
			ids, err := c.NextN(ctx, cmd.N)
			for _, id := range ids {
				res.IDs = append(res.IDs, dec(id))
			}
			return err
		}, nil
	case "next_range":
		return func(ctx context.Context, res *callerResult) error {
			runs, err := c.NextRange(ctx, uint64(cmd.N))
			for _, run := range runs {
				res.Runs = append(res.Runs, [2]string{dec(run.First), dec(run.Count)})
			}
			return err
		}, nil
	case "next_seq":
		return func(ctx context.Context, res *callerResult) error {
			first, err := c.NextSeq(ctx, key, cmd.Count)
			if err == nil {
				res.Runs = append(res.Runs, [2]string{dec(first), strconv.Itoa(cmd.Count)})
			}
			return err
		}, nil
	default: // current_seq
		return func(ctx context.Context, res *callerResult) error {
			v, err := c.CurrentSeq(ctx, key)
			if err == nil {
				res.Runs = append(res.Runs, [2]string{dec(v), "0"})
			}
			return err
		}, nil
	}
}

// callers runs cmd.Callers callers of f, each making cmd.Calls calls or
// calling for cmd.ForMS.
func callers(cmd command, f call) []callerResult {
	start := time.Now()
	out := make([]callerResult, max(cmd.Callers, 1))
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func(res *callerResult) {
			defer wg.Done()
			res.IDs, res.Runs, res.Errors = []string{}, [][2]string{}, []callError{}
			for at := 0; ; at++ {
				if cmd.ForMS > 0 {
					if time.Since(start) >= ms(cmd.ForMS) {
						return
					}
				} else if at >= cmd.Calls {
					return
				}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if cmd.DeadlineMS > 0 {
					ctx, cancel = context.WithTimeout(ctx, ms(cmd.DeadlineMS))
				}
				err := f(ctx, res)
				cancel()
				if err != nil {
					res.Errors = append(res.Errors, describe(at, err))
				}
				if cmd.PauseMS > 0 {
					time.Sleep(ms(cmd.PauseMS))
				}
			}
		}(&out[i])
	}
	wg.Wait()
	return out
}

func (r *runner) closeWhileWaiting(cmd command) answer {
	if r.c == nil {
		return answer{Error: "no client open"}
	}
	c := r.c
	next, err := r.call(command{Op: "next"})
	if err != nil {
		return answer{Error: err.Error()}
	}
	// Each caller makes one Next call, begun before the close.
	done := make(chan []callerResult, 1)
	go func() { done <- callers(command{Callers: cmd.Callers, Calls: 1, DeadlineMS: cmd.DeadlineMS}, next) }()
	time.Sleep(ms(cmd.WaitMS))
	start := time.Now()
	c.Close()
	out := <-done
	took := time.Since(start).Milliseconds()
	r.c = nil
	return answer{OK: true, Callers: out, CloseMS: &took}
}

// bench counts the IDs cmd.Callers callers get from Next in cmd.ForMS,
// after cmd.WarmMS of the same uncounted.
func (r *runner) bench(cmd command) answer {
	c := r.c
	var ids, errs atomic.Int64
	var counting atomic.Bool
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range max(cmd.Callers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			var n, e int64
			for {
				select {
				case <-stop:
					ids.Add(n)
					errs.Add(e)
					return
				default:
				}
				// Count in batches of 1024 between looks at stop.
				for range 1024 {
					if _, err := c.Next(ctx); err != nil {
						e++
					} else if counting.Load() {
						n++
					}
				}
			}
		}()
	}
	time.Sleep(ms(cmd.WarmMS))
	counting.Store(true)
	start := time.Now()
	time.Sleep(ms(cmd.ForMS))
	counting.Store(false)
	secs := time.Since(start).Seconds()
	close(stop)
	wg.Wait()
	n, e := ids.Load(), errs.Load()
	return answer{OK: true, IDs: &n, Errors: &e, Seconds: &secs}
}

// describe reports a failed call as the protocol's error object.
func describe(at int, err error) callError {
	e := callError{At: at, Message: err.Error()}
	if reason := client.Reason(err); reason != firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		e.Reason = reason.String()
	} else {
		switch {
		case errors.Is(err, client.ErrClosed):
			e.Reason = "CLOSED"
		case errors.Is(err, client.ErrInvalidCount), errors.Is(err, client.ErrInvalidKey):
			e.Reason = "INVALID_ARGUMENT"
		case errors.Is(err, context.DeadlineExceeded):
			e.Reason = "DEADLINE"
		case errors.Is(err, client.ErrUnavailable):
			e.Reason = "UNAVAILABLE"
		default:
			e.Reason = "ERROR_REASON_UNSPECIFIED"
		}
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		e.Code = codeName(se.GRPCStatus().Code().String())
	}
	if d, ok := client.RetryAfter(err); ok {
		v := d.Milliseconds()
		e.RetryMS = &v
	}
	return e
}

// codeName writes a gRPC code as the protocol does: "ResourceExhausted"
// becomes "RESOURCE_EXHAUSTED".
func codeName(s string) string {
	if s == "OK" {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

func dec(v uint64) string { return strconv.FormatUint(v, 10) }

package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/firnid/firn/client"
	"github.com/firnid/firn/client/clienttest"
	firnv1 "github.com/firnid/firn/client/firnv1"
)

// One ID at a time: Next hands IDs out of a local buffer that the client
// refills in the background, so most calls never reach the network. The
// node here is clienttest's stand-in, whose first ID is 1000; give New
// the addresses of your firn nodes instead.
func ExampleClient_Next() {
	node := clienttest.NewServer(1000, nil)
	defer node.Close()

	c, err := client.New([]string{node.Addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		id, err := c.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(id)
	}
	// Output:
	// 1000
	// 1001
	// 1002
}

// Several IDs in one call: NextN returns exactly n distinct IDs, in
// increasing order.
func ExampleClient_NextN() {
	node := clienttest.NewServer(1000, nil)
	defer node.Close()

	c, err := client.New([]string{node.Addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ids, err := c.NextN(ctx, 4)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids)
	// Output: [1000 1001 1002 1003]
}

// Many IDs in one call: NextRange returns them as increasing runs of
// consecutive IDs. The stand-in node here, like a real one, ends a run
// where its IDs jump (a real node at a new millisecond); it issues runs of
// 4096 IDs with 4096 skipped after each.
func ExampleClient_NextRange() {
	node := clienttest.NewServer(1000, nil)
	defer node.Close()
	node.SetRuns(4096, 4096)

	c, err := client.New([]string{node.Addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	runs, err := c.NextRange(ctx, 10_000)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range runs {
		fmt.Println(r.First, r.Count)
	}
	// Output:
	// 1000 4096
	// 9192 4096
	// 17384 1808
}

// Failover: of the endpoints given, the client uses one at a time and
// moves on when it refuses (here the first has lost its worker lease),
// without the caller seeing an error.
func Example_failover() {
	a := clienttest.NewServer(1<<40, nil)
	defer a.Close()
	b := clienttest.NewServer(2<<40, nil)
	defer b.Close()
	a.Refuse(firnv1.ErrorReason_LEASE_LOST, "generator \"default\" not serving: lease lost", 0)

	c, err := client.New([]string{a.Addr, b.Addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id, err := c.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id == 2<<40, c.Stats().Endpoint == b.Addr)
	// Output: true true
}

// Decode splits an ID into its fields under the node's layout.
func ExampleClient_Decode() {
	node := clienttest.NewServer(1, nil)
	defer node.Close()

	c, err := client.New([]string{node.Addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id := uint64(1500)<<22 | 5<<12 | 7 // 1.5 s after the epoch, worker 5, sequence 7
	d, err := c.Decode(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.GetTime().AsTime().Sub(clienttest.Epoch), d.GetWorker(), d.GetSequence())
	// Output: 1.5s 5 7
}

// A refusal a program can read: when no endpoint serves, the error
// carries the node's reason (a fixed list, firnv1.ErrorReason) and, when
// the node knew it, how long to wait.
func ExampleReason() {
	node := clienttest.NewServer(1, nil)
	defer node.Close()
	node.Refuse(firnv1.ErrorReason_STARTING, "generator \"default\" not serving: waiting 2s for the clock", 2*time.Second)

	c, err := client.New([]string{node.Addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Next(ctx)
	switch client.Reason(err) {
	case firnv1.ErrorReason_STARTING, firnv1.ErrorReason_DRAINING, firnv1.ErrorReason_LEASE_LOST:
		wait, _ := client.RetryAfter(err)
		fmt.Println("transient; retry in", wait)
	case firnv1.ErrorReason_RESTORE_DETECTED:
		fmt.Println("needs an operator")
	default:
		fmt.Println("other:", err)
	}
	// Output: transient; retry in 2s
}

// mTLS: the CA of the nodes' certificates and the client's own pair, from
// PEM files; LoadTLS's errors name the file at fault.
func ExampleLoadTLS() {
	cfg, err := client.LoadTLS("/etc/firn/ca.pem", "/etc/firn/client.pem", "/etc/firn/client-key.pem", "")
	if err != nil {
		// Here the files are missing: the error names the one at fault.
		fmt.Println(err)
		return
	}
	c, err := client.New([]string{"firn-0:7300"}, client.WithTLS(cfg))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// Output: client: TLS CA: open /etc/firn/ca.pem: no such file or directory
}

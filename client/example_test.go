package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/firnid/firn/client"
)

// A client of two nodes: IDs come from the local buffer, and a node that
// stops serving is left for the other one.
func ExampleNew() {
	c, err := client.New([]string{"127.0.0.1:7300", "127.0.0.1:7400"},
		client.WithMaxAge(100*time.Millisecond))
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
	ids, err := c.NextN(ctx, 100)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id, len(ids))
}

// mTLS: the CA of the nodes' certificates and the client's own pair.
func ExampleLoadTLS() {
	cfg, err := client.LoadTLS("ca.pem", "client.pem", "client-key.pem", "")
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New([]string{"127.0.0.1:7300"}, client.WithTLS(cfg))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// Command im is the messaging design firn came from, as a small program
// against a firn node: the client names each message with a UUID before it
// sends it (clientMsgId, for the acknowledgement and for retries), the
// server takes message IDs from firn's "msg" generator (snowflake layout:
// millisecond time on top, so IDs sort by time) and user IDs from its
// "user" generator (the compact layout: 42-bit IDs, short enough for URLs),
// keys a one-to-one chat by its two user IDs (smaller first), numbers each
// message of a chat from the chat's own sequence (firn's "chats" sequence
// generator: strictly increasing per chat, so a device that saw a chat up
// to seq n asks for everything after n, and a gap it notices is only ever
// a jump, never a lost message), drops a retried message it already
// stored (same clientMsgId, same message ID and seq in the
// acknowledgement), and pages a conversation by message ID.
//
// Run a node with the three generators, then the program:
//
//	firn serve --generator msg=snowflake --generator user=compact --generator chats=seq
//	go run ./examples/im --addr 127.0.0.1:7300
//
// The store is in memory: the program shows the use of the IDs, not a
// database.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/firnid/firn/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7300", "a firn node running the msg, user and chats generators")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, []string{*addr}, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// A User is one account; its ID comes from the user generator.
type User struct {
	ID   uint64
	Name string
}

// A Message is one stored message.
type Message struct {
	ID          uint64 // from the msg generator: sorts by time
	Seq         uint64 // from the chat's sequence: strictly increasing within the chat
	ClientMsgID string // the sender's UUID, for dedup and the ack
	Chat        string
	From, To    uint64
	Text        string
}

// ChatID keys the conversation of two users, whichever of them writes:
// the smaller user ID first.
func ChatID(a, b uint64) string {
	return fmt.Sprintf("%d:%d", min(a, b), max(a, b))
}

// Server is the message server: it takes IDs from firn and stores
// messages by chat, in message-ID order.
type Server struct {
	msgs, users, seqs *client.Client

	mu     sync.Mutex
	sent   map[string]Message   // clientMsgId → the message stored for it
	chats  map[string][]Message // by chat, increasing message ID
	bySeq  map[string][]Message // by chat, increasing seq
	people map[uint64]User
}

// NewServer uses the firn nodes at endpoints.
func NewServer(endpoints []string) (*Server, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	msgs, err := client.New(endpoints, client.WithGenerator("msg"), client.WithLogger(quiet))
	if err != nil {
		return nil, err
	}
	users, err := client.New(endpoints, client.WithGenerator("user"), client.WithLogger(quiet))
	if err != nil {
		msgs.Close()
		return nil, err
	}
	// Sequence calls go to the node owning the chat's section: the
	// client learns which from the nodes (one endpoint is enough).
	seqs, err := client.New(endpoints, client.WithGenerator("chats"), client.WithLogger(quiet))
	if err != nil {
		msgs.Close()
		users.Close()
		return nil, err
	}
	return &Server{msgs: msgs, users: users, seqs: seqs, sent: map[string]Message{}, chats: map[string][]Message{},
		bySeq: map[string][]Message{}, people: map[uint64]User{}}, nil
}

// Close releases the firn clients.
func (s *Server) Close() {
	s.msgs.Close()
	s.users.Close()
	s.seqs.Close()
}

// Register creates a user with an ID from the user generator.
func (s *Server) Register(ctx context.Context, name string) (User, error) {
	id, err := s.users.Next(ctx)
	if err != nil {
		return User{}, fmt.Errorf("register %s: %w", name, err)
	}
	u := User{ID: id, Name: name}
	s.mu.Lock()
	s.people[id] = u
	s.mu.Unlock()
	return u, nil
}

// ErrUnknownUser is returned for a message to or from nobody.
var ErrUnknownUser = errors.New("im: unknown user")

// Send stores a message and returns it (the acknowledgement carries its
// ID and the sender's clientMsgId). A retry with a clientMsgId already
// stored returns the stored message, and dup is true: nothing is stored
// twice, and the sender learns the same message ID.
func (s *Server) Send(ctx context.Context, from, to uint64, clientMsgID, text string) (m Message, dup bool, err error) {
	s.mu.Lock()
	if m, ok := s.sent[clientMsgID]; ok {
		s.mu.Unlock()
		return m, true, nil
	}
	_, okFrom := s.people[from]
	_, okTo := s.people[to]
	s.mu.Unlock()
	if !okFrom || !okTo {
		return Message{}, false, ErrUnknownUser
	}
	id, err := s.msgs.Next(ctx)
	if err != nil {
		return Message{}, false, fmt.Errorf("message ID: %w", err)
	}
	chat := ChatID(from, to)
	seq, err := s.seqs.NextSeq(ctx, []byte(chat), 1)
	if err != nil {
		return Message{}, false, fmt.Errorf("chat seq: %w", err)
	}
	m = Message{ID: id, Seq: seq, ClientMsgID: clientMsgID, Chat: chat, From: from, To: to, Text: text}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.sent[clientMsgID]; ok { // a retry raced this one: keep the first
		return prev, true, nil
	}
	s.sent[clientMsgID] = m
	// IDs from several nodes are sorted by time only within firn's bound
	// (k-sorted), so insert in place rather than append.
	msgs := s.chats[m.Chat]
	i := sort.Search(len(msgs), func(i int) bool { return msgs[i].ID > m.ID })
	s.chats[m.Chat] = slices.Insert(msgs, i, m)
	// Two sends of one chat may store in either order; their seqs are in
	// the order firn handed them out.
	bs := s.bySeq[m.Chat]
	j := sort.Search(len(bs), func(i int) bool { return bs[i].Seq > m.Seq })
	s.bySeq[m.Chat] = slices.Insert(bs, j, m)
	return m, false, nil
}

// After returns the chat's messages whose seq is above after, oldest
// first: a device's sync from the last seq it saw. A message stored
// later always has a larger seq than every message stored before its
// send began, so a device that synced up to n and asks again from n
// misses nothing that was stored when it asked.
func (s *Server) After(chat string, after uint64) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := s.bySeq[chat]
	i := sort.Search(len(bs), func(i int) bool { return bs[i].Seq > after })
	return slices.Clone(bs[i:])
}

// Page returns up to limit messages of the chat older than before (0:
// from the newest), newest first: the next page starts before the last ID
// returned.
func (s *Server) Page(chat string, before uint64, limit int) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	msgs := s.chats[chat]
	end := len(msgs)
	if before != 0 {
		end = sort.Search(len(msgs), func(i int) bool { return msgs[i].ID >= before })
	}
	var out []Message
	for i := end - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, msgs[i])
	}
	return out
}

// newUUID is a random (version 4) UUID: the sender's name for a message,
// made before the first attempt to send it.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Sender is one user's client side: it names each message before sending
// and resends with the same name until it gets an acknowledgement.
type Sender struct {
	srv  *Server
	user User
	// lose, when set, drops the acknowledgement of the attempt it returns
	// true for (a lost reply, for the demonstration).
	lose func(attempt int) bool
}

// Send sends text to the user to and returns the acknowledged message.
func (c *Sender) Send(ctx context.Context, to uint64, text string) (Message, int, error) {
	id := newUUID()
	for attempt := 1; ; attempt++ {
		m, _, err := c.srv.Send(ctx, c.user.ID, to, id, text)
		if err != nil {
			return Message{}, attempt, err
		}
		if c.lose != nil && c.lose(attempt) {
			continue // the ack was lost: send again, same clientMsgId
		}
		return m, attempt, nil
	}
}

// run plays a short conversation and prints what happens.
func run(ctx context.Context, endpoints []string, out io.Writer) error {
	srv, err := NewServer(endpoints)
	if err != nil {
		return err
	}
	defer srv.Close()
	alice, err := srv.Register(ctx, "alice")
	if err != nil {
		return err
	}
	bob, err := srv.Register(ctx, "bob")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "users: alice=%d bob=%d\n", alice.ID, bob.ID)
	fmt.Fprintf(out, "chat: %s (the same from either side: %v)\n", ChatID(alice.ID, bob.ID), ChatID(alice.ID, bob.ID) == ChatID(bob.ID, alice.ID))

	a := &Sender{srv: srv, user: alice, lose: func(attempt int) bool { return attempt == 1 }}
	b := &Sender{srv: srv, user: bob}
	m, attempts, err := a.Send(ctx, bob.ID, "hello bob")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "alice → bob %q: message %d after %d attempts (the first ack was lost), stored once: %v\n",
		m.Text, m.ID, attempts, len(srv.Page(m.Chat, 0, 100)) == 1)
	for i := 1; i <= 4; i++ {
		from := a
		to := bob.ID
		if i%2 == 1 {
			from, to = b, alice.ID
		}
		if _, _, err := from.Send(ctx, to, fmt.Sprintf("message %d", i)); err != nil {
			return err
		}
	}
	chat := ChatID(alice.ID, bob.ID)
	all := srv.After(chat, 0)
	fmt.Fprintf(out, "chat seqs:")
	for _, m := range all {
		fmt.Fprintf(out, " %d", m.Seq)
	}
	fmt.Fprintln(out)
	// Bob's phone saw the chat up to the third message; it syncs the rest.
	seen := all[2].Seq
	fmt.Fprintf(out, "sync after seq %d:", seen)
	for _, m := range srv.After(chat, seen) {
		fmt.Fprintf(out, " %q", m.Text)
	}
	fmt.Fprintln(out)
	page1 := srv.Page(chat, 0, 3)
	page2 := srv.Page(chat, page1[len(page1)-1].ID, 3)
	for n, page := range [][]Message{page1, page2} {
		fmt.Fprintf(out, "page %d:", n+1)
		for _, m := range page {
			fmt.Fprintf(out, " %q", m.Text)
		}
		fmt.Fprintln(out)
	}
	return nil
}

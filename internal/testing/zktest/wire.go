package zktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ZooKeeper request opcodes the fault tools match on.
const (
	OpCreate       int32 = 1
	OpDelete       int32 = 2
	OpExists       int32 = 3
	OpGetData      int32 = 4
	OpSetData      int32 = 5
	OpPing         int32 = 11
	OpGetChildren2 int32 = 12
	OpMulti        int32 = 14
	OpCloseSession int32 = -11
)

// maxFrame bounds a frame the tools will read (ZooKeeper's own jute
// limit is 1 MiB by default).
const maxFrame = 16 << 20

// readFrame reads one length-prefixed frame and returns it whole (prefix
// included).
func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("zktest: frame of %d bytes", n)
	}
	buf := make([]byte, 4+n)
	copy(buf, hdr[:])
	if _, err := io.ReadFull(r, buf[4:]); err != nil {
		return nil, err
	}
	return buf, nil
}

// connectResponse is the server's handshake answer.
type connectResponse struct {
	Timeout   time.Duration
	SessionID int64
	Passwd    []byte
}

// parseConnectResponse decodes a handshake answer (frame with prefix):
// protocolVersion int32, timeOut int32, sessionId int64, passwd buffer.
func parseConnectResponse(f []byte) (connectResponse, error) {
	b := f[4:]
	if len(b) < 4+4+8+4 {
		return connectResponse{}, errors.New("zktest: short connect response")
	}
	to := int32(binary.BigEndian.Uint32(b[4:8]))
	id := int64(binary.BigEndian.Uint64(b[8:16]))
	pl := int32(binary.BigEndian.Uint32(b[16:20]))
	if pl < 0 || int(pl) > len(b)-20 {
		return connectResponse{}, errors.New("zktest: bad password length in connect response")
	}
	pw := append([]byte(nil), b[20:20+pl]...)
	return connectResponse{Timeout: time.Duration(to) * time.Millisecond, SessionID: id, Passwd: pw}, nil
}

// Session is a client session's credentials as seen in its handshake.
type Session struct {
	ID      int64
	Passwd  []byte
	Timeout time.Duration // negotiated
	Server  string        // address the handshake went to
}

// Recorder is a dialer (its Dial method has the shape of go-zookeeper's
// zk.Dialer) that learns the session a client holds from each handshake
// answer, so that a test can end that session from outside
// (ExpireSession).
type Recorder struct {
	mu   sync.Mutex
	last Session
	ok   bool
	all  map[int64]Session
}

// Dial dials address and watches the connection's first frame.
func (r *Recorder) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, onConnect: func(cr connectResponse) {
		if cr.SessionID == 0 {
			return // the server refused: expired
		}
		r.mu.Lock()
		r.last = Session{ID: cr.SessionID, Passwd: cr.Passwd, Timeout: cr.Timeout, Server: address}
		r.ok = true
		if r.all == nil {
			r.all = map[int64]Session{}
		}
		r.all[cr.SessionID] = r.last
		r.mu.Unlock()
	}}, nil
}

// Session returns the most recent session established through Dial.
func (r *Recorder) Session() (Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.last
	s.Passwd = append([]byte(nil), s.Passwd...)
	return s, r.ok
}

// Lookup returns the credentials of session id if a handshake through Dial
// established it.
func (r *Recorder) Lookup(id int64) (Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.all[id]
	s.Passwd = append([]byte(nil), s.Passwd...)
	return s, ok
}

// sniffConn copies the bytes of the first frame read and decodes it once
// complete; everything passes through unchanged.
type sniffConn struct {
	net.Conn
	onConnect func(connectResponse)
	buf       []byte
	done      bool
}

func (s *sniffConn) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	if !s.done && n > 0 {
		s.buf = append(s.buf, p[:n]...)
		if len(s.buf) >= 4 {
			want := 4 + int(binary.BigEndian.Uint32(s.buf[:4]))
			if want > maxFrame {
				s.done = true
			} else if len(s.buf) >= want {
				s.done = true
				if cr, perr := parseConnectResponse(s.buf[:want]); perr == nil {
					s.onConnect(cr)
				}
				s.buf = nil
			}
		}
	}
	return n, err
}

// ExpireSession ends session s from outside: it attaches a second
// connection to the session with its credentials and closes the session
// there. The server then deletes the session's ephemeral nodes at once, and
// the original client, on its next reconnect, is told the session expired —
// what a real expiry looks like to it. A session that is already gone is
// not an error.
func ExpireSession(addr string, s Session, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	// connect request: protocolVersion, lastZxidSeen, timeOut, sessionId,
	// passwd buffer, readOnly.
	to := s.Timeout
	if to <= 0 {
		to = 4 * time.Second
	}
	body := make([]byte, 0, 64)
	body = binary.BigEndian.AppendUint32(body, 0)
	body = binary.BigEndian.AppendUint64(body, 0)
	body = binary.BigEndian.AppendUint32(body, uint32(to.Milliseconds()))
	body = binary.BigEndian.AppendUint64(body, uint64(s.ID))
	body = binary.BigEndian.AppendUint32(body, uint32(len(s.Passwd)))
	body = append(body, s.Passwd...)
	body = append(body, 0)
	if err := writeFrame(c, body); err != nil {
		return err
	}
	f, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("zktest: expire session %#x: handshake: %w", s.ID, err)
	}
	cr, err := parseConnectResponse(f)
	if err != nil {
		return err
	}
	if cr.SessionID == 0 {
		return nil // already expired
	}
	if cr.SessionID != s.ID {
		return fmt.Errorf("zktest: expire session %#x: server attached session %#x", s.ID, cr.SessionID)
	}
	req := binary.BigEndian.AppendUint32(nil, 1)
	op := OpCloseSession
	req = binary.BigEndian.AppendUint32(req, uint32(op))
	if err := writeFrame(c, req); err != nil {
		return err
	}
	for {
		f, err := readFrame(c)
		if err != nil {
			return fmt.Errorf("zktest: expire session %#x: close: %w", s.ID, err)
		}
		if len(f) < 4+16 {
			continue
		}
		xid := int32(binary.BigEndian.Uint32(f[4:8]))
		if xid != 1 {
			continue // a watch notification or ping
		}
		if code := int32(binary.BigEndian.Uint32(f[16:20])); code != 0 {
			return fmt.Errorf("zktest: expire session %#x: close answered error %d", s.ID, code)
		}
		return nil
	}
}

func writeFrame(w io.Writer, body []byte) error {
	f := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	f = append(f, body...)
	_, err := w.Write(f)
	return err
}

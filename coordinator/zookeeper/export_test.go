package zookeeper

import "github.com/firnid/firn/coordinator"

// SetAfterRead installs a hook that runs in Acquire after a candidate's
// reservation was read and before the acquiring multi is sent.
func SetAfterRead(c *Coordinator, f func(coordinator.Slot)) { c.afterRead = f }

// SetAfterTake installs a hook that runs in Acquire after the acquiring
// multi went through and before the lease is tracked.
func SetAfterTake(c *Coordinator, f func(coordinator.Slot)) { c.afterTake = f }

// SetAfterNoNode installs a hook that runs in Peers' watches after a
// listing found path absent and before the watch for its creation is set.
func SetAfterNoNode(c *Coordinator, f func(path string)) { c.afterNoNode = f }

// ParseValue and EncodeValue are the stored form of a number.
var (
	ParseValue  = parseValue
	EncodeValue = encodeValue
)

// GiveUpClient gives the current client and its session up as redial does
// once the servers have refused the client for a session timeout: no
// close reaches the servers, which keep the session (and its owner nodes)
// until it times out there. It returns once the new client has a session.
func GiveUpClient(c *Coordinator) {
	c.mu.Lock()
	g := c.gate
	c.redialing = true
	c.mu.Unlock()
	c.redial(g, 2, c.SessionTimeout())
}

package zookeeper

import "github.com/firnid/firn/coordinator"

// SetAfterRead installs a hook that runs in Acquire after a candidate's
// reservation was read and before the acquiring multi is sent.
func SetAfterRead(c *Coordinator, f func(coordinator.Slot)) { c.afterRead = f }

// SetAfterNoNode installs a hook that runs in Peers' watches after a
// listing found path absent and before the watch for its creation is set.
func SetAfterNoNode(c *Coordinator, f func(path string)) { c.afterNoNode = f }

// ParseValue and EncodeValue are the stored form of a number.
var (
	ParseValue  = parseValue
	EncodeValue = encodeValue
)

// Package install holds the tests of how firn reaches its users: the node
// installed with `go install github.com/firnid/firn/cmd/firn@VERSION` from
// a module proxy, outside any clone.
package install

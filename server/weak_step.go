//go:build firn_weakstep

package server

// firn_weakstep: the clock policy absorbs a backward step beyond max-lead.
const weakStep = true

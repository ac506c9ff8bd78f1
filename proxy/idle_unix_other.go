//go:build unix && !linux

package proxy

// pollRDHUP is Linux's; elsewhere poll cannot tell a peer's close from
// bytes waiting.
const pollRDHUP = 0

//go:build !unix

package proxy

// readable is unknown without poll: an idle connection is trusted, and
// bytes an upstream sends on it unasked are noticed only after an answer
// (closeUpstream) or not at all.
func readable(int) bool { return false }

//go:build !unix

package proxy

// idleLook cannot look without poll: an idle connection is trusted, and
// bytes an upstream sends on it unasked are noticed only after an answer
// (closeUpstream), or not at all.
func idleLook(int) (ready, closed bool) { return false, false }

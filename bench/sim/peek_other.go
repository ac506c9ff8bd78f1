//go:build !unix

package sim

import "net"

// peekable returns nil: without MSG_PEEK a silent request notices a
// disconnect only when it next writes.
func peekable(net.Conn) net.Conn { return nil }

func connGone(net.Conn) bool { return false }

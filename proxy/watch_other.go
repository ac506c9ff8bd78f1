//go:build !linux

package proxy

import "errors"

// poller is not available on this platform: client disconnects are noticed
// at the next write to the client.
type poller struct{}

func newPoller(func(fd int)) *poller { return nil }
func (p *poller) add(int) error      { return errNoPoller }
func (p *poller) rearm(int) error    { return errNoPoller }
func (p *poller) close()             {}
func peerClosed(int) bool            { return false }

var errNoPoller = errors.New("no poller on this platform")

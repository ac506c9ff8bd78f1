package main

import (
	"net"
	"net/netip"

	"github.com/sluicehq/sluice/config"
)

// warnings lists what is valid in cfg but probably not what its operator
// wants. serve logs them at start and validate prints them.
func warnings(cfg *config.Config) []string {
	out := append([]string(nil), cfg.Warnings...)
	if a := cfg.Admin; a.Listen != config.AdminOff && !a.Token.IsSet() && !isLoopback(a.Listen) {
		out = append(out, "admin.listen "+a.Listen+" is not a loopback address and admin.token_env is not set: /metrics and /admin/status are readable by anyone who can reach it")
	}
	return out
}

// isLoopback reports whether a listen address binds to loopback only:
// localhost or a loopback IP. An empty host (":9090") binds everywhere.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

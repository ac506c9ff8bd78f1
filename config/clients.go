package config

import (
	"fmt"
	"slices"
)

// clients checks the clients: block: its own problems, then the names it
// shares with the providers: every provider a policy names exists, and
// every max_class is a class of each provider the client may reach.
func (v *validator) clients(c *Config) {
	cl := &c.Clients
	v.problems("clients", cl.Problems())
	check := func(path string, maxClass string, providers []string) {
		for i, name := range providers {
			if !slices.ContainsFunc(c.Providers, func(p Provider) bool { return p.Name == name }) {
				v.add(fmt.Sprintf("%s.providers[%d]", path, i), "no provider is called %q", name)
			}
		}
		if maxClass == "" {
			return
		}
		for _, p := range c.Providers {
			if len(providers) > 0 && !slices.Contains(providers, p.Name) {
				continue
			}
			if p.Queue.ClassID(maxClass) == 0 {
				v.add(path+".max_class", "%q is not a class of provider %s, which the client may reach", maxClass, p.Name)
			}
		}
	}
	check("clients.default", cl.Default.MaxClass, cl.Default.Providers)
	for i, e := range cl.Entries {
		check(fmt.Sprintf("clients.entries[%d]", i), e.MaxClass, e.Providers)
	}
}

// untrustedHeaders warns, for each provider that names a queue
// tenant_header without declaring it set by a trusted hop, that the
// header is ignored.
func untrustedHeaders(name string, c *Config, lines map[string]int) []string {
	var out []string
	for i, p := range c.Providers {
		if p.Queue.TenantHeader == "" || p.Queue.TenantHeaderTrusted {
			continue
		}
		path := fmt.Sprintf("providers[%d].queue.tenant_header", i)
		out = append(out, (&FieldError{File: name, Line: lines[path], Path: path,
			Msg: "ignored: any client could name another's tenant; set tenant_header_trusted: true when a hop in front of Sluice sets it, or match clients in clients:"}).Error())
	}
	return out
}

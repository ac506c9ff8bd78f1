package main

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// An admin listener off loopback without a token is warned about, in
// validate's output and serve's log; on loopback, off, or with a token it
// is not.
func TestAdminOffLoopbackWithoutTokenWarns(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		listen string
		token  config.Secret
		warn   bool
	}{
		{"127.0.0.1:9090", "", false},
		{"[::1]:9090", "", false},
		{"localhost:9090", "", false},
		{config.AdminOff, "", false},
		{"0.0.0.0:9090", "", true},
		{":9090", "", true},
		{"10.0.0.5:9090", "", true},
		{"admin.internal:9090", "", true},
		{"0.0.0.0:9090", "0123456789abcdef", false},
	} {
		cfg := config.Default()
		cfg.Admin = config.Admin{Listen: c.listen, Token: c.token}
		w := warnings(cfg)
		if got := len(w) == 1 && strings.Contains(w[0], "admin.token_env is not set"); got != c.warn {
			t.Errorf("admin.listen %s, token set %v: warnings %q, want a warning: %v", c.listen, c.token.IsSet(), w, c.warn)
		}
	}
}

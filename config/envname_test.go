package config

import (
	"strings"
	"testing"
)

// An api_key_env value is repeated in messages only when it is spelled like
// a variable name (upper case): a key pasted there by mistake is mixed or
// lower case, and the message must not carry it into logs.
func TestAPIKeyEnvNotEchoedUnlessNameLike(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  string
		echo bool
	}{
		{"OPENAI_API_KEY_UNSET", true},
		{"_X1", true},
		{"gsk_TOPSECRETq8Xw2Lm4Np6Rt8Vz0Bc3Df5Gh7Jk9", false},
		{"TOPSECRETq8Xw2Lm4Np6Rt8Vz0Bc3Df5Gh7Jk9", false},
		{"openai_key", false},
		{"sk-ant-TOPSECRET", false}, // not a variable name at all
		{strings.Repeat("K", 65), false},
	} {
		data := "providers:\n  - name: a\n    upstream: https://a.example.com\n    match: { path_prefix: /a }\n    api_key_env: " + c.env + "\n"
		_, err := ParseWithEnv("s.yaml", []byte(data), lookupEnv)
		if err == nil || !strings.Contains(err.Error(), "s.yaml:5: providers[0].api_key_env: ") {
			t.Fatalf("%s: err = %v, want an api_key_env error", c.env, err)
		}
		if got := strings.Contains(err.Error(), c.env); got != c.echo {
			t.Errorf("%s: echoed = %v, want %v: %v", c.env, got, c.echo, err)
		}
	}
}

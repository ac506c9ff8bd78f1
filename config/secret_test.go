package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestSecretNeverPrints(t *testing.T) {
	data := []byte(`
providers:
  - name: openai
    upstream: https://api.openai.com
    match: { path_prefix: /openai }
    api_key_env: OPENAI_API_KEY
`)
	cfg, err := ParseWithEnv("s.yaml", data, lookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Providers[0]
	if string(p.APIKey) != testEnv["OPENAI_API_KEY"] {
		t.Fatalf("string(APIKey) = %q, want the key", string(p.APIKey))
	}
	if !p.APIKey.IsSet() {
		t.Error("IsSet() = false")
	}

	var outputs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s", "%T %v"} {
		outputs = append(outputs,
			fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, *cfg), fmt.Sprintf(verb, p),
			fmt.Sprintf(verb, &p), fmt.Sprintf(verb, p.APIKey), fmt.Sprintf(verb, cfg.Providers))
	}
	outputs = append(outputs, fmt.Sprint(cfg), fmt.Sprintln(p), p.APIKey.String(), p.APIKey.GoString())

	j, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, string(j))

	var logBuf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logBuf, nil))
	logger.Info("cfg", "key", p.APIKey, "provider", p)
	jlogger := slog.New(slog.NewJSONHandler(&logBuf, nil))
	jlogger.Info("cfg", "key", p.APIKey, "provider", p)
	outputs = append(outputs, logBuf.String())

	for _, out := range outputs {
		if strings.Contains(out, secretMarker) || strings.Contains(out, "sk-openai") {
			t.Errorf("secret leaked: %s", out)
		}
	}
	if got := fmt.Sprintf("%+v", p); !strings.Contains(got, "APIKey:[redacted]") {
		t.Errorf("%%+v = %s, want APIKey:[redacted]", got)
	}
}

func TestSecretNotInErrors(t *testing.T) {
	env := func(k string) (string, bool) { return "sk-TOPSECRET-with-newline\n", true }
	data := []byte(`
providers:
  - name: openai
    upstream: https://user:TOPSECRET@api.openai.com
    match: { path_prefix: /openai }
    api_key_env: OPENAI_API_KEY
    headers: { Authorization: x }
`)
	_, err := ParseWithEnv("s.yaml", data, env)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		"s.yaml:6: providers[0].api_key_env: environment variable OPENAI_API_KEY holds control characters",
		"s.yaml:4: providers[0].upstream: must not contain userinfo",
		"s.yaml:7: providers[0].headers.Authorization: conflicts with the API key",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, secretMarker) {
		t.Errorf("error leaks a secret:\n%s", msg)
	}
	// A key pasted into api_key_env is not echoed.
	_, err = ParseWithEnv("s.yaml", []byte("providers: [{name: a, upstream: 'http://a', match: {host: a}, api_key_env: sk-TOPSECRET-abc}]"), env)
	if err == nil || strings.Contains(err.Error(), secretMarker) || !strings.Contains(err.Error(), "not the key itself") {
		t.Errorf("got %v, want an error without the value", err)
	}
	// An invalid URL error from net/url quotes the URL; it must not show.
	_, err = ParseWithEnv("s.yaml", []byte("providers: [{name: a, upstream: 'http://u:TOPSECRET@a b/', match: {host: a}}]"), env)
	if err == nil || strings.Contains(err.Error(), secretMarker) {
		t.Errorf("got %v, want an error without the URL", err)
	}
}

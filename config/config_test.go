package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// Test environment for api_key_env. The values contain "TOPSECRET" so that
// leak checks can look for it.
var testEnv = map[string]string{
	"OPENAI_API_KEY":        "sk-openai-TOPSECRET-1",
	"ANTHROPIC_API_KEY":     "sk-ant-TOPSECRET-2",
	"SLUICE_TEST_EMPTY_KEY": "",
	"REDIS_PASSWORD":        "redis-TOPSECRET-3",
}

func lookupEnv(k string) (string, bool) {
	v, ok := testEnv[k]
	return v, ok
}

const secretMarker = "TOPSECRET"

// unjoin returns the errors joined by errors.Join.
func unjoin(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		return u.Unwrap()
	}
	return []error{err}
}

// badCase is a testdata/*.bad.yml file with its expectations, read from the
// header comments: "# want: SUBSTRING" (FILE stands for the file name) and
// "# errors: N" (the exact number of errors).
type badCase struct {
	name  string
	data  []byte
	wants []string
	count int
}

func readBadCase(t *testing.T, path string) badCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := badCase{name: filepath.Base(path), data: data, count: -1}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if w, ok := strings.CutPrefix(line, "# want: "); ok {
			c.wants = append(c.wants, strings.ReplaceAll(w, "FILE", c.name))
		}
		if n, ok := strings.CutPrefix(line, "# errors: "); ok {
			c.count, err = strconv.Atoi(n)
			if err != nil {
				t.Fatalf("%s: bad errors line: %v", path, err)
			}
		}
	}
	if len(c.wants) == 0 {
		t.Fatalf("%s: no '# want:' lines", path)
	}
	return c
}

func TestBadFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 16 {
		t.Fatalf("found %d bad files, want at least 16", len(files))
	}
	for _, f := range files {
		c := readBadCase(t, f)
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseWithEnv(c.name, c.data, lookupEnv)
			if err == nil {
				t.Fatalf("no error; config: %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("config returned with an error: %+v", cfg)
			}
			msg := err.Error()
			for _, w := range c.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("missing error %q\ngot:\n%s", w, msg)
				}
			}
			errs := unjoin(err)
			if c.count >= 0 && len(errs) != c.count {
				t.Errorf("got %d errors, want %d:\n%s", len(errs), c.count, msg)
			}
			// Every error is a *FieldError with the file name and a line,
			// and they come in line order.
			prev := 0
			linePrefix := regexp.MustCompile(`^` + regexp.QuoteMeta(c.name) + `:\d+: `)
			for _, e := range errs {
				var fe *FieldError
				if !errors.As(e, &fe) {
					t.Errorf("error %q is %T, not *FieldError", e, e)
					continue
				}
				if fe.File != c.name || fe.Line <= 0 || !linePrefix.MatchString(e.Error()) {
					t.Errorf("error %q lacks FILE:LINE", e)
				}
				if fe.Line < prev {
					t.Errorf("errors out of line order:\n%s", msg)
				}
				prev = fe.Line
			}
			if strings.Contains(msg, secretMarker) {
				t.Errorf("error message leaks a secret:\n%s", msg)
			}
		})
	}
}

func TestGoodFiles(t *testing.T) {
	top := Default()

	minimal := *top
	p := DefaultProvider()
	p.Name, p.Upstream, p.Match = "openai", "https://api.openai.com", Match{PathPrefix: "/openai"}
	minimal.Providers = []Provider{p}

	full := Config{
		// It sets a deprecated key, which loads with a warning.
		Warnings: []string{"full.good.yml:50: providers[0].limit.long_window: " + settings.Limit{}.Deprecated()["long_window"]},
		Listen:   "0.0.0.0:8443",
		Admin:    Admin{Listen: AdminOff},
		Shutdown: Shutdown{Grace: 90 * time.Second},
		Tracing:  Tracing{Exporter: "otlp", SampleRatio: 0.25},
		Server: Server{
			MaxRequestBody: GiB, MaxResponseBody: 64 * KiB, MaxBufferedBytes: TiB,
			MaxConnections: 1000000, ReadTimeout: time.Millisecond, WriteTimeout: time.Hour,
			MaxConnsPerIP: 0, BodyTimeout: time.Hour, MinBodyRate: GiB, IdleTimeout: time.Millisecond,
		},
		Providers: []Provider{
			{
				Name:      "anthropic_main",
				Upstream:  "https://API.Anthropic.com/base/v1",
				Match:     Match{PathPrefix: "/anthropic/v1", Host: "claude.example.com"},
				Dialect:   DialectAnthropic,
				APIKeyEnv: "ANTHROPIC_API_KEY",
				Auth:      AuthXAPIKey,
				TLS:       UpstreamTLS{ServerName: "api.anthropic.com"},
				Headers:   map[string]string{"anthropic-version": "2023-06-01", "X-Team": "ml-platform"},
				Timeouts:  Timeouts{Connect: 250 * time.Millisecond, FirstToken: 2 * time.Minute, Idle: 45 * time.Second, Total: time.Hour},
				Limit: settings.Limit{
					Algorithm: settings.AlgorithmAIMD, Ceiling: 100000, Min: 1, Initial: 64,
					TTFTTarget: 1500 * time.Millisecond, MinTokenRate: 12.5,
					Window: 100 * time.Millisecond, WindowSamples: 10000,
					Smoothing: 1, LongWindow: 10, Backoff: 0.5, Cooldown: 10 * time.Minute,
					PrefillRate: 1e7, Fleet: settings.FleetStrict,
				},
				Queue: settings.Queue{
					MaxWaiting: 1000000, MaxWait: 10 * time.Minute, MaxClientWait: time.Hour,
					Classes: []settings.Class{
						{Name: "chat", MaxShare: 1, SaturatedShare: 1},
						{Name: "bulk", MaxShare: 0.5, SaturatedShare: 0.5},
						{Name: "scavenger", MaxShare: 0.2, SaturatedShare: 0},
					},
					DefaultClass: "bulk", ClassHeader: "X-Priority", TenantHeader: "X-Team-Id", TenantHeaderTrusted: true,
					TimeoutHeaders: []string{"x-request-timeout"},
					RetryHeaders:   []string{"x-stainless-retry-count", "x-retry-attempt"},
					MaxTenants:     1000000, TenantMaxInflight: 8, SaturationTTFTRatio: 1.5,
				},
				APIKey: Secret(testEnv["ANTHROPIC_API_KEY"]),
				// Set away from their defaults in admission.good.yml.
				Rate:    settings.DefaultRate(),
				Retries: settings.DefaultRetries(),
				Breaker: settings.DefaultBreaker(),
			},
			func() Provider {
				p := DefaultProvider()
				p.Name, p.Upstream, p.Match = "local-6", "http://[::1]:8080", Match{Host: "::1"}
				p.Dialect, p.APIKeyEnv, p.Auth = DialectOpenAI, "OPENAI_API_KEY", AuthXAPIKey
				p.APIKey = Secret(testEnv["OPENAI_API_KEY"])
				return p
			}(),
			func() Provider {
				p := DefaultProvider()
				p.Name, p.Upstream, p.Match = "claude-passthrough", "https://api.anthropic.com", Match{PathPrefix: "/claude"}
				p.Dialect, p.Auth = DialectAnthropic, AuthBearer // explicit auth beats the dialect default
				return p
			}(),
		},
		Cluster: Cluster{
			Redis: "rediss://sluice@redis.internal:6380/2", PasswordEnv: "REDIS_PASSWORD", Password: Secret(testEnv["REDIS_PASSWORD"]),
			TLS: ClusterTLS{ServerName: "redis.internal"}, KeyPrefix: "sluice-prod", ReplicaID: "gw-1.eu:a",
			Fleet: settings.Fleet{Heartbeat: 500 * time.Millisecond, LeaseTTL: 30 * time.Second, ExpectedReplicas: 4},
		},
		Clients: settings.Clients{
			Default: settings.ClientPolicy{MaxClass: "batch", Providers: []string{"local-6", "claude-passthrough"}, PerMinute: settings.PerMinute{RPM: 60}},
			Entries: []settings.Client{
				{Name: "research", KeySHA256: []string{
					"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
					"60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752",
				}, ClientPolicy: settings.ClientPolicy{Tenant: "science", MaxClass: "chat", Providers: []string{"anthropic_main"},
					PerMinute: settings.PerMinute{RPM: 600, TPM: 200000}, MaxInflight: 10}},
				{Name: "gateway-team", Header: settings.ClientHeader{Name: "X-Team", Value: "ops"},
					ClientPolicy: settings.ClientPolicy{MaxClass: "interactive", Providers: []string{"local-6"}}},
			},
		},
	}

	zeros := *top
	zeros.Shutdown.Grace = 0
	zeros.Tracing = Tracing{Exporter: "none", SampleRatio: 0}
	z := DefaultProvider()
	z.Name, z.Upstream, z.Match = "zero", "http://localhost:8000", Match{PathPrefix: "/z"}
	z.Limit.Ceiling, z.Limit.Min, z.Limit.Initial = 5, 2, 5 // initial = min(20, ceiling)
	z.Limit.TTFTTarget, z.Limit.MinTokenRate, z.Limit.Cooldown, z.Limit.PrefillRate = 0, 0, 0, 0
	z.Queue.MaxWaiting, z.Queue.MaxWait = 0, 0
	one := DefaultProvider()
	one.Name, one.Upstream, one.Match = "one", "http://localhost:8001", Match{PathPrefix: "/one"}
	one.Dialect, one.Auth = DialectAnthropic, AuthXAPIKey // auth follows dialect
	one.Limit.Ceiling, one.Limit.Min, one.Limit.Initial = 1, 1, 1
	hm := DefaultProvider()
	hm.Name, hm.Upstream, hm.Match = "highmin", "http://localhost:8002", Match{PathPrefix: "/hm"}
	hm.Limit.Min, hm.Limit.Initial = 30, 30 // initial raised to min
	zeros.Providers = []Provider{z, one, hm}

	anchors := *top
	a := DefaultProvider()
	a.Name, a.Upstream, a.Match = "a", "https://a.example.com", Match{PathPrefix: "/a"}
	a.Limit.Algorithm, a.Limit.Ceiling, a.Limit.Backoff = settings.AlgorithmAIMD, 30, 0.75
	a.Timeouts.Connect, a.Timeouts.Total = time.Second, 20*time.Minute
	b := a
	b.Name, b.Upstream, b.Match = "b", "https://b.example.com", Match{PathPrefix: "/b"}
	b.Limit.Ceiling, b.Limit.Initial = 10, 10
	anchors.Providers = []Provider{a, b}

	for name, want := range map[string]*Config{
		"minimal.good.yml":   &minimal,
		"full.good.yml":      &full,
		"zeros.good.yml":     &zeros,
		"anchors.good.yml":   &anchors,
		"admission.good.yml": admissionGood(),
	} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseWithEnv(name, data, lookupEnv)
			if err != nil {
				t.Fatalf("unexpected error:\n%v", err)
			}
			for _, d := range diff("cfg", reflect.ValueOf(*got), reflect.ValueOf(*want)) {
				t.Error(d)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("parsed config fails Validate:\n%v", err)
			}
		})
	}
	// Every good file in testdata is covered above.
	files, _ := filepath.Glob("testdata/*.good.yml")
	if len(files) != 5 {
		t.Errorf("found %d good files, the table covers 5", len(files))
	}
}

// admissionGood is testdata/admission.good.yml as it must parse.
func admissionGood() *Config {
	c := Default()
	a := DefaultProvider()
	a.Name, a.Upstream, a.Match = "openai", "https://api.openai.com", Match{PathPrefix: "/openai"}
	a.Rate = settings.Rate{PerMinute: settings.PerMinute{RPM: 500, TPM: 200000, InputTPM: 150000, OutputTPM: 50000},
		RequestWindow: 10 * time.Second, DefaultMaxOutputTokens: 2048, ProviderHeaders: "ignore", MaxAccounts: 4096,
		PerClient: settings.PerClient{Key: "header", Header: "X-Team",
			PerMinute: settings.PerMinute{RPM: 60, TPM: 20000, InputTPM: 15000, OutputTPM: 5000}, MaxKeys: 500}}
	a.Retries = settings.Retries{MaxAttempts: 3, BudgetRatio: 0.1, MinPerSecond: 0.5, BudgetWindow: 30 * time.Second,
		BackoffBase: 100 * time.Millisecond, BackoffMax: 2 * time.Second, MaxRetryAfter: 0}
	a.Breaker = settings.Breaker{ConsecutiveFailures: 0, FailureRatio: 0.25, MinRequests: 50, Window: time.Minute,
		OpenTime: 500 * time.Millisecond, QuotaOpenTime: time.Hour, HalfOpenProbes: 1}
	p := DefaultProvider()
	p.Name, p.Match, p.Headers = "pool", Match{PathPrefix: "/pool"}, map[string]string{"X-Team": "ml"}
	p.Upstreams = []Upstream{
		{Upstream: settings.Upstream{Name: "0", Weight: 3}, URL: "https://eastus.example.com/openai",
			APIKeyEnv: "OPENAI_API_KEY", APIKey: Secret(testEnv["OPENAI_API_KEY"]), Headers: map[string]string{"X-Region": "eastus"}},
		{Upstream: settings.Upstream{Name: "west", Weight: 1, Ceiling: 8,
			Rate: settings.PerMinute{RPM: 300, TPM: 100000, InputTPM: 80000, OutputTPM: 20000}}, URL: "https://westus.example.com/openai"},
	}
	c.Providers = []Provider{a, p}
	return c
}

// diff lists the paths where got and want differ (secrets compared by value).
func diff(path string, got, want reflect.Value) []string {
	if got.Type() != want.Type() {
		return []string{fmt.Sprintf("%s: type %s, want %s", path, got.Type(), want.Type())}
	}
	switch got.Kind() {
	case reflect.Struct:
		var out []string
		for i := range got.NumField() {
			out = append(out, diff(path+"."+got.Type().Field(i).Name, got.Field(i), want.Field(i))...)
		}
		return out
	case reflect.Slice:
		if got.Len() != want.Len() {
			return []string{fmt.Sprintf("%s: len %d, want %d", path, got.Len(), want.Len())}
		}
		var out []string
		for i := range got.Len() {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), got.Index(i), want.Index(i))...)
		}
		return out
	case reflect.Map:
		if got.Len() == 0 && want.Len() == 0 {
			return nil // nil and empty are the same here
		}
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			return []string{fmt.Sprintf("%s: %v, want %v", path, got, want)}
		}
		return nil
	case reflect.String:
		if got.String() != want.String() {
			return []string{fmt.Sprintf("%s: %q, want %q", path, got.String(), want.String())}
		}
		return nil
	default:
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			return []string{fmt.Sprintf("%s: %v, want %v", path, got.Interface(), want.Interface())}
		}
		return nil
	}
}

func TestExampleFile(t *testing.T) {
	const path = "../examples/sluice.yaml"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseWithEnv("sluice.yaml", data, lookupEnv)
	if err != nil {
		t.Fatalf("examples/sluice.yaml does not parse:\n%v", err)
	}
	byName := map[string]Provider{}
	for _, p := range cfg.Providers {
		byName[p.Name] = p
	}
	if o := byName["openai"]; o.Match.PathPrefix != "/openai" || o.Auth != AuthBearer || string(o.APIKey) != testEnv["OPENAI_API_KEY"] {
		t.Errorf("openai provider: %+v", o)
	}
	if a := byName["anthropic"]; a.Match.PathPrefix != "/anthropic" || a.Dialect != DialectAnthropic || a.Auth != AuthXAPIKey {
		t.Errorf("anthropic provider: %+v", a)
	}
	if v := byName["vllm"]; v.Limit.Algorithm != settings.AlgorithmFixed || v.APIKeyEnv != "" || v.Queue.MaxWaiting != 0 {
		t.Errorf("vllm provider: %+v", v)
	}
	if len(cfg.Providers) != 3 {
		t.Errorf("got %d providers, want 3", len(cfg.Providers))
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join("testdata", "minimal.good.yml")
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Path != path {
		t.Errorf("Path = %q, want %q", cfg.Path, path)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want an os.ErrNotExist error", err)
	}
	_, err = Load(filepath.Join("testdata", "ceiling_zero.bad.yml"))
	if want := "testdata/ceiling_zero.bad.yml:9: providers[0].limit.ceiling:"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	// Parse reads the process environment.
	t.Setenv("SLUICE_TEST_LOAD_KEY", "k")
	cfg, err = Parse("x.yaml", []byte("providers: [{name: a, upstream: 'http://a', match: {host: a}, api_key_env: SLUICE_TEST_LOAD_KEY}]"))
	if err != nil || string(cfg.Providers[0].APIKey) != "k" || cfg.Path != "" {
		t.Errorf("Parse with env: %+v, %v", cfg, err)
	}
}

func TestParseEdgeCases(t *testing.T) {
	const prov = "providers: [{name: a, upstream: 'http://a', match: {path_prefix: /a}}]\n"
	for _, tc := range []struct {
		name, data string
		want       string // "" means valid
	}{
		{"empty", "", "t.yaml:1: providers: at least one provider is required"},
		{"comments only", "# nothing\n", "t.yaml:1: providers: at least one provider is required"},
		{"leading document marker", "---\n" + prov, ""},
		{"trailing empty document", prov + "---\n", ""},
		{"root is a list", "- a\n", "t.yaml:1: the configuration must be a mapping, got a list"},
		{"root is a scalar", "hello\n", `t.yaml:1: the configuration must be a mapping, got "hello"`},
		{"tab indentation", "providers:\n\t- name: a\n", "t.yaml:2: invalid YAML:"},
		{"quoted number is not an int", prov + "shutdown: {grace: 1s}\nlisten: ':80'\n", ""},
		{"int as string for ceiling", "providers: [{name: a, upstream: 'http://a', match: {path_prefix: /a}, limit: {ceiling: '5'}}]", `providers[0].limit.ceiling: must be an integer, got "5"`},
		{"zero duration as number", prov + "shutdown: {grace: 0}\n", ""},
		{"bare number duration", prov + "shutdown: {grace: 1.5}\n", `t.yaml:2: shutdown.grace: invalid duration "1.5": a unit is required`},
		{"null scalar", prov + "listen:\n", "t.yaml:2: listen: missing value"},
		{"null mapping keeps defaults", prov + "admin:\ntracing: ~\n", ""},
		{"null providers", "providers:\n", "t.yaml:1: providers: at least one provider is required"},
		{"non-string key", prov + "[a]: 1\n", "t.yaml:2: mapping keys must be strings, got a list"},
		{"quoted merge key is a plain key", "providers: [{name: a, upstream: 'http://a', match: {path_prefix: /a}, '<<': {}}]", `providers[0].<<: unknown key`},
		{"merge of a scalar", "providers: [{name: a, upstream: 'http://a', match: {path_prefix: /a}, limit: {<<: 5}}]", "providers[0].limit: merge key (<<) must be a mapping"},
		{"self-referential merge", "providers: [{name: a, upstream: 'http://a', match: &m {path_prefix: /a, <<: *m}}]", ""},
		{"admin same as listen", prov + "listen: 127.0.0.1:1\nadmin: {listen: 127.0.0.1:1}\n", `t.yaml:3: admin.listen: must differ from listen ("127.0.0.1:1")`},
		{"port zero allowed", prov + "listen: 127.0.0.1:0\nadmin: {listen: ':0'}\n", ""},
		{"ipv6 listen", prov + "listen: '[::1]:8080'\n", ""},
		{"upstream with base path", "providers: [{name: a, upstream: 'https://h.example/v1/', match: {host: h}}]", ""},
		{"upstream fragment", "providers: [{name: a, upstream: 'https://h.example/#x', match: {host: h}}]", "providers[0].upstream: must not have a fragment"},
		{"upstream bad port", "providers: [{name: a, upstream: 'https://h.example:99999', match: {host: h}}]", `providers[0].upstream: port must be between 1 and 65535, got "99999"`},
		{"prefix with query char", "providers: [{name: a, upstream: 'http://a', match: {path_prefix: '/a?b'}}]", "must contain only letters"},
		{"prefix with percent", "providers: [{name: a, upstream: 'http://a', match: {path_prefix: '/a%2f'}}]", "must contain only letters"},
		{"same prefix different providers under hosts", "providers: [{name: a, upstream: 'http://a', match: {path_prefix: /x, host: a}}, {name: b, upstream: 'http://b', match: {path_prefix: /x, host: b}}]", `"/x" is already used by providers[0] (a)`},
		{"nested prefixes allowed", "providers: [{name: a, upstream: 'http://a', match: {path_prefix: /x}}, {name: b, upstream: 'http://b', match: {path_prefix: /x/y}}]", ""},
		{"header names are case-insensitive", "providers: [{name: a, upstream: 'http://a', match: {host: a}, headers: {X-A: '1', x-a: '2'}}]", `providers[0].headers.x-a: same header as "X-A"`},
		{"authorization header allowed without injection", "providers: [{name: a, upstream: 'http://a', match: {host: a}, headers: {Authorization: 'Bearer x'}}]", ""},
		{"x-api-key header conflicts for anthropic injection", "providers: [{name: a, upstream: 'http://a', match: {host: a}, dialect: anthropic, api_key_env: OPENAI_API_KEY, headers: {X-Api-Key: x}}]", "providers[0].headers.X-Api-Key: conflicts with the API key"},
		{"ceiling 1 with defaults", "providers: [{name: a, upstream: 'http://a', match: {host: a}, limit: {ceiling: 1}}]", ""},
		{"sample ratio unset explicitly", prov + "tracing: {sample_ratio: -1}\n", ""},
		{"unquoted off", prov + "admin: {listen: off}\n", ""},
		{"api_key in the file", "providers: [{name: a, upstream: 'http://a', match: {host: a}, api_key: sk-TOPSECRET}]", "providers[0].api_key: unknown key: keys are not stored in the file; put the key in an environment variable and name it in api_key_env"},
		{"upstream encoded slash is not a trailing slash", "providers: [{name: a, upstream: 'http://a/x%2F', match: {host: a}}]", ""},
		{"host trailing dot", "providers: [{name: a, upstream: 'http://a', match: {host: a.example.}}]", `providers[0].match.host: must be a host name or IP address without port, got "a.example."`},
		{"host ipv6 zone", "providers: [{name: a, upstream: 'http://a', match: {host: 'fe80::1%eth0'}}]", "providers[0].match.host: must be a host name"},
		{"host ipv4", "providers: [{name: a, upstream: 'http://a', match: {host: 10.0.0.1}}]", ""},
		{"host ipv6 bare", "providers: [{name: a, upstream: 'http://a', match: {host: '2001:DB8:0::1'}}]", ""},
		{"host ipv6 canonical duplicate", "providers: [{name: a, upstream: 'http://a', match: {host: '[2001:DB8:0::1]'}}, {name: b, upstream: 'http://a', match: {host: '2001:db8::1'}}]", `providers[1].match.host: "2001:db8::1" is already matched by providers[0] (a)`},
		{"provider not a mapping", "providers: [foo]", `t.yaml:1: providers[0]: must be a mapping, got "foo"`},
		{"name too long", "providers: [{name: " + strings.Repeat("a", 65) + ", upstream: 'http://a', match: {host: a}}]", "providers[0].name: must be 1 to 64 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseWithEnv("t.yaml", []byte(tc.data), lookupEnv)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error:\n%v", err)
			case tc.want == "":
				if err := cfg.Validate(); err != nil {
					t.Errorf("parsed config fails Validate:\n%v", err)
				}
			case err == nil:
				t.Fatalf("no error, want %q", tc.want)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("got:\n%v\nwant %q", err, tc.want)
			}
		})
	}
}

func TestUnknownKeyHint(t *testing.T) {
	for key, want := range map[string]string{
		"ceilling":       ` (did you mean "ceiling"?)`,
		"Ceiling":        ` (did you mean "ceiling"?)`,
		"windowsamples":  ` (did you mean "window_samples"?)`,
		"concurrency":    "; valid keys: algorithm, backoff, ceiling,",
		"prefill_tokens": "; valid keys:",
	} {
		data := "providers: [{name: a, upstream: 'http://a', match: {host: a}, limit: {" + key + ": 1}}]"
		_, err := ParseWithEnv("t.yaml", []byte(data), lookupEnv)
		if err == nil || !strings.Contains(err.Error(), "providers[0].limit."+key+": unknown key"+want) {
			t.Errorf("%s: got %v, want %q", key, err, want)
		}
	}
}

func TestParseResultIsIndependent(t *testing.T) {
	data, err := os.ReadFile("testdata/full.good.yml")
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseWithEnv("a", data, lookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseWithEnv("b", data, lookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	a.Providers[0].Headers["X-Team"] = "changed"
	if b.Providers[0].Headers["X-Team"] != "ml-platform" {
		t.Error("two parses share a headers map")
	}
	d1, d2 := Default(), Default()
	if !reflect.DeepEqual(d1, d2) || d1 == d2 {
		t.Error("Default must return a fresh, equal value each call")
	}
}

// TestDocsExample keeps the full example in docs/config.md valid.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Full example")
	if !ok {
		t.Fatal("no Full example section")
	}
	_, block, ok := strings.Cut(rest, "```yaml\n")
	if !ok {
		t.Fatal("no yaml block in the Full example section")
	}
	block, _, _ = strings.Cut(block, "```")
	cfg, err := ParseWithEnv("config.md", []byte(block), lookupEnv)
	if err != nil {
		t.Fatalf("docs example does not parse:\n%v", err)
	}
	// Apart from tracing and the header, it spells out the defaults.
	p := DefaultProvider()
	p.Name, p.Upstream, p.Match = "openai", "https://api.openai.com", Match{PathPrefix: "/openai"}
	p.APIKeyEnv, p.APIKey = "OPENAI_API_KEY", Secret(testEnv["OPENAI_API_KEY"])
	p.Headers = map[string]string{"OpenAI-Organization": "org-123"}
	want := Default()
	want.Tracing = Tracing{Exporter: "otlp", SampleRatio: 0.1}
	want.Providers = []Provider{p}
	for _, d := range diff("cfg", reflect.ValueOf(*cfg), reflect.ValueOf(*want)) {
		t.Error(d)
	}
}

package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that Parse never panics, that a config it accepts also
// passes Validate, and that every error it returns is a *FieldError naming
// the file.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yml")
	files = append(files, "../examples/sluice.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("a: &a [*a]\nproviders: &p [{<<: *p}]\n"))
	f.Add([]byte("providers: [{name: a, upstream: 'http://a', match: &m {path_prefix: /a, <<: [*m, *m]}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseWithEnv("f.yaml", data, lookupEnv)
		if err != nil {
			if cfg != nil {
				t.Fatal("config returned with an error")
			}
			for _, e := range unjoin(err) {
				var fe *FieldError
				if !errors.As(e, &fe) || fe.File != "f.yaml" {
					t.Fatalf("error %q is not a *FieldError for f.yaml", e)
				}
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects:\n%v\ninput:\n%s", err, data)
		}
	})
}

// Command sluice-image builds Sluice's container image as an OCI tarball,
// without a Docker daemon and without pulling a base image (`make image`
// runs it; docs/deploy.md describes the image).
//
//	sluice-image -binary bin/image/linux-amd64/sluice -config deploy/image/sluice.yaml \
//	    -version v1.2.3 -revision SHA -created EPOCH -out bin/sluice-image.tar
//
// It prints the image reference with its manifest digest, and the tar's own
// SHA-256.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/deploy/tools/image"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binary := fs.String("binary", "", "the static sluice `FILE` (CGO_ENABLED=0, GOOS=linux)")
	config := fs.String("config", "deploy/image/sluice.yaml", "the default config `FILE`, at "+image.ConfigPath)
	caCerts := fs.String("ca-certs", "", "PEM `FILE` of CA certificates; empty: Mozilla's roots from golang.org/x/crypto/x509roots/fallback (reproducible)")
	version := fs.String("version", "", "image version label and tag")
	revision := fs.String("revision", "", "the commit the binary was built from")
	source := fs.String("source", "https://github.com/sluicehq/sluice", "the source repository label")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "the build date, Unix seconds (default $SOURCE_DATE_EPOCH)")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH the binary was built for")
	repo := fs.String("repository", "sluice", "image name the archive is tagged with")
	out := fs.String("out", "bin/sluice-image.tar", "output `FILE`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || *binary == "" {
		fmt.Fprintln(stderr, "usage: sluice-image -binary FILE [flags]")
		fs.PrintDefaults()
		return 2
	}
	epoch, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-image: -created %q: want Unix seconds\n", *created)
		return 2
	}
	opts := image.Options{
		Version: *version, Revision: *revision, Source: *source,
		Created: time.Unix(epoch, 0).UTC(), Arch: *arch,
	}
	for _, f := range []struct {
		path string
		dst  *[]byte
	}{{*binary, &opts.Binary}, {*config, &opts.Config}, {*caCerts, &opts.CACerts}} {
		if f.path == "" {
			continue
		}
		if *f.dst, err = os.ReadFile(f.path); err != nil {
			fmt.Fprintf(stderr, "sluice-image: %v\n", err)
			return 1
		}
	}
	img, err := image.Build(opts)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-image: %v\n", err)
		return 1
	}
	ref := *repo + ":" + *version
	sum, err := writeFile(*out, func(w io.Writer) error { return image.Write(w, img, ref, opts.Created) })
	if err != nil {
		fmt.Fprintf(stderr, "sluice-image: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n%s sha256:%s\n", image.Describe(img, ref), *out, sum)
	return 0
}

// writeFile writes through a temporary file renamed into place, and
// returns the SHA-256 of what was written.
func writeFile(name string, write func(io.Writer) error) (string, error) {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(name), ".sluice-image-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	h := sha256.New()
	if err := write(io.MultiWriter(f, h)); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), os.Rename(f.Name(), name)
}

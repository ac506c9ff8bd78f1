// Package image builds Sluice's container image without a Docker daemon
// and without pulling a base image: one layer on an empty base holding the
// static binary, a minimal /etc/passwd and /etc/group with a numeric
// non-root user, CA certificates and the default config. Everything that
// goes into it is an input (file contents, the version strings, the build
// date); nothing is read from the clock or the host's file metadata, so the
// same inputs give the same digest.
//
// The result is written as one tar that is both an OCI image layout
// (oci-layout, index.json, blobs/) and a `docker save` archive
// (manifest.json), so `docker load`, `podman load`, `skopeo copy
// oci-archive:...` and `crane push` all take it.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Paths and identity inside the image (docs/deploy.md documents them).
const (
	BinaryPath = "/sluice"
	ConfigPath = "/etc/sluice/sluice.yaml"
	CAPath     = "/etc/ssl/certs/ca-certificates.crt"
	UID        = 65532 // "nonroot", as in distroless images
	User       = "65532:65532"
	HTTPPort   = "8080/tcp"
	AdminPort  = "9090/tcp"
)

// Options are the inputs of an image. Equal options give an equal digest.
type Options struct {
	Binary   []byte    // the static linux binary (CGO_ENABLED=0)
	Config   []byte    // the default config, at ConfigPath
	CACerts  []byte    // PEM bundle at CAPath; nil: Mozilla's roots from x/crypto (see MozillaRoots)
	Version  string    // org.opencontainers.image.version
	Revision string    // org.opencontainers.image.revision: the commit
	Source   string    // org.opencontainers.image.source
	Created  time.Time // the build date: the commit's time; file times, config and labels use it
	Arch     string    // GOARCH of Binary, e.g. amd64
}

// Labels returns the image's OCI labels.
func (o Options) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "sluice",
		"org.opencontainers.image.description": "Adaptive concurrency-limiting reverse proxy for LLM provider APIs",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
}

func (o Options) check() error {
	var errs []error
	if len(o.Binary) < 4 || string(o.Binary[:4]) != "\x7fELF" {
		errs = append(errs, errors.New("binary: not an ELF executable"))
	}
	if len(o.Config) == 0 {
		errs = append(errs, errors.New("config: empty"))
	}
	if o.Version == "" || o.Revision == "" || o.Source == "" || o.Arch == "" {
		errs = append(errs, errors.New("version, revision, source and arch are required"))
	}
	if o.Created.IsZero() || o.Created.Unix() <= 0 {
		errs = append(errs, errors.New("created: the build date is required (SOURCE_DATE_EPOCH)"))
	}
	return errors.Join(errs...)
}

// Build assembles the image.
func Build(o Options) (v1.Image, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.CACerts == nil {
		o.CACerts = MozillaRoots()
	}
	created := o.Created.UTC()
	layerTar, err := rootFS(o, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "sluice deploy/tools/cmd/sluice-image",
			Comment:   "static sluice binary, passwd/group, CA certificates, default config",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = o.Arch, "linux"
	cf.Created = v1.Time{Time: created}
	cf.Author = ""
	cf.Config = v1.Config{
		Entrypoint:   []string{BinaryPath},
		Cmd:          []string{"serve", "-config", ConfigPath},
		User:         User,
		WorkingDir:   "/",
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CAPath},
		ExposedPorts: map[string]struct{}{HTTPPort: {}, AdminPort: {}},
		Labels:       o.Labels(),
		StopSignal:   "SIGTERM",
	}
	return mutate.ConfigFile(img, cf)
}

// file is one entry of the root file system.
type file struct {
	name     string // absolute path
	mode     int64
	uid, gid int
	dir      bool
	body     []byte
}

// rootFS is the layer's tar: sorted entries, fixed owners, modes and times.
func rootFS(o Options, mtime time.Time) ([]byte, error) {
	files := []file{
		{name: "/etc", mode: 0o755, dir: true},
		{name: "/etc/group", mode: 0o644, body: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "/etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "/etc/sluice", mode: 0o755, dir: true},
		{name: ConfigPath, mode: 0o644, body: o.Config},
		{name: "/etc/ssl", mode: 0o755, dir: true},
		{name: "/etc/ssl/certs", mode: 0o755, dir: true},
		{name: CAPath, mode: 0o644, body: o.CACerts},
		{name: "/home", mode: 0o755, dir: true},
		{name: "/home/nonroot", mode: 0o700, uid: UID, gid: UID, dir: true},
		{name: BinaryPath, mode: 0o755, body: o.Binary},
		{name: "/tmp", mode: 0o1777, dir: true},
	}
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    strings.TrimPrefix(f.name, "/"),
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// MozillaRoots is the PEM bundle of the NSS (Mozilla) trust store as
// golang.org/x/crypto/x509roots/fallback ships it, at the version go.sum
// pins: unlike the build host's /etc/ssl/certs, the same on every machine.
// Roots that NSS trusts only for certificates issued before a date are
// left out: a PEM file cannot carry that constraint.
func MozillaRoots() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}) // writes to a buffer
	}
	return b.Bytes()
}

// Write writes img as one tar holding an OCI image layout and a `docker
// save` manifest naming it ref (e.g. "sluice:v1.2.3"). Entries are sorted
// and carry mtime, so the tar's bytes depend only on img, ref and mtime.
func Write(w io.Writer, img v1.Image, ref string, mtime time.Time) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	blobs := map[string][]byte{blobPath(digest): manifest, blobPath(cfgName): rawCfg}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		blobs[blobPath(d)] = b
		layerPaths = append(layerPaths, blobPath(d))
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     types.OCIImageIndex,
		"manifests": []map[string]any{{
			"mediaType": mt,
			"digest":    digest.String(),
			"size":      len(manifest),
			"platform":  map[string]string{"os": cf.OS, "architecture": cf.Architecture},
			"annotations": map[string]string{
				"io.containerd.image.name":          ref,
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	})
	if err != nil {
		return err
	}
	dockerManifest, err := json.Marshal([]map[string]any{{
		"Config":   blobPath(cfgName),
		"RepoTags": []string{ref},
		"Layers":   layerPaths,
	}})
	if err != nil {
		return err
	}
	entries := map[string][]byte{
		"oci-layout":    []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json":    index,
		"manifest.json": dockerManifest,
	}
	for p, b := range blobs {
		entries[p] = b
	}
	names := make([]string, 0, len(entries)+2)
	for n := range entries {
		names = append(names, n)
	}
	names = append(names, "blobs/", "blobs/sha256/")
	slices.Sort(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		h := &tar.Header{Name: n, Mode: 0o644, ModTime: mtime.UTC(), Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(entries[n]))}
		if strings.HasSuffix(n, "/") {
			h.Mode, h.Typeflag, h.Size = 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(entries[n]); err != nil {
			return err
		}
	}
	return tw.Close()
}

func blobPath(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }

// Describe is one line about img: its reference and manifest digest.
func Describe(img v1.Image, ref string) string {
	d, err := img.Digest()
	if err != nil {
		return fmt.Sprintf("%s: %v", ref, err)
	}
	return ref + "@" + d.String()
}

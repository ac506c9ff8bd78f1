package image

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images under test: `make image-check` builds the image twice, each
// time compiling the binary into its own directory and assembling the
// image in its own process, and names the two archives here.
const (
	envImage = "SLUICE_IMAGE"
	envAgain = "SLUICE_IMAGE_AGAIN"
)

const repoRoot = "../../.."

func archives(t *testing.T) (first, again string) {
	t.Helper()
	first, again = os.Getenv(envImage), os.Getenv(envAgain)
	if first == "" || again == "" {
		t.Fatalf("%s and %s must name two image archives built from the same source: run `make image-check`", envImage, envAgain)
	}
	return first, again
}

// Two builds of the same source give the same bytes: the same manifest
// digest, and the same archive.
func TestImageIsReproducible(t *testing.T) {
	a, b := archives(t)
	da, db := digestOf(t, a), digestOf(t, b)
	t.Logf("first build: %s\nsecond build: %s", da, db)
	if da != db {
		t.Errorf("two builds of the same source: image digests %s and %s", da, db)
	}
	ba, bb := readFile(t, a), readFile(t, b)
	if !bytes.Equal(ba, bb) {
		t.Errorf("two builds of the same source: archives of %d and %d bytes differ", len(ba), len(bb))
	}
}

// Build and Write depend on their inputs only: not on the clock, nor on
// anything else of the process.
func TestBuildDependsOnInputsOnly(t *testing.T) {
	t.Parallel()
	opts := Options{
		Binary: []byte("\x7fELF fake"), Config: []byte("listen: 0.0.0.0:8080\n"),
		Version: "v0.0.1", Revision: "abc", Source: "https://example.invalid/sluice",
		Created: time.Unix(1764547200, 0), Arch: "amd64",
	}
	build := func(o Options) (v1.Hash, []byte) {
		img, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := Write(&buf, img, "sluice:"+o.Version, o.Created); err != nil {
			t.Fatal(err)
		}
		return d, buf.Bytes()
	}
	d1, tar1 := build(opts)
	time.Sleep(1100 * time.Millisecond) // a second later, in case a clock leaks in
	d2, tar2 := build(opts)
	if d1 != d2 || !bytes.Equal(tar1, tar2) {
		t.Errorf("same inputs, a second apart: %s and %s", d1, d2)
	}
	changed := opts
	changed.Created = opts.Created.Add(time.Second)
	if d3, _ := build(changed); d3 == d1 {
		t.Error("the build date does not change the digest")
	}
	if _, err := Build(Options{Binary: []byte("not elf")}); err == nil {
		t.Error("Build accepted options without a binary, config, version or date")
	}
}

// The archive opens as an OCI image layout and as a `docker save`
// archive, with the same image; its config runs /sluice as 65532 with
// serve -config /etc/sluice/sluice.yaml, exposes 8080 and 9090, and
// carries the OCI labels; its files have fixed owners, modes and times;
// the binary is static and runs: version matches the labels, validate
// accepts the baked-in config and the repository's example, and serve
// starts as the image's user in the image's file system and stops on
// SIGTERM.
func TestImageContents(t *testing.T) {
	a, _ := archives(t)
	img := openLayout(t, a)
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	// The same archive read as `docker load` reads it: manifest.json names
	// the same config and layers.
	docker, err := tarball.ImageFromPath(a, nil)
	if err != nil {
		t.Fatalf("docker archive view: %v", err)
	}
	cfgOCI, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if cfgDocker, err := docker.ConfigName(); err != nil || cfgDocker != cfgOCI {
		t.Errorf("docker archive view: config %v (%v), OCI layout: %v", cfgDocker, err, cfgOCI)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/sluice"}) || !slices.Equal(c.Cmd, []string{"serve", "-config", "/etc/sluice/sluice.yaml"}) {
		t.Errorf("entrypoint %q, cmd %q", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (numeric, non-root)", c.User)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok || len(c.ExposedPorts) != 2 {
		t.Errorf("exposed ports %v, want 8080/tcp and 9090/tcp", c.ExposedPorts)
	}
	if cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	labels := c.Labels
	for _, k := range []string{"title", "description", "version", "revision", "source", "created"} {
		if labels["org.opencontainers.image."+k] == "" {
			t.Errorf("label org.opencontainers.image.%s missing: %v", k, labels)
		}
	}
	created, err := time.Parse(time.RFC3339, labels["org.opencontainers.image.created"])
	if err != nil || !cf.Created.Time.Equal(created) {
		t.Errorf("created label %q (%v), config created %v", labels["org.opencontainers.image.created"], err, cf.Created)
	}

	root := t.TempDir()
	files := unpack(t, img, root, created)
	for name, want := range map[string]string{
		"sluice": "-rwxr-xr-x 0:0", "etc/passwd": "-rw-r--r-- 0:0", "etc/group": "-rw-r--r-- 0:0",
		"etc/sluice/sluice.yaml": "-rw-r--r-- 0:0", "etc/ssl/certs/ca-certificates.crt": "-rw-r--r-- 0:0",
		"home/nonroot/": "drwx------ 65532:65532", "tmp/": "dtrwxrwxrwx 0:0",
	} {
		if files[name] != want {
			t.Errorf("%s: %q, want %q", name, files[name], want)
		}
	}
	if !strings.Contains(readFile(t, filepath.Join(root, "etc/passwd")).String(), "nonroot:x:65532:65532:") {
		t.Error("/etc/passwd has no nonroot user 65532")
	}
	if got, want := readFile(t, filepath.Join(root, "etc/sluice/sluice.yaml")), readFile(t, filepath.Join(repoRoot, "deploy/image/sluice.yaml")); !bytes.Equal(got, want) {
		t.Error("/etc/sluice/sluice.yaml is not deploy/image/sluice.yaml")
	}
	if n := countCerts(t, readFile(t, filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))); n < 100 {
		t.Errorf("%d CA certificates, want the Mozilla roots (over 100)", n)
	}
	bin := filepath.Join(root, "sluice")
	assertStatic(t, bin)

	// version: the labels describe the binary.
	out := runOK(t, exec.Command(bin, "version", "-json"))
	var v struct{ Version, Commit, Date string }
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version -json: %v: %s", err, out)
	}
	if v.Version != labels["org.opencontainers.image.version"] || v.Commit != labels["org.opencontainers.image.revision"] || v.Date != labels["org.opencontainers.image.created"] {
		t.Errorf("binary says %+v, labels say %v", v, labels)
	}
	t.Logf("%s: sluice %s, commit %s, built %s", digest, v.Version, v.Commit, v.Date)

	// validate: the baked-in config, and the repository's example (whose
	// providers inject keys from the environment).
	runOK(t, inImage(root, "/sluice", "validate", "-config", "/etc/sluice/sluice.yaml"))
	ex := exec.Command(bin, "validate", "-config", filepath.Join(repoRoot, "examples/sluice.yaml"))
	ex.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test", "ANTHROPIC_API_KEY=sk-ant-test")
	runOK(t, ex)

	// serve, as the image's user in its file system, on loopback ports.
	serveInImage(t, root)
}

// serveInImage runs /sluice serve in the unpacked image's file system
// (chroot) as user 65532, checks /readyz, then stops it with SIGTERM.
func serveInImage(t *testing.T, root string) {
	t.Helper()
	listen, admin := freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf("listen: %s\nadmin: { listen: %s }\nshutdown: { grace: 1s }\nproviders:\n  - name: p\n    upstream: https://api.openai.com\n    match: { path_prefix: /p }\n", listen, admin)
	if err := os.WriteFile(filepath.Join(root, "tmp", "test.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := inImage(root, "/sluice", "serve", "-config", "/tmp/test.yaml")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve in the image never got ready: %v\n%s", err, &logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, &logs)
	}
}

// inImage runs name in the unpacked image: chrooted into root as the
// image's user when this process may do that (root, as in CI), else
// directly from root's copy of the binary, with paths inside the image
// mapped to root.
func inImage(root, name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		cmd := exec.Command(name, args...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: UID, Gid: UID}}
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CAPath}
		return cmd
	}
	for i, a := range args {
		if strings.HasPrefix(a, "/") {
			args[i] = filepath.Join(root, a)
		}
	}
	return exec.Command(filepath.Join(root, name), args...)
}

func runOK(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, &stdout, &stderr)
	}
	return stdout.String()
}

// openLayout reads the archive as an OCI image layout.
func openLayout(t *testing.T, archive string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI image layout: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("index: %v, %d manifests", err, len(m.Manifests))
	}
	if name := m.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; name == "" {
		t.Error("the index names no tag (org.opencontainers.image.ref.name)")
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digestOf(t *testing.T, archive string) v1.Hash {
	t.Helper()
	d, err := openLayout(t, archive).Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// unpack extracts the image's layers into root and returns each entry's
// mode and owner ("-rwxr-xr-x 0:0"); every entry must carry mtime.
func unpack(t *testing.T, img v1.Image, root string, mtime time.Time) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want one on an empty base", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = fmt.Sprintf("%v %d:%d", h.FileInfo().Mode(), h.Uid, h.Gid)
		if !h.ModTime.Equal(mtime) {
			t.Errorf("%s: mtime %v, want the build date %v", h.Name, h.ModTime, mtime)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, h.FileInfo().Mode().Perm()|os.ModeSticky&h.FileInfo().Mode()); err != nil {
				t.Fatal(err)
			}
			if os.Geteuid() == 0 {
				if err := os.Chown(p, h.Uid, h.Gid); err != nil {
					t.Fatal(err)
				}
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, h.FileInfo().Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("%s: unexpected type %c", h.Name, h.Typeflag)
		}
	}
	// The unpacked tree's top must be searchable by the image's user.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return files
}

func assertStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("/sluice is dynamically linked (it has an ELF interpreter): build it with CGO_ENABLED=0")
		}
	}
}

func countCerts(t *testing.T, pemBytes []byte) int {
	t.Helper()
	n := 0
	for rest := pemBytes; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Errorf("CA bundle: %v", err)
		}
		n++
	}
	return n
}

type fileBytes []byte

func (b fileBytes) String() string { return string(b) }

func readFile(t *testing.T, name string) fileBytes {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// deploy/Dockerfile, for users with Docker, builds an equivalent image:
// the same static build, binary and config paths, user, entrypoint,
// command, ports and labels (the created date comes from BuildKit's
// SOURCE_DATE_EPOCH there).
func TestDockerfileMatchesImage(t *testing.T) {
	t.Parallel()
	df := readFile(t, filepath.Join(repoRoot, "deploy/Dockerfile")).String()
	final := df[strings.LastIndex(df, "\nFROM "):]
	has := func(where, line string) {
		t.Helper()
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `\s*$`).MatchString(where) {
			t.Errorf("deploy/Dockerfile's final stage has no line %q", line)
		}
	}
	jsonList := func(l []string) string { b, _ := json.Marshal(l); return strings.ReplaceAll(string(b), ",", ", ") }
	has(final, "USER "+User)
	has(final, "ENTRYPOINT "+jsonList([]string{BinaryPath}))
	has(final, "CMD "+jsonList([]string{"serve", "-config", ConfigPath}))
	has(final, "EXPOSE "+HTTPPort+" "+AdminPort)
	has(final, "COPY --from=build /out/sluice "+BinaryPath)
	has(final, "COPY deploy/image/sluice.yaml "+ConfigPath)
	if !strings.Contains(final, "FROM gcr.io/distroless/static") {
		t.Error("the final stage is not distroless static")
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-buildvcs=false", "-X main.version=", "-X main.commit=", "-X main.date="} {
		if !strings.Contains(df, want) {
			t.Errorf("deploy/Dockerfile's build has no %s", want)
		}
	}
	for k := range (Options{}).Labels() {
		if k != "org.opencontainers.image.created" && !strings.Contains(final, k+"=") {
			t.Errorf("deploy/Dockerfile sets no label %s", k)
		}
	}
}

// Package chart lints and renders Sluice's Helm chart (deploy/helm/sluice)
// with Helm's own Go packages, pinned in deploy/tools/go.mod, as `helm
// lint` and `helm template` do: no helm binary and no cluster needed.
package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/strvals"
	"sigs.k8s.io/yaml"
)

// Release names the release a chart is rendered for, and the Kubernetes
// version it is rendered for (`helm template --kube-version`).
type Release struct {
	Name, Namespace string
	KubeVersion     string // e.g. v1.33.0; empty: DefaultKubeVersion
}

// DefaultKubeVersion is the Kubernetes version charts are rendered and
// linted for unless told otherwise. Fixed, because Helm's own default is
// derived from its client-go version, and is v1.20 inside tests.
const DefaultKubeVersion = "v1.33.0"

// DefaultRelease is what the tests and `make chart-template` render.
var DefaultRelease = Release{Name: "sluice", Namespace: "default", KubeVersion: DefaultKubeVersion}

func capabilities(kubeVersion string) (*common.Capabilities, error) {
	if kubeVersion == "" {
		kubeVersion = DefaultKubeVersion
	}
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	caps := *common.DefaultCapabilities
	caps.KubeVersion = *kv
	return &caps, nil
}

// Manifest is one rendered Kubernetes object.
type Manifest struct {
	Source  string         // the template it came from, e.g. sluice/templates/deployment.yaml
	Kind    string         // e.g. Deployment
	Name    string         // metadata.name
	Content string         // the YAML as rendered
	Object  map[string]any // the YAML decoded
}

// Values merges values files and --set expressions (Helm's syntax) in
// order, as `helm template -f FILE --set K=V` does.
func Values(files []string, sets []string) (map[string]any, error) {
	vals := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		vals = util.MergeTables(m, vals)
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return vals, nil
}

// Render renders the chart in dir with vals for rel, in the order Helm
// installs kinds, as `helm template` prints them (NOTES.txt apart).
func Render(dir string, vals map[string]any, rel Release) ([]Manifest, string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, "", err
	}
	caps, err := capabilities(rel.KubeVersion)
	if err != nil {
		return nil, "", err
	}
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, "", fmt.Errorf("chart requires kubeVersion %s, rendering for %s", ch.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, "", err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, "", err
	}
	notes := ""
	for name, content := range files {
		if strings.HasSuffix(name, "/NOTES.txt") {
			notes = content
			delete(files, name)
		}
	}
	hooks, sorted, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, "", err
	}
	if len(hooks) > 0 {
		return nil, "", fmt.Errorf("the chart has %d hooks; Sluice's has none", len(hooks))
	}
	out := make([]Manifest, 0, len(sorted))
	for _, m := range sorted {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(m.Content), &obj); err != nil {
			return nil, "", fmt.Errorf("%s: %w\n%s", m.Name, err, m.Content)
		}
		name, _ := obj["metadata"].(map[string]any)["name"].(string)
		out = append(out, Manifest{Source: m.Name, Kind: m.Head.Kind, Name: name, Content: m.Content, Object: obj})
	}
	return out, notes, nil
}

// Print writes manifests as `helm template` does.
func Print(ms []Manifest) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Source, strings.TrimSpace(m.Content))
	}
	return b.String()
}

// Lint runs Helm's chart linter (`helm lint`) with vals and returns its
// messages at warning level and above, and the informational ones.
func Lint(dir string, vals map[string]any) (problems, info []string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return []string{err.Error()}, nil
	}
	caps, err := capabilities("")
	if err != nil {
		return []string{err.Error()}, nil
	}
	res := lint.RunAll(abs, vals, DefaultRelease.Namespace, lint.WithKubeVersion(&caps.KubeVersion))
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			problems = append(problems, m.Error())
		} else {
			info = append(info, m.Error())
		}
	}
	return problems, info
}

package chart

import (
	"fmt"
	"sort"
	"strings"
)

// Summary is one line per rendered object with what a reviewer checks
// first: replicas, image, probes, grace period, env, mounts, ports, the
// config's fleet settings.
func Summary(ms []Manifest) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%-22s %-22s", m.Kind, m.Name)
		o := m.Object
		switch m.Kind {
		case "Deployment":
			pod := Dig(o, "spec", "template", "spec")
			fmt.Fprintf(&b, " replicas=%v", Dig(o, "spec", "replicas"))
			if g := Dig(pod, "terminationGracePeriodSeconds"); g != nil {
				fmt.Fprintf(&b, " grace=%vs", g)
			}
			for _, c := range List(pod, "containers") {
				fmt.Fprintf(&b, " image=%v", Dig(c, "image"))
				if p := Dig(c, "readinessProbe", "httpGet", "path"); p != nil {
					fmt.Fprintf(&b, " readiness=%v liveness=%v", p, Dig(c, "livenessProbe", "httpGet", "path"))
				}
				if s := Dig(c, "lifecycle", "preStop", "sleep", "seconds"); s != nil {
					fmt.Fprintf(&b, " preStop=sleep %vs", s)
				}
				var env []string
				for _, e := range List(c, "env") {
					env = append(env, fmt.Sprint(Dig(e, "name")))
				}
				for _, e := range List(c, "envFrom") {
					env = append(env, "secret:"+fmt.Sprint(Dig(e, "secretRef", "name")))
				}
				if len(env) > 0 {
					fmt.Fprintf(&b, " env=%s", strings.Join(env, ","))
				}
				var mounts []string
				for _, v := range List(c, "volumeMounts") {
					mounts = append(mounts, fmt.Sprintf("%v:%v", Dig(v, "name"), Dig(v, "mountPath")))
				}
				if len(mounts) > 0 {
					fmt.Fprintf(&b, " mounts=%s", strings.Join(mounts, ","))
				}
			}
		case "ConfigMap":
			data, _ := Dig(o, "data").(map[string]any)
			keys := make([]string, 0, len(data))
			for k := range data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprintf(&b, " data=%s", strings.Join(keys, ","))
		case "Service":
			var ports []string
			for _, p := range List(Dig(o, "spec"), "ports") {
				ports = append(ports, fmt.Sprintf("%v:%v->%v", Dig(p, "name"), Dig(p, "port"), Dig(p, "targetPort")))
			}
			fmt.Fprintf(&b, " type=%v ports=%s", orDefault(Dig(o, "spec", "type"), "ClusterIP"), strings.Join(ports, ","))
			if ip := Dig(o, "spec", "clusterIP"); ip != nil {
				fmt.Fprintf(&b, " clusterIP=%v", ip)
			}
		case "PodDisruptionBudget":
			fmt.Fprintf(&b, " maxUnavailable=%v", Dig(o, "spec", "maxUnavailable"))
		case "Secret":
			data, _ := Dig(o, "data").(map[string]any)
			keys := make([]string, 0, len(data))
			for k := range data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprintf(&b, " keys=%s", strings.Join(keys, ","))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func orDefault(v any, d string) any {
	if v == nil {
		return d
	}
	return v
}

// Dig follows keys through nested maps; nil when one is missing.
func Dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// List is Dig for a list of maps.
func List(v any, keys ...string) []map[string]any {
	l, _ := Dig(v, keys...).([]any)
	out := make([]map[string]any, 0, len(l))
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

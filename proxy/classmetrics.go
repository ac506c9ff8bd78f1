package proxy

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// classMetrics are the request path's handles for one class of one
// provider: its queue wait histogram and its rejections by reason.
type classMetrics struct {
	queueWait prometheus.Observer
	// rejected counts each rejection row under
	// sluice_rejected_requests_total{reason, class}; other rows are nil.
	rejected [numOutcomes]prometheus.Counter
}

// forClasses resolves the class handles of provider for the classes names
// (priority order) of the config being applied, and deletes the series of
// classes the provider had before and no longer has.
func (m *Metrics) forClasses(provider string, names []string) []classMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, old := range m.classes[provider] {
		if !slices.Contains(names, old) {
			l := prometheus.Labels{"provider": provider, "class": old}
			m.rejected.DeletePartialMatch(l)
			m.queueWait.DeletePartialMatch(l)
		}
	}
	m.classes[provider] = slices.Clone(names)
	out := make([]classMetrics, len(names))
	for i, c := range names {
		out[i].queueWait = m.queueWait.WithLabelValues(provider, c)
		for o := outcome(0); o < numOutcomes; o++ {
			if !outcomes[o].admitted && o != outNoRoute {
				out[i].rejected[o] = m.rejected.WithLabelValues(provider, o.String(), c)
			}
		}
	}
	return out
}

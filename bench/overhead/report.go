package overhead

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Command is how the report says it was made.
const Command = "sluice-bench overhead -out docs/bench"

// find returns the measurement for mode, concurrency and target, or nil.
func (r *Report) find(mode string, c int, target string) *Measurement {
	for i := range r.Runs {
		m := &r.Runs[i]
		if m.Mode == mode && m.Concurrency == c && m.Target == target {
			return m
		}
	}
	return nil
}

func (r *Report) hasNginx() bool { return r.find("json", r.Concurrency[0], "nginx") != nil }

// Added is the latency a proxy adds at one concurrency: the difference
// between its percentiles and the direct run's.
type Added struct {
	P50, P99 time.Duration
}

// AddedLatency returns what target adds over direct for mode and c: for
// json the whole answer, for sse the first token.
func (r *Report) AddedLatency(mode string, c int, target string) (Added, bool) {
	d, p := r.find(mode, c, "direct"), r.find(mode, c, target)
	if d == nil || p == nil {
		return Added{}, false
	}
	dl, pl := d.Total, p.Total
	if mode == "sse" {
		dl, pl = d.TTFT, p.TTFT
	}
	return Added{P50: pl.P50 - dl.P50, P99: pl.P99 - dl.P99}, true
}

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# Overhead: direct vs through Sluice\n\n")
	fmt.Fprintf(&b, "Made by `%s` on %s, %s. Sluice, the upstream (`sluice-bench sim`: no capacity limit, "+
		"tokens without delay) and nginx run as separate processes on 127.0.0.1; the load generator runs in "+
		"the sluice-bench process, so all of them share the machine's cores. Each row is %v of closed-loop "+
		"clients without think time; targets alternate at each concurrency. Sluice runs gradient2 with "+
		"min = ceiling = 20,000 (the controller does its work, the limit never binds). CPU is utime+stime "+
		"of the proxy process (nginx: master and workers) during the row, per 1,000 completed requests. "+
		"Added latency is the proxied percentile minus the direct percentile of the same row.\n\n",
		Command, r.Started.Format("2006-01-02"), r.Machine, r.Duration)
	nginx := r.hasNginx()
	for _, mode := range []string{"json", "sse"} {
		if mode == "json" {
			fmt.Fprintf(&b, "## Non-streaming JSON (%d-token answer, ~200-byte request)\n\nLatency is the whole answer.\n\n", r.Tokens)
		} else {
			fmt.Fprintf(&b, "## SSE streams (%d tokens, %d events)\n\nLatency is the time to the first token; the stream's total time is in the last columns.\n\n", r.Tokens, r.Tokens+3)
		}
		head := "| clients | direct req/s | Sluice req/s | direct p50 / p99 | Sluice p50 / p99 | **added by Sluice p50 / p99** | Sluice CPU per 1k req |"
		sep := "|--:|--:|--:|--:|--:|--:|--:|"
		if nginx {
			head += " nginx req/s | added by nginx p50 / p99 | nginx CPU per 1k req |"
			sep += "--:|--:|--:|"
		}
		if mode == "sse" {
			head += " total direct / Sluice p50 |"
			sep += "--:|"
		}
		b.WriteString(head + "\n" + sep + "\n")
		for _, c := range r.Concurrency {
			d, s := r.find(mode, c, "direct"), r.find(mode, c, "sluice")
			if d == nil || s == nil {
				continue
			}
			lat := func(m *Measurement) (time.Duration, time.Duration) {
				if mode == "sse" {
					return m.TTFT.P50, m.TTFT.P99
				}
				return m.Total.P50, m.Total.P99
			}
			d50, d99 := lat(d)
			s50, s99 := lat(s)
			add, _ := r.AddedLatency(mode, c, "sluice")
			fmt.Fprintf(&b, "| %d | %.0f | %.0f | %s / %s us | %s / %s us | **%s / %s us** | %s |", c, d.RPS, s.RPS,
				us(d50), us(d99), us(s50), us(s99), signed(add.P50), signed(add.P99), ms(s.CPUPer1k()))
			if nginx {
				if n := r.find(mode, c, "nginx"); n != nil {
					na, _ := r.AddedLatency(mode, c, "nginx")
					fmt.Fprintf(&b, " %.0f | %s / %s us | %s |", n.RPS, signed(na.P50), signed(na.P99), ms(n.CPUPer1k()))
				} else {
					b.WriteString(" – | – | – |")
				}
			}
			if mode == "sse" {
				fmt.Fprintf(&b, " %s / %s us |", us(d.Total.P50), us(s.Total.P50))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	b.WriteString("## Memory\n\n| process | RSS |\n|---|--:|\n")
	fmt.Fprintf(&b, "| Sluice after start and warm-up | %s |\n", mib(r.SluiceIdle.RSS))
	fmt.Fprintf(&b, "| Sluice peak during the runs above (VmHWM) | %s |\n", mib(r.SluicePeak.Peak))
	if nginx {
		fmt.Fprintf(&b, "| nginx peak during the runs above (VmHWM, master + workers) | %s |\n", mib(r.NginxPeak.Peak))
	}
	if s := r.Streams; s != nil {
		fmt.Fprintf(&b, "| Sluice (fresh process) idle | %s |\n", mib(s.Idle.RSS))
		fmt.Fprintf(&b, "| **Sluice with %d open streams** (opened in %v) | **%s** (peak %s; %.1f KiB per stream) |\n",
			s.Open, s.OpenIn.Round(100*time.Millisecond), mib(s.Loaded.RSS), mib(s.Loaded.Peak), float64(s.PerStream())/1024)
		if s.Open < s.Requested {
			fmt.Fprintf(&b, "| Sluice with %d open streams, **extrapolated** (idle + %d x per stream) | **%s** |\n",
				s.Requested, s.Requested, mib(s.AtRequested()))
		}
		fmt.Fprintf(&b, "| upstream simulator with the same streams | %s |\n", mib(s.Upstream.RSS))
		fmt.Fprintf(&b, "\nThe streams send one token every 2 s; each holds a client connection and an upstream "+
			"connection in Sluice, so Sluice needs two file descriptors per stream. Open-file limit for the processes: %d",
			r.FileLimit)
		if s.Open < s.Requested {
			fmt.Fprintf(&b, " (could not be raised: %d streams did not fit, hence the extrapolation)", s.Requested)
		}
		b.WriteString(".\n")
	}
	return b.String()
}

func signed(d time.Duration) string {
	if d >= 0 {
		return "+" + us(d)
	}
	return "−" + us(-d)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// WriteReport writes overhead.md and overhead.json into dir and returns the
// Markdown file's path.
func WriteReport(dir string, r *Report) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	js, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "overhead.json"), append(js, '\n'), 0o644); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "overhead.md")
	return path, os.WriteFile(path, []byte(r.Markdown()), 0o644)
}

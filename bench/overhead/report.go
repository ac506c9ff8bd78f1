package overhead

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Command is how the report says it was made.
const Command = "sluice-bench overhead -nginx auto -haproxy auto -rounds 3 -out docs/bench"

// Cell is the median over rounds of one target in one case.
type Cell struct {
	N         int // rounds
	RPS       float64
	P50, P99  time.Duration // TTFT for streams, whole answer for JSON
	CPUPer1k  time.Duration
	ProxyCPU  time.Duration // per measurement
	TotalP50  time.Duration
	Available bool
}

// Median returns the median over rounds of target t in case name.
func (r *Report) Median(name, t string) Cell {
	var c Case
	for _, x := range r.Cases {
		if x.Name == name {
			c = x
		}
	}
	var rps []float64
	var p50, p99, cpu, pcpu, tot []time.Duration
	for i := range r.Runs {
		m := &r.Runs[i]
		if m.Case != name || m.Target != t {
			continue
		}
		rps = append(rps, m.RPS)
		lat := m.Total
		if c.Stream {
			lat = m.TTFT
		}
		p50, p99 = append(p50, lat.P50), append(p99, lat.P99)
		cpu, pcpu, tot = append(cpu, m.CPUPer1k()), append(pcpu, m.ProxyCPU), append(tot, m.Total.P50)
	}
	if len(rps) == 0 {
		return Cell{}
	}
	return Cell{N: len(rps), RPS: median(rps), P50: median(p50), P99: median(p99), CPUPer1k: median(cpu),
		ProxyCPU: median(pcpu), TotalP50: median(tot), Available: true}
}

func median[T int64 | float64 | time.Duration](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// label is a target's name in the report.
func label(t string) string {
	switch t {
	case Direct:
		return "direct"
	case Nginx:
		return "nginx"
	case HAProxy:
		return "HAProxy"
	case Sluice:
		return "Sluice (fixed)"
	case SluiceG2:
		return "Sluice (gradient2)"
	case SluiceB:
		return "Sluice B (fixed)"
	case SluiceP1:
		return "Sluice (fixed, GOMAXPROCS=1)"
	}
	return t
}

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# Overhead: direct vs nginx, HAProxy and Sluice\n\n")
	fmt.Fprintf(&b, "Made by `%s` on %s, %s. The proxies, the upstream (`sluice-bench sim`: no capacity limit) "+
		"and the load generator (in the sluice-bench process) run as separate processes on 127.0.0.1 and share "+
		"the machine's cores. Each measurement is %v of closed-loop clients without think time; %d round(s), "+
		"every case against every target in each, the targets' order rotated; figures are medians over rounds. "+
		"Load average (1 min) at the start of each round: %s. CPU is utime+stime of the proxy process (nginx: "+
		"master and workers) during the measurement, per 1,000 completed requests. Added latency is the proxied "+
		"p50 minus the direct p50 of the same round's medians. Sluice (fixed): `algorithm: fixed`; Sluice "+
		"(gradient2): the default algorithm with min = initial = ceiling (the controller does its work, the limit "+
		"never binds); both with metrics on and tracing off. ",
		Command, r.Started.Format("2006-01-02"), r.Machine, r.Duration, r.Rounds, loads(r.Load))
	if slices.Contains(r.Targets, SluiceP1) {
		b.WriteString("Sluice (fixed, GOMAXPROCS=1) is the same as Sluice (fixed) with the Go scheduler limited to one " +
			"processor (`GOMAXPROCS=1` in its environment). ")
	}
	if slices.Contains(r.Targets, SluiceB) {
		b.WriteString("Sluice B (fixed) is another build of Sluice (`-compare-sluice`) with the same config as Sluice (fixed).")
	}
	b.WriteString("\n\n")
	b.WriteString(r.summary())
	for _, c := range r.Cases {
		r.caseTable(&b, c)
	}
	r.memoryTable(&b)
	return b.String()
}

func loads(l []float64) string {
	s := make([]string, len(l))
	for i, v := range l {
		s[i] = fmt.Sprintf("%.2f", v)
	}
	return strings.Join(s, ", ")
}

// summary is one row per case: completed requests/s and CPU per 1,000
// requests of every target.
func (r *Report) summary() string {
	var b strings.Builder
	b.WriteString("## Summary\n\n| case |")
	sep := "|---|"
	for _, t := range r.Targets {
		fmt.Fprintf(&b, " %s ok/s |", label(t))
		sep += "--:|"
	}
	for _, t := range r.Targets[1:] {
		fmt.Fprintf(&b, " %s CPU ms/1k |", label(t))
		sep += "--:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, c := range r.Cases {
		fmt.Fprintf(&b, "| %s |", c.Name)
		for _, t := range r.Targets {
			fmt.Fprintf(&b, " %s |", r.cellRPS(c.Name, t))
		}
		for _, t := range r.Targets[1:] {
			if m := r.Median(c.Name, t); m.Available {
				fmt.Fprintf(&b, " %.1f |", ms(m.CPUPer1k))
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	return b.String()
}

func (r *Report) cellRPS(name, t string) string {
	m := r.Median(name, t)
	if !m.Available {
		return "–"
	}
	return fmt.Sprintf("%.0f", m.RPS)
}

// caseTable is one case, a row per target.
func (r *Report) caseTable(b *strings.Builder, c Case) {
	fmt.Fprintf(b, "## %s: %s\n\n", c.Name, c.Describe())
	lat := "answer"
	if c.Stream {
		lat = "TTFT"
	}
	fmt.Fprintf(b, "| target | ok/s | vs direct | %s p50 / p99 | added p50 | proxy CPU per 1k | vs nginx |", lat)
	if c.Stream {
		b.WriteString(" stream total p50 |")
	}
	b.WriteString("\n|---|--:|--:|--:|--:|--:|--:|")
	if c.Stream {
		b.WriteString("--:|")
	}
	b.WriteString("\n")
	d, n := r.Median(c.Name, Direct), r.Median(c.Name, Nginx)
	for _, t := range r.Targets {
		m := r.Median(c.Name, t)
		if !m.Available {
			continue
		}
		vs, added, cpu, vsn := "", "", "", ""
		if d.Available && d.RPS > 0 {
			vs = fmt.Sprintf("%.3fx", m.RPS/d.RPS)
		}
		if t != Direct {
			added = signed(m.P50 - d.P50)
			cpu = fmt.Sprintf("%.1f ms", ms(m.CPUPer1k))
			if n.Available && n.CPUPer1k > 0 {
				vsn = fmt.Sprintf("%.2fx", float64(m.CPUPer1k)/float64(n.CPUPer1k))
			}
		}
		fmt.Fprintf(b, "| %s | %.0f | %s | %s / %s us | %s | %s | %s |", label(t), m.RPS, vs, us(m.P50), us(m.P99), added, cpu, vsn)
		if c.Stream {
			fmt.Fprintf(b, " %s us |", us(m.TotalP50))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func (r *Report) memoryTable(b *strings.Builder) {
	b.WriteString("## Memory\n\n| process | RSS |\n|---|--:|\n")
	for _, t := range r.Targets[1:] {
		fmt.Fprintf(b, "| %s after start and warm-up | %s |\n", label(t), mib(r.Idle[t].RSS))
		fmt.Fprintf(b, "| %s peak during the runs above (VmHWM) | %s |\n", label(t), mib(r.Peak[t].Peak))
	}
	for _, t := range r.Targets {
		s := r.Streams[t]
		if s == nil {
			continue
		}
		procs := ""
		if s.Procs > 1 {
			procs = fmt.Sprintf(", %d processes summed", s.Procs)
		}
		fmt.Fprintf(b, "| %s (fresh process%s) idle | %s |\n", label(t), procs, mib(s.Idle.RSS))
		fmt.Fprintf(b, "| **%s with %d open streams** (opened in %v%s) | **%s** (%.1f KiB per stream) |\n",
			label(t), s.Open, s.OpenIn.Round(100*time.Millisecond), procs, mib(s.Loaded.RSS), float64(s.PerStream())/1024)
		fmt.Fprintf(b, "| upstream simulator with the same streams | %s |\n", mib(s.Upstream.RSS))
	}
	if len(r.Streams) > 0 {
		fmt.Fprintf(b, "\nThe streams send one token every 2 s; each holds a client connection and an upstream "+
			"connection in Sluice, so Sluice needs two file descriptors per stream. Open-file limit for the "+
			"processes: %d; where one process cannot hold them all, the streams are shared out between several "+
			"Sluice processes and their RSS summed, each process's baseline included.\n", r.FileLimit)
	}
}

func signed(d time.Duration) string {
	if d >= 0 {
		return "+" + us(d) + " us"
	}
	return "−" + us(-d) + " us"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

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

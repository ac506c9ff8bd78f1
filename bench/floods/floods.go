// Package floods reproduces connection and body floods against a running
// Sluice and measures what a well-behaved client sees meanwhile: its
// success rate and latency. The floods are the audit's: connections that
// declare large bodies and send nothing (the buffer budget), connections
// that send nothing at all (the connection caps), and connections left
// idle after one request (keep-alive). Everything stays on loopback and is
// bounded in connections and time.
package floods

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kinds of flood.
const (
	None   = "none"   // the client alone
	Bodies = "bodies" // POSTs declaring BodyDecl bytes, sending only the body's first byte
	Conns  = "conns"  // connections that send nothing
	Idle   = "idle"   // connections that complete one request, then stay idle
)

// Config is one run.
type Config struct {
	// Target is Sluice's URL of an OpenAI-shaped route, e.g.
	// http://127.0.0.1:8080/openai (requests go to Target/v1/chat/completions).
	Target string
	Flood  string
	// Conns is the number of flood connections, dialled from the
	// addresses of From in turn (loopback addresses other than the
	// client's, e.g. 127.0.0.2, so that per-address caps tell them apart).
	Conns int
	From  []string
	// BodyDecl is the Content-Length the Bodies flood declares.
	BodyDecl int
	// Workers run the well-behaved client's closed loop for Duration, each
	// request with a body of BodySize bytes and a deadline of Timeout.
	Workers  int
	Duration time.Duration
	BodySize int
	Timeout  time.Duration
	Logf     func(format string, a ...any)
}

// Result is what the client saw.
type Result struct {
	Flood    string
	Opened   int // flood connections established
	Held     int // of those, still open when the client started
	Requests int
	OK       int
	Statuses map[int]int // non-200 answers by status
	Errors   int         // no answer (refused, reset, timed out)
	P50, P99 time.Duration
}

// Line formats r as a row of the table in BENCHMARKS.md.
func (r Result) Line(label string) string {
	var other []string
	for _, s := range slices.Sorted(func(yield func(int) bool) {
		for s := range r.Statuses {
			if !yield(s) {
				return
			}
		}
	}) {
		other = append(other, fmt.Sprintf("%d×%d", r.Statuses[s], s))
	}
	if r.Errors > 0 {
		other = append(other, fmt.Sprintf("%d×no answer", r.Errors))
	}
	if len(other) == 0 {
		other = []string{"-"}
	}
	ok := 0.0
	if r.Requests > 0 {
		ok = 100 * float64(r.OK) / float64(r.Requests)
	}
	return fmt.Sprintf("| %s | %s | %d / %d | %d | %.1f%% | %s | %s | %s |", label, r.Flood, r.Held, r.Opened, r.Requests, ok,
		fmtDur(r.P50), fmtDur(r.P99), strings.Join(other, ", "))
}

func fmtDur(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// Run sets up the flood, runs the client beside it, then closes the flood.
func Run(ctx context.Context, cfg Config) (Result, error) {
	u, err := url.Parse(strings.TrimSuffix(cfg.Target, "/"))
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return Result{}, fmt.Errorf("target %q: want http://host:port/prefix", cfg.Target)
	}
	switch cfg.Flood {
	case None, Bodies, Conns, Idle:
	default:
		return Result{}, fmt.Errorf("unknown flood %q (none, bodies, conns, idle)", cfg.Flood)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	path := u.Path + "/v1/chat/completions"
	res := Result{Flood: cfg.Flood, Statuses: map[int]int{}}

	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	if cfg.Flood != None {
		flood, err = openFlood(ctx, cfg, u.Host, path)
		if err != nil {
			return res, err
		}
		res.Opened = len(flood)
		time.Sleep(time.Second) // Sluice accepts what the kernel queued
		res.Held = stillOpen(flood)
		cfg.Logf("%s: %d flood connections opened, %d still open", cfg.Flood, res.Opened, res.Held)
	}

	body := []byte(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"` +
		strings.Repeat("x", max(0, cfg.BodySize-70)) + `"}]}`)
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Workers, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: cfg.Timeout}
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	end := time.Now().Add(cfg.Duration)
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				t0 := time.Now()
				resp, err := client.Post("http://"+u.Host+path, "application/json", strings.NewReader(string(body)))
				status := 0
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				d := time.Since(t0)
				mu.Lock()
				res.Requests++
				switch {
				case err != nil:
					res.Errors++
				case status == 200:
					res.OK++
					lat = append(lat, d)
				default:
					res.Statuses[status]++
				}
				mu.Unlock()
				if err != nil || status != 200 {
					time.Sleep(50 * time.Millisecond) // a client backs off a little
				}
			}
		}()
	}
	wg.Wait()
	if len(lat) > 0 {
		slices.Sort(lat)
		res.P50, res.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return res, nil
}

// openFlood opens cfg.Conns flood connections, 64 at a time.
func openFlood(ctx context.Context, cfg Config, host, path string) ([]net.Conn, error) {
	if len(cfg.From) == 0 {
		return nil, errors.New("no -from address for the flood")
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Conns || ctx.Err() != nil {
					return
				}
				from := cfg.From[i%len(cfg.From)]
				d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
				c, err := d.DialContext(ctx, "tcp", host)
				if err != nil {
					continue
				}
				if !startFlood(c, cfg, host, path) {
					c.Close()
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return conns, ctx.Err()
}

// startFlood puts c in the flood's state; false if Sluice would not have
// it.
func startFlood(c net.Conn, cfg Config, host, path string) bool {
	switch cfg.Flood {
	case Bodies:
		// The first byte gets the request past fasthttp to Sluice's
		// handler, which reads the body.
		_, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", path, host, cfg.BodyDecl)
		return err == nil
	case Idle:
		const body = `{"model":"m","max_tokens":1,"messages":[]}`
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, host, len(body), body); err != nil {
			return false
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_ = c.SetDeadline(time.Time{})
		return resp.StatusCode == 200 && !resp.Close
	}
	return true // Conns: nothing to send
}

// stillOpen counts the connections Sluice has neither answered nor closed:
// a read finds nothing within a millisecond.
func stillOpen(conns []net.Conn) int {
	var n atomic.Int64
	var wg sync.WaitGroup
	ch := make(chan net.Conn)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [1]byte
			for c := range ch {
				_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
				_, err := c.Read(b[:])
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					n.Add(1)
				}
				_ = c.SetReadDeadline(time.Time{})
			}
		}()
	}
	for _, c := range conns {
		ch <- c
	}
	close(ch)
	wg.Wait()
	return int(n.Load())
}

package load

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// errStopped is returned by the dialer once the run is over.
var errStopped = errors.New("load: run stopped")

// client sends requests to one address over a fasthttp pool whose
// connections it tracks, so that stop can end every request in progress
// (fasthttp's Do takes no context).
type client struct {
	hc      *fasthttp.HostClient
	uri     string
	host    string
	dialect dialect
	extra   [][2]string
	sim     bool
	model   string
	stream  bool
	maxTok  MaxTokens
	// sdk sends x-stainless-retry-count on every attempt; readTimeout
	// bounds every read (the SDKs' httpx read timeout, 0: none) and, when
	// set, is sent as x-stainless-read-timeout (readTimeoutHdr);
	// callTimeoutHdr is the Anthropic SDK's x-stainless-timeout ("" for
	// the others).
	sdk            SDK
	readTimeout    time.Duration
	readTimeoutHdr string
	callTimeoutHdr string
	// tenantHeader is the credential header (Authorization for OpenAI
	// paths, x-api-key for Anthropic ones) and tenantKeys its value for
	// each tenant; none without Config.Tenants.
	tenantHeader string
	tenantKeys   []string
	// rotate counts the keys sent with Config.RotateKeys (0: off).
	rotate     bool
	rotated    atomic.Uint64
	rotateHdr  string
	rotateBear bool

	mu      sync.Mutex
	conns   map[*trackedConn]struct{}
	stopped bool
}

type trackedConn struct {
	net.Conn
	c    *client
	once sync.Once
}

// Read bounds each read by the client's read timeout, as httpx's read
// timeout does: a response may take any time as long as no single wait for
// bytes (its headers, a piece of its body) takes longer.
func (t *trackedConn) Read(p []byte) (int, error) {
	if d := t.c.readTimeout; d > 0 {
		_ = t.Conn.SetReadDeadline(time.Now().Add(d))
	}
	return t.Conn.Read(p)
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.c.mu.Lock()
		delete(t.c.conns, t)
		t.c.mu.Unlock()
	})
	return t.Conn.Close()
}

// newClient builds the client of cfg; timeout is the resolved read
// timeout (0: none).
func newClient(cfg *Config, maxConns int, timeout time.Duration) (*client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("load: URL: %w", err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("load: URL %q: want http://host:port/path", cfg.URL)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	c := &client{
		uri:     cfg.URL,
		host:    u.Host,
		dialect: dialectOf(u.Path),
		sim:     cfg.SimHeaders,
		model:   cfg.Model,
		stream:  cfg.Stream,
		maxTok:  cfg.MaxTokens,
		conns:   make(map[*trackedConn]struct{}),

		sdk:         cfg.SDK,
		readTimeout: timeout,
	}
	for k := range cfg.Tenants {
		key := TenantKey(k)
		c.tenantHeader = "Authorization"
		if c.dialect == dialectAnthropic {
			c.tenantHeader = "x-api-key"
		} else {
			key = "Bearer " + key
		}
		c.tenantKeys = append(c.tenantKeys, key)
	}
	if cfg.RotateKeys {
		c.rotate, c.rotateHdr, c.rotateBear = true, "Authorization", c.dialect != dialectAnthropic
		if !c.rotateBear {
			c.rotateHdr = "x-api-key"
		}
	}
	if c.sdk != SDKNone && timeout > 0 {
		c.readTimeoutHdr = timeoutSeconds(timeout)
	}
	if c.sdk == SDKAnthropic {
		// Messages.create gives a non-stream call on a client with the
		// default timeout its own Timeout(600); every other call has
		// none, and the header says so in Python's words.
		c.callTimeoutHdr = "NOT_GIVEN"
		if !c.stream && timeout == DefaultTimeout {
			c.callTimeoutHdr = timeoutSeconds(DefaultTimeout)
		}
	}
	if c.model == "" {
		c.model = "sim-model"
	}
	for k, v := range cfg.Headers {
		c.extra = append(c.extra, [2]string{k, v})
	}
	c.hc = &fasthttp.HostClient{
		Addr:                          addr,
		Dial:                          c.dial,
		MaxConns:                      maxConns,
		MaxConnWaitTimeout:            time.Minute,
		MaxIdemponentCallAttempts:     1,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		ReadBufferSize:                8 << 10,
		WriteBufferSize:               8 << 10,
	}
	return c, nil
}

func (c *client) dial(addr string) (net.Conn, error) {
	c.mu.Lock()
	stopped := c.stopped
	c.mu.Unlock()
	if stopped {
		return nil, errStopped
	}
	nc, err := net.DialTimeout("tcp", addr, connectTimeout)
	if err != nil {
		return nil, err
	}
	t := &trackedConn{Conn: nc, c: c}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		nc.Close()
		return nil, errStopped
	}
	c.conns[t] = struct{}{}
	c.mu.Unlock()
	return t, nil
}

// stop refuses new connections and closes every open one, which ends each
// request in progress with an error.
func (c *client) stop() {
	c.mu.Lock()
	c.stopped = true
	conns := make([]*trackedConn, 0, len(c.conns))
	for t := range c.conns {
		conns = append(conns, t)
	}
	c.mu.Unlock()
	for _, t := range conns {
		_ = t.Close()
	}
	c.hc.CloseIdleConnections()
}

// prompt text: bytes/4 is the usual token estimate (Sluice's and the sim's).
var promptText = strings.Repeat("lorem ipsum dolor sit amet ", 1<<14) // 432 KiB

const maxPromptBytes = 27 << 14

// appendBody renders the request body for the given sizes; max_tokens is
// as c.maxTok says.
func (c *client) appendBody(b []byte, prompt, output int) []byte {
	b = append(b, `{"model":"`...)
	b = append(b, c.model...)
	b = append(b, `","stream":`...)
	b = strconv.AppendBool(b, c.stream)
	if n := c.maxTok.value(output); n > 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(n), 10)
	}
	b = append(b, `,"messages":[{"role":"user","content":"`...)
	n := min(max(prompt*4-40, 1), maxPromptBytes)
	b = append(b, promptText[:n]...)
	return append(b, `"}]}`...)
}

// exchange is one request's reusable state.
type exchange struct {
	req  fasthttp.Request
	resp fasthttp.Response
	body []byte
	buf  []byte
	gaps []time.Duration
	// ans is what the SDK's retry rules read of the last attempt.
	ans answer
}

// do sends the attempt rec describes (its sizes, Retry and Tenant) and
// fills in the rest of rec and x.ans. onFirst, if not nil, gets a
// stream's TTFT when it happens.
func (c *client) do(x *exchange, rec *Record, onFirst func(time.Duration)) {
	prompt, output := rec.PromptTokens, rec.OutputTokens
	req, resp := &x.req, &x.resp
	req.Reset()
	resp.Reset()
	x.gaps = x.gaps[:0]
	x.ans = answer{}
	req.SetRequestURI(c.uri)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetHost(c.host)
	req.Header.SetContentType("application/json")
	if c.dialect == dialectAnthropic {
		req.Header.Set("anthropic-version", "2023-06-01")
	}
	if c.sim {
		if output > 0 {
			req.Header.Set("x-sim-output-tokens", strconv.Itoa(output))
		}
		req.Header.Set("x-sim-prompt-tokens", strconv.Itoa(prompt))
	}
	if c.sdk != SDKNone {
		// Before the caller's headers, which replace them as an SDK's
		// extra_headers do.
		req.Header.Set("x-stainless-retry-count", strconv.Itoa(rec.Retry))
		if c.readTimeoutHdr != "" {
			req.Header.Set("x-stainless-read-timeout", c.readTimeoutHdr)
		}
		if c.callTimeoutHdr != "" {
			req.Header.Set("x-stainless-timeout", c.callTimeoutHdr)
		}
	}
	for _, kv := range c.extra {
		req.Header.Set(kv[0], kv[1])
	}
	if len(c.tenantKeys) > 0 {
		req.Header.Set(c.tenantHeader, c.tenantKeys[rec.Tenant])
	}
	if c.rotate {
		key := "sk-rotate-" + strconv.FormatUint(c.rotated.Add(1), 10)
		if c.rotateBear {
			key = "Bearer " + key
		}
		req.Header.Set(c.rotateHdr, key)
	}
	x.body = c.appendBody(x.body[:0], prompt, output)
	req.SetBodyRaw(x.body)
	resp.StreamBody = c.stream

	start := time.Now()
	err := c.hc.Do(req, resp)
	rec.TTFB = time.Since(start)
	if err != nil {
		// No answer (or, for a whole answer, not all of it): a connection
		// error or a timeout, which the SDKs retry.
		rec.Total = rec.TTFB
		rec.TTFB = 0
		rec.Outcome, rec.Reason = Failed, errReason(err)
		return
	}
	rec.Status = resp.StatusCode()
	x.ans.status = rec.Status
	rejected := false
	if v := resp.Header.Peek("X-Sluice-Rejected"); len(v) > 0 {
		rec.Reason, rejected = string(v), true
	} else if v := resp.Header.Peek("X-Sluice-Error"); len(v) > 0 {
		rec.Reason = string(v)
	}
	if rec.Status != fasthttp.StatusOK {
		x.ans.read(&resp.Header)
		rec.RetryAfter = retryAfter(&x.ans)
	}
	if rec.Status != fasthttp.StatusOK || !c.stream || resp.BodyStream() == nil {
		body := resp.Body() // reads and closes a body stream
		rec.Total = time.Since(start)
		rec.Outcome = classify(rec.Status, rejected)
		if rec.Outcome == OK {
			if c.stream {
				// A stream answered in one piece (buffered by something).
				n := c.dialect.tokens().count(body)
				rec.Tokens, rec.TTFT, rec.LastToken = n, rec.Total, rec.Total
				if !bytes.Contains(body, c.dialect.done()) {
					rec.Outcome, rec.Reason = Failed, "incomplete stream"
				}
			} else {
				rec.Tokens = usageTokens(body, output)
			}
		}
		return
	}
	c.readStream(x, rec, start, onFirst)
}

// readStream consumes an SSE body, timing the first token and the gaps
// between tokens.
func (c *client) readStream(x *exchange, rec *Record, start time.Time, onFirst func(time.Duration)) {
	resp := &x.resp
	if cap(x.buf) == 0 {
		x.buf = make([]byte, 16<<10)
	}
	tok := c.dialect.tokens()
	done := newMatcher(c.dialect.done(), false)
	r := resp.BodyStream()
	var last time.Duration
	finished := false
	var rerr error
	for {
		n, err := r.Read(x.buf[:cap(x.buf)])
		if n > 0 {
			now := time.Since(start)
			k := tok.count(x.buf[:n])
			if done.count(x.buf[:n]) > 0 {
				finished = true
			}
			if k > 0 {
				if rec.Tokens == 0 {
					rec.TTFT = now
					if onFirst != nil {
						onFirst(now)
					}
				} else {
					gap := now - last
					x.gaps = append(x.gaps, gap)
					rec.MaxGap = max(rec.MaxGap, gap)
				}
				for range k - 1 {
					x.gaps = append(x.gaps, 0)
				}
				rec.Tokens += k
				last = now
				rec.LastToken = now
			}
		}
		if err != nil {
			if err != io.EOF {
				rerr = err
			}
			break
		}
	}
	rec.Total = time.Since(start)
	_ = resp.CloseBodyStream()
	switch {
	case rerr != nil:
		rec.Outcome, rec.Reason = Failed, errReason(rerr)
	case !finished:
		rec.Outcome, rec.Reason = Failed, "stream ended without its terminal event"
	default:
		rec.Outcome = OK
	}
	x.ans.afterHeaders = rec.Outcome != OK
}

// errReason names a transport error for Record.Reason: "timeout" for a
// read (or connect) that took longer than allowed, else the error's text.
func errReason(err error) string {
	var ne net.Error
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return "timeout"
	}
	return err.Error()
}

// usageTokens reads the output tokens of a whole (non-stream) answer from
// its usage: completion_tokens (OpenAI Chat Completions), else
// output_tokens (Anthropic Messages, OpenAI Responses). When the body has
// neither it returns def, the size that was asked for.
func usageTokens(body []byte, def int) int {
	for _, key := range [...][]byte{[]byte(`"completion_tokens":`), []byte(`"output_tokens":`)} {
		i := bytes.LastIndex(body, key)
		if i < 0 {
			continue
		}
		n, digits := 0, 0
		for _, c := range body[i+len(key):] {
			if c == ' ' && digits == 0 {
				continue
			}
			if c < '0' || c > '9' || digits == 9 {
				break
			}
			n, digits = n*10+int(c-'0'), digits+1
		}
		if digits > 0 {
			return n
		}
	}
	return def
}

// classify maps a non-stream (or non-200) answer to an outcome: Sluice's
// refusals carry X-Sluice-Rejected (429 over_share, 503 when the provider
// is at its limit); a 429, 529 or 503 without it is the provider's.
func classify(status int, sluiceRejected bool) Outcome {
	switch {
	case status == fasthttp.StatusOK:
		return OK
	case sluiceRejected:
		return RejectedSluice
	case status == fasthttp.StatusTooManyRequests || status == 529 || status == fasthttp.StatusServiceUnavailable:
		return RejectedUpstream
	}
	return Failed
}

// read copies the headers the SDKs' retry rules read from a refusal. Names
// are matched without regard to case, as httpx does (the client keeps
// names as sent: a provider's "retry-after" is not Sluice's "Retry-After").
func (a *answer) read(h *fasthttp.ResponseHeader) {
	for k, v := range h.All() {
		switch {
		case bytes.EqualFold(k, hdrShouldRetry):
			a.shouldRetry = string(v)
		case bytes.EqualFold(k, hdrRetryAfterMs):
			a.retryAfterMs, a.hasRetryAfterMs = string(v), true
		case bytes.EqualFold(k, hdrRetryAfter):
			a.retryAfter, a.hasRetryAfter = string(v), true
		}
	}
}

var (
	hdrShouldRetry  = []byte("x-should-retry")
	hdrRetryAfterMs = []byte("retry-after-ms")
	hdrRetryAfter   = []byte("retry-after")
)

// retryAfter is the wait a refusal asks for, as the SDKs read it
// (retry-after-ms, else Retry-After in seconds or as a date); 0 when it
// names none, or none above 0.
func retryAfter(a *answer) time.Duration {
	s, ok := parseRetryAfter(a, time.Now())
	if !ok || !(s > 0) || s > float64(math.MaxInt64/time.Second) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// dialect decides the request shape and how output tokens are recognised.
type dialect uint8

const (
	dialectOpenAI dialect = iota
	dialectAnthropic
)

func dialectOf(path string) dialect {
	if strings.HasSuffix(path, "/messages") {
		return dialectAnthropic
	}
	return dialectOpenAI
}

// tokens returns a matcher that counts content deltas: a non-empty
// "content" string in OpenAI chunks, a text_delta in Anthropic events.
func (d dialect) tokens() *matcher {
	if d == dialectAnthropic {
		return newMatcher([]byte(`"text_delta","text":"`), true)
	}
	return newMatcher([]byte(`"content":"`), true)
}

// done returns the terminal event's marker.
func (d dialect) done() []byte {
	if d == dialectAnthropic {
		return []byte(`"type":"message_stop"`)
	}
	return []byte(`data: [DONE]`)
}

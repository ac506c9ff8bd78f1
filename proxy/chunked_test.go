package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"testing"
)

// arrivals feeds a chunkedBody through a pipe: each string reaches the
// reader as one read, as if it came in one packet.
func arrivals(t *testing.T) (*chunkedBody, *io.PipeWriter) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	c := &chunkedBody{}
	c.reset(bufio.NewReaderSize(pr, 4096))
	return c, pw
}

// send writes s to the pipe and waits until the reader has taken it.
func send(t *testing.T, pw *io.PipeWriter, s string) chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); _, _ = io.WriteString(pw, s) }()
	return done
}

// One Read hands out every chunk that arrived together, then what has
// arrived of the next, without waiting for the rest of it.
func TestChunkedReadsEveryArrivedChunkAtOnce(t *testing.T) {
	t.Parallel()
	c, pw := arrivals(t)
	send(t, pw, "5\r\nhello\r\n6\r\n world\r\n5\r\n, an")
	p := make([]byte, 1024)
	n, err := c.Read(p)
	if err != nil || string(p[:n]) != "hello world, an" {
		t.Fatalf("first read %q, %v; want every byte that arrived", p[:n], err)
	}
	// The rest of the third chunk and the end come later; the next Read
	// waits for them.
	send(t, pw, "d\r\n0\r\nX-Trailer: 1\r\n\r\n")
	n, err = c.Read(p)
	if err != nil || string(p[:n]) != "d" {
		t.Fatalf("second read %q, %v", p[:n], err)
	}
	if n, err = c.Read(p); n != 0 || err != io.EOF {
		t.Fatalf("after the last chunk: %d, %v; want io.EOF", n, err)
	}
}

// A Read never holds back bytes it has to wait for the rest of a chunk's
// framing: the payload goes out, the CRLF or next size line is read later.
func TestChunkedSplitFraming(t *testing.T) {
	t.Parallel()
	for _, parts := range [][]string{
		{"5\r\nhello", "\r", "\n0\r\n\r\n"},
		{"5\r\nhello\r\n", "0\r", "\n", "\r\n"},
		{"5\r\nhe", "llo\r\n0", "\r\n\r\n"},
		{"5;ext=1\r\nhello\r\n0 ; x\r\n\r\n"},
	} {
		c, pw := arrivals(t)
		go func() {
			for _, s := range parts {
				_, _ = io.WriteString(pw, s)
			}
		}()
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "hello" {
			t.Errorf("%q: got %q, %v", parts, got, err)
		}
	}
}

// The body decodes to exactly what the upstream framed, whatever the chunk
// sizes, the way the bytes arrive and the reader's buffer sizes; and the
// connection is left right after the body, ready for the next response.
func TestChunkedRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		payload := make([]byte, rng.IntN(20000))
		for j := range payload {
			payload[j] = byte(rng.IntN(256))
		}
		var wire bytes.Buffer
		for rest := payload; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(3000))
			ext := ""
			if rng.IntN(4) == 0 {
				ext = ";a=b"
			}
			fmt.Fprintf(&wire, "%x%s\r\n%s\r\n", k, ext, rest[:k])
			rest = rest[k:]
		}
		wire.WriteString("0\r\n")
		if rng.IntN(2) == 0 {
			wire.WriteString("Trailer-A: x\r\n")
		}
		wire.WriteString("\r\nNEXT")
		pr, pw := io.Pipe()
		wrng := rand.New(rand.NewPCG(uint64(i), 3)) // the writer's own: it runs beside the reader
		go func(b []byte) {
			for len(b) > 0 {
				k := min(len(b), 1+wrng.IntN(5000))
				_, _ = pw.Write(b[:k])
				b = b[k:]
			}
			pw.Close()
		}(bytes.Clone(wire.Bytes()))
		br := bufio.NewReaderSize(pr, 4096)
		c := &chunkedBody{}
		c.reset(br)
		var got []byte
		buf := make([]byte, 1+rng.IntN(8000))
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("case %d: %d bytes decoded, want %d", i, len(got), len(payload))
		}
		if rest, _ := io.ReadAll(br); string(rest) != "NEXT" {
			t.Fatalf("case %d: after the body the connection holds %q, want NEXT", i, rest)
		}
	}
}

// A body cut before its last chunk is an error, never io.EOF: the client
// then sees the stream end without its terminating chunk. Bad framing is
// an error too.
func TestChunkedBrokenBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		wire string
		want error
	}{
		{"5\r\nhel", io.ErrUnexpectedEOF},
		{"5\r\nhello\r\n", io.ErrUnexpectedEOF},
		{"5\r\nhello\r\n0\r\n", io.ErrUnexpectedEOF},
		{"", io.ErrUnexpectedEOF},
		{"zz\r\nnot a chunk\r\n", errBadChunk},
		{"5\r\nhelloXX", errBadChunk},
		{"5\nhello\r\n0\r\n\r\n", errBadChunk},
		{"5 x\r\nhello\r\n0\r\n\r\n", errBadChunk},
		{"5\r\r\nhello\r\n0\r\n\r\n", errBadChunk},
		{"fffffffffffffffffffff\r\n", errBadChunk},
		{"\r\n", errBadChunk},
		{strings.Repeat("1", 5000) + "\r\n", errBadChunk},
	} {
		c := &chunkedBody{}
		c.reset(bufio.NewReaderSize(strings.NewReader(tc.wire), 4096))
		var err error
		for err == nil {
			_, err = c.Read(make([]byte, 64))
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%q: %v, want %v", tc.wire, err, tc.want)
		}
	}
}

// End to end: events that reach Sluice together go to the client as one
// chunk (one write), and events that come apart go out apart, each as
// soon as it arrives.
func TestStreamCoalescesArrivedEvents(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	up := scriptedUpstream(t, func(c net.Conn) {
		write(c, sseHead+chunk(roleEvent)+chunk(tokEvent)+chunk(tokEvent))
		<-next
		write(c, chunk(tokEvent))
		<-next
		write(c, chunk(doneEvent)+"0\r\n\r\n")
	})
	br, resp := rawStream(t, up)
	if resp.StatusCode != 200 || len(resp.TransferEncoding) == 0 {
		t.Fatalf("status %d, transfer encoding %v", resp.StatusCode, resp.TransferEncoding)
	}
	readChunk := func() string {
		t.Helper()
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size line %q", line)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatal(err)
		}
		return string(b[:n])
	}
	if got, want := readChunk(), roleEvent+tokEvent+tokEvent; got != want {
		t.Fatalf("first chunk %q, want the three events that arrived together", got)
	}
	next <- struct{}{}
	if got := readChunk(); got != tokEvent {
		t.Fatalf("second chunk %q, want the one event that came alone", got)
	}
	next <- struct{}{}
	if got := readChunk(); got != doneEvent {
		t.Fatalf("third chunk %q", got)
	}
	if got := readChunk(); got != "" {
		t.Fatalf("want the terminating chunk, got %q", got)
	}
}

// Headers go out before the first token even when the start of a chunk (its
// size line) came with them: only bytes the client can be given at once
// ride with the headers.
func TestStreamHeadersNotHeldForAPartialChunk(t *testing.T) {
	t.Parallel()
	gotHeaders := make(chan struct{})
	up := scriptedUpstream(t, func(c net.Conn) {
		write(c, sseHead+fmt.Sprintf("%x\r\n", len(roleEvent)))
		<-gotHeaders
		write(c, roleEvent+"\r\n"+chunk(doneEvent)+"0\r\n\r\n")
	})
	// Only a hang trips this: the upstream sends the rest once the client
	// has the headers.
	_, resp := rawStream(t, up)
	close(gotHeaders)
	got, err := io.ReadAll(resp.Body)
	if err != nil || string(got) != roleEvent+doneEvent {
		t.Fatalf("body %q, %v", got, err)
	}
}

// Whatever the upstream sends, the decoder never panics, never returns more
// than asked, and when it reads a body to its end it gives the payload that
// Go's own chunked reader gives for the same bytes (where that one accepts
// them too).
func FuzzChunkedBody(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nA: b\r\n\r\n"), uint16(3))
	f.Add([]byte("0\r\n\r\n"), uint16(1))
	f.Add([]byte("zz\r\n"), uint16(64))
	f.Fuzz(func(t *testing.T, wire []byte, size uint16) {
		c := &chunkedBody{}
		c.reset(bufio.NewReaderSize(bytes.NewReader(wire), 64))
		p := make([]byte, int(size)%100+1)
		var got []byte
		var err error
		for range 10000 {
			var n int
			n, err = c.Read(p)
			if n < 0 || n > len(p) {
				t.Fatalf("Read returned %d for a %d-byte buffer", n, len(p))
			}
			got = append(got, p[:n]...)
			if err != nil {
				break
			}
		}
		if err != io.EOF {
			return
		}
		want, rerr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(wire)))
		if rerr == nil && !bytes.Equal(got, want) {
			t.Fatalf("decoded %q, Go's chunked reader %q", got, want)
		}
	})
}

// rawStream starts Sluice in front of upstream, sends one streaming request
// on a raw connection and returns the connection's reader and the response
// (its headers read, its body not).
func rawStream(t *testing.T, upstream string) (*bufio.Reader, *http.Response) {
	t.Helper()
	conn := dialSluice(t, startSluice(t, testConfig(upstream, nil)))
	sendStreamRequest(conn, "")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("response headers: %v", err)
	}
	return br, resp
}

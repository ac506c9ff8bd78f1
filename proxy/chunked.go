package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// chunkedBody reads an upstream response body in HTTP/1.1 chunked encoding
// straight from the connection's buffered reader, and gives out the
// payload of every chunk that has arrived in one Read: it waits only while
// it has nothing at all to give, and never waits for more once it holds
// some bytes. fasthttp's own chunked reader returns one chunk per Read, so
// each upstream chunk became its own flushed client write even when the
// upstream's read had brought several (about 7 writes per upstream read
// under 500 streams); here one upstream read makes one client write.
//
// Only payload goes out (fasthttp frames it again for the client), so the
// SSE meter sees every byte, and a stream that breaks before its last
// chunk ends with an error, which fasthttp answers by closing the client
// connection without the terminating chunk. Trailers are read and dropped.
// The zero value is unusable; reset it with the connection's reader.
type chunkedBody struct {
	br   *bufio.Reader
	left int  // payload bytes of the current chunk still to read
	crlf bool // the current chunk's payload is read, its CRLF is not
	last bool // the last chunk's size line is read; the trailer section is next
	done bool // the body ended (last chunk and trailer section read)
}

// errBadChunk is chunked framing Sluice cannot read: the upstream broke
// the stream.
var errBadChunk = errors.New("malformed chunked encoding from the upstream")

// maxChunkSize bounds a chunk's size so its parsing cannot overflow.
const maxChunkSize = 1 << 40

func (c *chunkedBody) reset(br *bufio.Reader) { *c = chunkedBody{br: br} }

// Read implements io.Reader. It returns at least one byte, io.EOF after
// the last chunk, or an error (io.ErrUnexpectedEOF when the connection
// ends inside the body, errBadChunk for bad framing); it may return bytes
// together with an error.
func (c *chunkedBody) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && !c.done {
		more := n > 0 // bytes in hand: take only what is buffered
		switch {
		case c.crlf:
			if more && c.br.Buffered() < 2 {
				return n, nil
			}
			if err := c.readCRLF(); err != nil {
				return n, err
			}
			c.crlf = false
		case c.last:
			if more && !c.trailerBuffered() {
				return n, nil
			}
			if err := c.readTrailer(); err != nil {
				return n, err
			}
			c.done = true
		case c.left == 0:
			if more && !c.lineBuffered() {
				return n, nil
			}
			size, err := c.readSize()
			if err != nil {
				return n, err
			}
			c.left, c.last = size, size == 0
		default:
			k := min(c.left, len(p)-n)
			if more {
				if k = min(k, c.br.Buffered()); k == 0 {
					return n, nil
				}
			}
			m, err := c.br.Read(p[n : n+k])
			n += m
			c.left -= m
			if err != nil {
				return n, unexpectedEOF(err)
			}
			c.crlf = c.left == 0
		}
	}
	if c.done && n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// ready reports, at the start of a body, whether Read would return without
// waiting for the upstream: a whole size line and a byte after it are
// buffered.
func (c *chunkedBody) ready() bool {
	b := c.buffered()
	i := bytes.IndexByte(b, '\n')
	return i >= 0 && i+1 < len(b)
}

// buffered returns the bytes the reader holds without reading more.
func (c *chunkedBody) buffered() []byte {
	b, _ := c.br.Peek(c.br.Buffered())
	return b
}

// lineBuffered reports whether a whole line (a chunk's size line) is
// buffered.
func (c *chunkedBody) lineBuffered() bool { return bytes.IndexByte(c.buffered(), '\n') >= 0 }

// trailerBuffered reports whether the whole trailer section, up to its
// empty line, is buffered.
func (c *chunkedBody) trailerBuffered() bool {
	b := c.buffered()
	return bytes.HasPrefix(b, crlf) || bytes.Contains(b, []byte("\r\n\r\n"))
}

var crlf = []byte("\r\n")

func (c *chunkedBody) readCRLF() error {
	b, err := c.br.Peek(2)
	if err != nil {
		return unexpectedEOF(err)
	}
	if b[0] != '\r' || b[1] != '\n' {
		return errBadChunk
	}
	_, _ = c.br.Discard(2)
	return nil
}

// readLine returns the next line without its CRLF; a line must fit the
// reader's buffer and end in CRLF, with no other CR or LF in it.
func (c *chunkedBody) readLine() ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, errBadChunk
	case err != nil:
		return nil, unexpectedEOF(err)
	}
	line = line[:len(line)-1]
	if len(line) == 0 || line[len(line)-1] != '\r' {
		return nil, errBadChunk
	}
	line = line[:len(line)-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, errBadChunk
	}
	return line, nil
}

// readSize reads a chunk's size line: hex digits, then optionally
// whitespace and extensions after ';', which are ignored.
func (c *chunkedBody) readSize() (int, error) {
	line, err := c.readLine()
	if err != nil {
		return 0, err
	}
	size, i := 0, 0
	for ; i < len(line); i++ {
		d := unhex(line[i])
		if d < 0 {
			break
		}
		if size = size<<4 | d; size > maxChunkSize {
			return 0, errBadChunk
		}
	}
	if i == 0 {
		return 0, errBadChunk
	}
	rest := bytes.TrimLeft(line[i:], " \t")
	if len(rest) > 0 && rest[0] != ';' {
		return 0, errBadChunk
	}
	return size, nil
}

// readTrailer reads and drops the trailer section, up to its empty line.
func (c *chunkedBody) readTrailer() error {
	for range 100 {
		line, err := c.readLine()
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
	}
	return errBadChunk
}

// unexpectedEOF turns the end of the connection inside a body into
// io.ErrUnexpectedEOF: only the last chunk ends a chunked body.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

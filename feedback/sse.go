package feedback

import "bytes"

// Limits of the SSE framer. They bound the memory one stream can pin.
const (
	// maxLine is the longest SSE line processed. A longer line is skipped
	// (its bytes are still counted in Result.Bytes and the line in
	// Result.SkippedLines); if it was a data line, its event is still
	// dispatched, marked truncated, so that the output it carried is
	// counted as one delta when its type says it bears output.
	maxLine = 1 << 20
	// maxData bounds the joined data of one event the same way.
	maxData = 1 << 20
	// maxEventType is the longest event type kept; longer types are cut,
	// which makes them match no known type.
	maxEventType = 64
	// keepBuf is the buffer capacity a reused parser keeps across Reset;
	// larger buffers are released so a pooled Meter does not pin a rare
	// huge event.
	keepBuf = 64 << 10
)

// eventSink receives dispatched events. typ is the event type ("" when the
// event had no event: field), data the data lines joined with LF; both are
// valid only for the duration of the call. truncated reports that some
// data was dropped by the size limits.
type eventSink interface {
	event(typ, data []byte, truncated bool)
}

// sseParser frames a byte stream into server-sent events following the
// WHATWG rules: LF, CRLF or CR end a line (a CR ending one write and an LF
// starting the next are one line ending), a blank line dispatches the
// event, data lines join with LF, one space after the colon is dropped,
// lines starting with ':' are comments, and id/retry/unknown fields are
// ignored. Unlike a browser, close dispatches a final event that lacks its
// blank line. A UTF-8 BOM at the start of the stream is not stripped.
//
// Steady-state operation does not allocate: a line or event split across
// writes is copied into buffers that are reused; complete lines are read
// in place.
type sseParser struct {
	line []byte // partial line carried between writes
	dbuf []byte // owned data buffer
	data []byte // data of the current event: dbuf, or the caller's input during write

	ebuf [maxEventType]byte // event type of the current event
	elen int

	hasData   bool // a data field was seen (the event will be dispatched)
	aliased   bool // data points into the caller's input
	truncated bool // the current event lost data to the size limits
	skipping  bool // inside an oversize line: discard through its end
	skipField byte // field of the oversize line being skipped
	skipLF    bool // the last byte seen was a CR ending a line

	skipped int // oversize lines skipped
}

// reset prepares the parser for a new stream, keeping buffers up to
// keepBuf bytes.
func (s *sseParser) reset() {
	line, dbuf := s.line[:0], s.dbuf[:0]
	if cap(line) > keepBuf {
		line = nil
	}
	if cap(dbuf) > keepBuf {
		dbuf = nil
	}
	*s = sseParser{line: line, dbuf: dbuf}
}

// write frames p, dispatching every event it completes to h. p is not
// retained after write returns.
func (s *sseParser) write(p []byte, h eventSink) {
	if len(p) == 0 {
		return
	}
	if s.skipLF {
		s.skipLF = false
		if p[0] == '\n' {
			p = p[1:]
		}
	}
	// lf and cr cache the next position of each byte so that a stream
	// using only one kind of line ending is scanned once: -1 means none
	// ahead, anything below pos means "look again".
	pos, lf, cr := 0, -2, -2
	for pos < len(p) {
		if lf != -1 && lf < pos {
			if lf = bytes.IndexByte(p[pos:], '\n'); lf >= 0 {
				lf += pos
			}
		}
		if cr != -1 && cr < pos {
			if cr = bytes.IndexByte(p[pos:], '\r'); cr >= 0 {
				cr += pos
			}
		}
		end := lf
		if cr >= 0 && (end < 0 || cr < end) {
			end = cr
		}
		if end < 0 {
			s.stash(p[pos:])
			break
		}
		next := end + 1
		if p[end] == '\r' {
			if next < len(p) {
				if p[next] == '\n' {
					next++
				}
			} else {
				s.skipLF = true
			}
		}
		s.endLine(p[pos:end], h)
		pos = next
	}
	if s.aliased {
		s.dbuf = append(s.dbuf[:0], s.data...)
		s.data, s.aliased = s.dbuf, false
	}
}

// close ends the stream: a pending partial line is processed and a pending
// event dispatched even without its blank line.
func (s *sseParser) close(h eventSink) {
	if s.skipping {
		s.skipping = false
		s.oversize(s.skipField)
	} else if len(s.line) > 0 {
		s.processLine(s.line, false, h)
		s.line = s.line[:0]
	}
	s.dispatch(h)
	s.skipLF = false
}

// stash keeps the unterminated tail of a write for the next one.
func (s *sseParser) stash(rest []byte) {
	if s.skipping {
		return
	}
	if len(s.line)+len(rest) > maxLine {
		s.skipping, s.skipField = true, fieldOf(s.line, rest)
		s.line = s.line[:0]
		return
	}
	s.line = append(s.line, rest...)
}

// endLine handles a line whose ending was found; seg is the part of the
// line inside the current write.
func (s *sseParser) endLine(seg []byte, h eventSink) {
	switch {
	case s.skipping:
		s.skipping = false
		s.oversize(s.skipField)
	case len(s.line) > 0:
		if len(s.line)+len(seg) > maxLine {
			s.oversize(fieldOf(s.line, seg))
		} else {
			s.line = append(s.line, seg...)
			s.processLine(s.line, false, h)
		}
		s.line = s.line[:0]
	case len(seg) > maxLine:
		s.oversize(fieldOf(seg, nil))
	default:
		s.processLine(seg, true, h)
	}
}

const (
	fieldOther byte = iota
	fieldData
	fieldEvent
)

// fieldOf names the field of the line a+b from its first bytes.
func fieldOf(a, b []byte) byte {
	var head [6]byte
	n := copy(head[:], a)
	n += copy(head[n:], b)
	h := head[:n]
	switch {
	case bytes.HasPrefix(h, []byte("data:")) || string(h) == "data":
		return fieldData
	case bytes.HasPrefix(h, []byte("event:")):
		return fieldEvent
	}
	return fieldOther
}

// oversize records a skipped line.
func (s *sseParser) oversize(field byte) {
	s.skipped++
	switch field {
	case fieldData:
		s.hasData, s.truncated = true, true
	case fieldEvent:
		// An event type that long is unknown: a NUL type matches nothing.
		s.ebuf[0], s.elen = 0, 1
	}
}

// processLine interprets one complete line. inInput reports that line lies
// in the caller's input (so data may point at it until the write ends).
func (s *sseParser) processLine(line []byte, inInput bool, h eventSink) {
	if len(line) == 0 {
		s.dispatch(h)
		return
	}
	if line[0] == ':' {
		return
	}
	name, val := line, []byte(nil)
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		name, val = line[:c], line[c+1:]
		if len(val) > 0 && val[0] == ' ' {
			val = val[1:]
		}
	}
	switch string(name) {
	case "data":
		s.addData(val, inInput)
	case "event":
		s.elen = copy(s.ebuf[:], val)
	}
}

func (s *sseParser) addData(val []byte, inInput bool) {
	if !s.hasData {
		s.hasData = true
		if len(val) > maxData {
			s.truncated = true
			return
		}
		if inInput {
			s.data, s.aliased = val, true
		} else {
			s.dbuf = append(s.dbuf[:0], val...)
			s.data = s.dbuf
		}
		return
	}
	if s.truncated {
		return
	}
	if len(s.data)+1+len(val) > maxData {
		s.truncated = true
		return
	}
	if s.aliased {
		s.dbuf = append(s.dbuf[:0], s.data...)
		s.aliased = false
	}
	s.dbuf = append(s.dbuf, '\n')
	s.dbuf = append(s.dbuf, val...)
	s.data = s.dbuf
}

// dispatch ends the current event, delivering it if it had data.
func (s *sseParser) dispatch(h eventSink) {
	if s.hasData {
		h.event(s.ebuf[:s.elen], s.data, s.truncated)
	}
	s.elen, s.data = 0, nil
	s.hasData, s.aliased, s.truncated = false, false, false
}

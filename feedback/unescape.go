package feedback

import (
	"bytes"
	"unicode/utf8"
)

// decodeStr returns the decoded content of a raw JSON string: raw itself if
// it holds no escapes, else its decoded form in buf. If the decoded form
// does not fit buf or the escapes are invalid, it returns raw and false.
func decodeStr(raw, buf []byte) ([]byte, bool) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw, true
	}
	n, ok := unescapeInto(buf, raw)
	if !ok {
		return raw, false
	}
	return buf[:n], true
}

// unescapeInto decodes the JSON string content raw into dst and returns the
// length written. It fails if dst is too small or an escape is invalid. A
// \u escape of an unpaired surrogate decodes to U+FFFD, as encoding/json
// does; raw bytes are copied as they are (no UTF-8 validation).
func unescapeInto(dst, raw []byte) (int, bool) {
	n := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			if n >= len(dst) {
				return 0, false
			}
			dst[n] = c
			n++
			i++
			continue
		}
		if i+1 >= len(raw) {
			return 0, false
		}
		var r rune
		switch raw[i+1] {
		case '"', '\\', '/':
			r = rune(raw[i+1])
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			u, ok := hex4(raw, i+2)
			if !ok {
				return 0, false
			}
			i += 6
			r = u
			if utf16IsSurrogate(u) {
				r = utf8.RuneError
				if u < 0xDC00 && i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if lo, ok := hex4(raw, i+2); ok && lo >= 0xDC00 && lo < 0xE000 {
						r = (u-0xD800)<<10 | (lo - 0xDC00) + 0x10000
						i += 6
					}
				}
			}
			if n+utf8.RuneLen(r) > len(dst) {
				return 0, false
			}
			n += utf8.EncodeRune(dst[n:], r)
			continue
		default:
			return 0, false
		}
		if n >= len(dst) {
			return 0, false
		}
		dst[n] = byte(r)
		n++
		i += 2
	}
	return n, true
}

func utf16IsSurrogate(r rune) bool { return r >= 0xD800 && r < 0xE000 }

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

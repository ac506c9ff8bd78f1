package load

// matcher counts occurrences of a fixed pattern in a byte stream fed in
// pieces of any size (a pattern may straddle two reads). With nonEmpty, an
// occurrence counts only if the byte after it is not '"', so the pattern
// `"content":"` counts non-empty JSON strings only. Not safe for
// concurrent use.
type matcher struct {
	pat      []byte
	fail     []int // KMP failure function
	state    int   // bytes of pat matched so far
	nonEmpty bool
	pending  bool // pat matched at the end of the last piece; next byte decides
}

func newMatcher(pat []byte, nonEmpty bool) *matcher {
	fail := make([]int, len(pat))
	for i, k := 1, 0; i < len(pat); i++ {
		for k > 0 && pat[i] != pat[k] {
			k = fail[k-1]
		}
		if pat[i] == pat[k] {
			k++
		}
		fail[i] = k
	}
	return &matcher{pat: pat, fail: fail, nonEmpty: nonEmpty}
}

// count feeds b and returns the occurrences completed in it.
func (m *matcher) count(b []byte) int {
	n := 0
	for _, c := range b {
		if m.pending {
			m.pending = false
			if c != '"' {
				n++
			}
		}
		for m.state > 0 && c != m.pat[m.state] {
			m.state = m.fail[m.state-1]
		}
		if c == m.pat[m.state] {
			m.state++
		}
		if m.state == len(m.pat) {
			m.state = m.fail[m.state-1]
			if m.nonEmpty {
				m.pending = true
			} else {
				n++
			}
		}
	}
	return n
}

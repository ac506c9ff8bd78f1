package config

import "fmt"

// The decoder's budget: what a file may make a load do, whatever it holds.
// Together with MaxFileSize it bounds the time and memory of Load, Parse
// and every reload.

// maxAliasValues bounds the values and keys that aliases and merge keys
// may expand to in one file: far above what sharing a few blocks between
// providers needs (a merged limit block is about 15), far below what makes
// loading slow (about 1 µs each).
const maxAliasValues = 100_000

// enterAlias marks the start of decoding what an alias or merge key at
// line points to; leaveAlias its end.
func (d *decoder) enterAlias(line int) {
	if d.aliasDepth == 0 {
		d.aliasLine = line
	}
	d.aliasDepth++
}

func (d *decoder) leaveAlias() { d.aliasDepth-- }

// spend counts one value or key reached through an alias and reports
// whether the budget allows decoding it. The first time the budget runs
// out it reports the error, at the alias being expanded.
func (d *decoder) spend(path string) bool {
	if d.over {
		return false
	}
	if d.aliasDepth == 0 {
		return true
	}
	if d.expanded++; d.expanded <= maxAliasValues {
		return true
	}
	d.fail(d.aliasLine, path, "YAML aliases and merge keys expand to more than %d values; write the shared blocks out or use fewer aliases", maxAliasValues)
	d.over = true
	return false
}

// errorf records an error. After maxDecodeErrors it records one last
// error saying so and stops decoding: a file with that many is not a
// config with typos, and the errors an alias repeats are not news.
func (d *decoder) errorf(line int, path, format string, args ...any) {
	if d.over {
		return
	}
	if len(d.errs) == maxDecodeErrors {
		d.over = true
		d.errs = append(d.errs, &FieldError{Line: line, Msg: fmt.Sprintf("more than %d errors; stopped reading here", maxDecodeErrors)})
		return
	}
	d.errs = append(d.errs, &FieldError{Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// maxDecodeErrors bounds the errors reported while decoding one file.
const maxDecodeErrors = 200

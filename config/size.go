package config

import (
	"errors"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ByteSize is an amount of memory in bytes. In YAML it is an integer (a
// number of bytes) or a string of an integer and a unit: B, KiB, MiB, GiB,
// TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. "8MiB".
type ByteSize int64

// Units of ByteSize.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

var byteSizeType = reflect.TypeFor[ByteSize]()

var sizeUnits = []struct {
	name string
	mult ByteSize
}{
	{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// ParseByteSize parses "8MiB", "512KB", "1024B" or "1024".
func ParseByteSize(s string) (ByteSize, error) {
	num, mult := strings.TrimSpace(s), ByteSize(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(num, u.name); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("not a size")
	}
	if n > 0 && ByteSize(n) > (1<<62)/mult {
		return 0, errors.New("too large")
	}
	return ByteSize(n) * mult, nil
}

// String prints b in the largest binary unit that divides it: "8MiB",
// "1536KiB", "100B".
func (b ByteSize) String() string {
	for _, u := range sizeUnits[:4] {
		if b != 0 && b%u.mult == 0 {
			return strconv.FormatInt(int64(b/u.mult), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// byteSize decodes an integer number of bytes or a size string.
func (d *decoder) byteSize(path string, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(path, n)
	if !ok {
		return
	}
	if s.ShortTag() == tagInt {
		var i int64
		if s.Decode(&i) == nil && i >= 0 {
			v.SetInt(i)
			return
		}
	}
	if s.ShortTag() == tagStr {
		if b, err := ParseByteSize(s.Value); err == nil {
			v.SetInt(int64(b))
			return
		}
	}
	d.fail(s.Line, path, `invalid size %s: use a number of bytes or a number and a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. "8MiB"`, describe(s))
}

// sizeRange reports a size outside lo..hi.
func (v *validator) sizeRange(path string, b, lo, hi ByteSize) {
	if b < lo || b > hi {
		v.add(path, "must be between %s and %s, got %s", lo, hi, b)
	}
}

package engine

import (
	"bytes"
	"encoding/binary"
	"testing"
)

var tiny = Shape{Name: "tiny", Layers: 1, Width: 64, Heads: 2, KVHeads: 1, FFN: 64, Vocab: 512, Context: 256, RopeTheta: 10000}

// TestModelIsDeterministic: the same shape and seed give the same bytes,
// another seed other weights, and the header is GGUF version 3 with one
// tensor per weight of the shape.
func TestModelIsDeterministic(t *testing.T) {
	t.Parallel()
	write := func(seed uint64) []byte {
		var b bytes.Buffer
		if err := WriteModel(&b, tiny, seed); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, again, other := write(1), write(1), write(2)
	if !bytes.Equal(a, again) {
		t.Fatal("same seed, different files")
	}
	if bytes.Equal(a, other) {
		t.Fatal("another seed, same file")
	}
	if string(a[:4]) != "GGUF" || binary.LittleEndian.Uint32(a[4:]) != 3 {
		t.Fatalf("header %q version %d, want GGUF 3", a[:4], binary.LittleEndian.Uint32(a[4:]))
	}
	if n := binary.LittleEndian.Uint64(a[8:]); n != 2+9*uint64(tiny.Layers) {
		t.Fatalf("%d tensors, want %d", n, 2+9*tiny.Layers)
	}
	if len(a)%alignment != 0 {
		t.Fatalf("file of %d bytes: the last tensor is not padded", len(a))
	}
}

// TestVocabularyIsWholeAndMerged: the vocabulary has the size asked for,
// no token twice, and every merged token is made by its merge of two
// earlier tokens.
func TestVocabularyIsWholeAndMerged(t *testing.T) {
	t.Parallel()
	tokens, types, merges := vocabulary(4096)
	if len(tokens) != 4096 || len(types) != 4096 {
		t.Fatalf("%d tokens, %d types, want 4096", len(tokens), len(types))
	}
	index := map[string]int{}
	for i, tok := range tokens {
		if _, dup := index[tok]; dup {
			t.Fatalf("token %q twice", tok)
		}
		index[tok] = i
	}
	first := len(specials) + 256
	if len(merges) != len(tokens)-first {
		t.Fatalf("%d merges for %d merged tokens", len(merges), len(tokens)-first)
	}
	for k, m := range merges {
		l, r, _ := bytes.Cut([]byte(m), []byte(" "))
		li, lok := index[string(l)]
		ri, rok := index[string(r)]
		if !lok || !rok || li >= first+k || ri >= first+k || tokens[first+k] != string(l)+string(r) {
			t.Fatalf("merge %d %q does not make token %q from earlier tokens", k, m, tokens[first+k])
		}
	}
}

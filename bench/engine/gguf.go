// Package engine runs a real inference engine in the benchmark suite:
// llama.cpp (through the npm package node-llama-cpp, which ships it
// prebuilt) serving a model with the exact shapes and per-token work of
// SmolLM2-135M, behind a small OpenAI-compatible server (server.mjs).
//
// No package ships a usable GGUF, so WriteModel writes one: SmolLM2-135M's
// architecture (llama, 30 layers, width 576, 9 query and 3 key/value heads,
// FFN 1536, vocabulary 49152, tied embeddings) with seeded random Q8_0
// weights and a byte-level BPE tokenizer of the same vocabulary size. Every
// token costs the engine what it costs with the real model; the text is
// noise, and it rarely ends before max_tokens.
package engine

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
)

// Shape is a llama-architecture model's dimensions.
type Shape struct {
	Name      string
	Layers    int
	Width     int // embedding length
	Heads     int
	KVHeads   int
	FFN       int
	Vocab     int
	Context   int
	RopeTheta float32
}

// SmolLM2 is SmolLM2-135M's shape (its config.json).
var SmolLM2 = Shape{
	Name: "SmolLM2-135M shapes, random weights", Layers: 30, Width: 576, Heads: 9, KVHeads: 3,
	FFN: 1536, Vocab: 49152, Context: 8192, RopeTheta: 100000,
}

// GGUF value types and ggml tensor types used here.
const (
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufString  = 8
	ggufArray   = 9

	ggmlF32  = 0
	ggmlQ8_0 = 8

	alignment = 32
	q8Block   = 32 // weights per Q8_0 block: an fp16 scale and 32 int8
)

// Special tokens, at SmolLM2's ids: the chat template is ChatML.
var specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// Chat template (ChatML), as SmolLM2's tokenizer_config.json has it.
const chatTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"

type tensor struct {
	name string
	dims []uint64
	typ  uint32
}

func (t tensor) bytes() uint64 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	if t.typ == ggmlF32 {
		return 4 * n
	}
	return n / q8Block * 34
}

// WriteModel writes the GGUF of s with weights drawn from seed to w: the
// same shape and seed give the same bytes.
func WriteModel(w io.Writer, s Shape, seed uint64) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	e := &enc{w: bw}
	head := s.Width / s.Heads
	tokens, types, merges := vocabulary(s.Vocab)
	var ts []tensor
	q8 := func(name string, in, out int) {
		ts = append(ts, tensor{name, []uint64{uint64(in), uint64(out)}, ggmlQ8_0})
	}
	f32 := func(name string, n int) { ts = append(ts, tensor{name, []uint64{uint64(n)}, ggmlF32}) }
	q8("token_embd.weight", s.Width, s.Vocab) // tied: also the output layer
	f32("output_norm.weight", s.Width)
	for i := range s.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		f32(p+"attn_norm.weight", s.Width)
		q8(p+"attn_q.weight", s.Width, s.Heads*head)
		q8(p+"attn_k.weight", s.Width, s.KVHeads*head)
		q8(p+"attn_v.weight", s.Width, s.KVHeads*head)
		q8(p+"attn_output.weight", s.Heads*head, s.Width)
		f32(p+"ffn_norm.weight", s.Width)
		q8(p+"ffn_gate.weight", s.Width, s.FFN)
		q8(p+"ffn_up.weight", s.Width, s.FFN)
		q8(p+"ffn_down.weight", s.FFN, s.Width)
	}
	// The header gives the number of key-value pairs before them: count
	// them with a dry run first.
	kvs := 0
	kv := func() { kvs++ }
	writeKVs := func(e *enc) {
		e.kvString("general.architecture", "llama")
		e.kvString("general.name", s.Name)
		e.kvU32("general.alignment", alignment)
		e.kvU32("general.file_type", 7) // mostly Q8_0
		e.kvU32("llama.context_length", uint32(s.Context))
		e.kvU32("llama.embedding_length", uint32(s.Width))
		e.kvU32("llama.block_count", uint32(s.Layers))
		e.kvU32("llama.feed_forward_length", uint32(s.FFN))
		e.kvU32("llama.rope.dimension_count", uint32(head))
		e.kvU32("llama.attention.head_count", uint32(s.Heads))
		e.kvU32("llama.attention.head_count_kv", uint32(s.KVHeads))
		e.kvF32("llama.attention.layer_norm_rms_epsilon", 1e-5)
		e.kvF32("llama.rope.freq_base", s.RopeTheta)
		e.kvU32("llama.vocab_size", uint32(s.Vocab))
		e.kvString("tokenizer.ggml.model", "gpt2")
		e.kvString("tokenizer.ggml.pre", "smollm")
		e.kvStrings("tokenizer.ggml.tokens", tokens)
		e.kvI32s("tokenizer.ggml.token_type", types)
		e.kvStrings("tokenizer.ggml.merges", merges)
		e.kvU32("tokenizer.ggml.bos_token_id", 1)
		e.kvU32("tokenizer.ggml.eos_token_id", 2)
		e.kvU32("tokenizer.ggml.unknown_token_id", 0)
		e.kvU32("tokenizer.ggml.padding_token_id", 2)
		e.kvString("tokenizer.chat_template", chatTemplate)
	}
	counter := &enc{w: io.Discard, onKV: kv}
	writeKVs(counter)
	e.raw([]byte("GGUF"))
	e.u32(3)
	e.u64(uint64(len(ts)))
	e.u64(uint64(kvs))
	writeKVs(e)
	var off uint64
	for _, t := range ts {
		e.str(t.name)
		e.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			e.u64(d)
		}
		e.u32(t.typ)
		e.u64(off)
		off += pad(t.bytes())
	}
	e.zeros(int(pad(e.n) - e.n))
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	// Weights uniform in about ±0.04 (a standard deviation near 0.02,
	// as models are initialised), so activations stay finite.
	scale := f16(0.04 / 127)
	blk := make([]byte, 34)
	for _, t := range ts {
		if t.typ == ggmlF32 {
			for range t.dims[0] {
				e.u32(math.Float32bits(1))
			}
		} else {
			for range t.bytes() / 34 {
				binary.LittleEndian.PutUint16(blk, scale)
				for i := 2; i < 34; i += 8 {
					binary.LittleEndian.PutUint64(blk[i:], rng.Uint64())
				}
				for i := 2; i < 34; i++ {
					if blk[i] == 0x80 { // -128 is outside Q8_0's symmetric range
						blk[i] = 0x81
					}
				}
				e.raw(blk)
			}
		}
		e.zeros(int(pad(t.bytes()) - t.bytes()))
	}
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

// WriteModelFile writes the model to path (through a temporary file, so a
// file at path is always whole).
func WriteModelFile(path string, s Shape, seed uint64) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := WriteModel(f, s, seed); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func pad(n uint64) uint64 { return (n + alignment - 1) / alignment * alignment }

// vocabulary builds a byte-level BPE vocabulary of n tokens: the special
// tokens, the 256 byte symbols in GPT-2's byte-to-unicode mapping, then
// merged tokens, each with the merge that makes it from two earlier
// tokens, so that any text tokenizes.
func vocabulary(n int) (tokens []string, types []int32, merges []string) {
	tokens = append(tokens, specials...)
	for range specials {
		types = append(types, 3) // control
	}
	bytesym := byteSymbols()
	tokens = append(tokens, bytesym...)
	for range bytesym {
		types = append(types, 1) // normal
	}
	seen := make(map[string]bool, n)
	for _, t := range tokens {
		seen[t] = true
	}
	// Merge the common symbols pairwise, then those pairs with the common
	// symbols, and so on, until the vocabulary is full.
	common := []string{"Ġ", "e", "t", "a", "o", "i", "n", "s", "r", "h", "l", "d", "c", "u", "m", "f", "p", "g", "w", "y", "b", ",", ".", "v", "k", "T", "S", "A", "I", "C", "Ċ", "x", "0", "1", "2", "-", "j", "q", "z", "M", "P", "B", "D", "E", "R", "H", "L", "N", "O", "W"}
	level := slices.Clone(common)
	for len(tokens) < n {
		var next []string
		for _, l := range level {
			for _, r := range common {
				t := l + r
				if seen[t] {
					continue
				}
				seen[t] = true
				tokens = append(tokens, t)
				types = append(types, 1)
				merges = append(merges, l+" "+r)
				next = append(next, t)
				if len(tokens) == n {
					return tokens, types, merges
				}
			}
		}
		level = next
	}
	return tokens, types, merges
}

// byteSymbols is GPT-2's bytes_to_unicode: printable bytes stand for
// themselves, the others for code points from 256 on.
func byteSymbols() []string {
	out := make([]string, 256)
	extra := 0
	for b := range 256 {
		switch {
		case b >= '!' && b <= '~', b >= 0xA1 && b <= 0xAC, b >= 0xAE:
			out[b] = string(rune(b))
		default:
			out[b] = string(rune(256 + extra))
			extra++
		}
	}
	return out
}

// f16 is the IEEE half-precision bits of a small positive normal v.
func f16(v float32) uint16 {
	b := math.Float32bits(v)
	exp := int((b>>23)&0xff) - 127 + 15
	return uint16(exp)<<10 | uint16((b>>13)&0x3ff)
}

// enc writes GGUF's little-endian encoding, keeping the first error.
type enc struct {
	w    io.Writer
	n    uint64
	err  error
	onKV func()
	buf  [8]byte
}

func (e *enc) raw(p []byte) {
	if e.err != nil {
		return
	}
	var k int
	k, e.err = e.w.Write(p)
	e.n += uint64(k)
}
func (e *enc) zeros(n int) { e.raw(make([]byte, n)) }
func (e *enc) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], v)
	e.raw(e.buf[:4])
}
func (e *enc) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], v)
	e.raw(e.buf[:8])
}
func (e *enc) str(s string) {
	e.u64(uint64(len(s)))
	e.raw([]byte(s))
}
func (e *enc) key(k string, typ uint32) {
	if e.onKV != nil {
		e.onKV()
	}
	e.str(k)
	e.u32(typ)
}
func (e *enc) kvString(k, v string) { e.key(k, ggufString); e.str(v) }
func (e *enc) kvU32(k string, v uint32) {
	e.key(k, ggufUint32)
	e.u32(v)
}
func (e *enc) kvF32(k string, v float32) {
	e.key(k, ggufFloat32)
	e.u32(math.Float32bits(v))
}
func (e *enc) kvStrings(k string, vs []string) {
	e.key(k, ggufArray)
	e.u32(ggufString)
	e.u64(uint64(len(vs)))
	for _, v := range vs {
		e.str(v)
	}
}
func (e *enc) kvI32s(k string, vs []int32) {
	e.key(k, ggufArray)
	e.u32(ggufInt32)
	e.u64(uint64(len(vs)))
	for _, v := range vs {
		e.u32(uint32(v))
	}
}

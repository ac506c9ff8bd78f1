package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/bench/engine"
)

func init() {
	register("gguf", "write the real engine's model: SmolLM2-135M's shapes, seeded random Q8_0 weights (see bench/engine)", runGGUF)
}

// runGGUF writes the GGUF model that `make engine` serves.
func runGGUF(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gguf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice-bench gguf -out FILE [-seed N]\n\nWrites a GGUF model with SmolLM2-135M's architecture (llama, 30 layers, width 576,\n9/3 heads, FFN 1536, vocabulary 49152) and seeded random Q8_0 weights: the real\nmodel's work per token, noise for text. The same seed gives the same file.\n\nflags:")
		fs.PrintDefaults()
	}
	out := fs.String("out", "", "file to write (required)")
	seed := fs.Uint64("seed", 1, "random seed of the weights")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *out == "" {
		fs.Usage()
		return 2
	}
	if err := engine.WriteModelFile(*out, engine.SmolLM2, *seed); err != nil {
		fmt.Fprintf(stderr, "sluice-bench gguf: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return 0
}

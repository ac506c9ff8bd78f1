package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// stdin is where hash-key reads a key; tests replace it.
var stdin io.Reader = os.Stdin

// maxKeyLen bounds the key hash-key reads: API keys are a few hundred
// bytes at most.
const maxKeyLen = 64 << 10

// hashKeyFlags is `sluice hash-key`: it prints the hex SHA-256 of an API
// key, the value of a clients: entry's key_sha256. The key comes from
// stdin or an environment variable, never from the command line, where
// other users of the machine see it (ps) and shells keep it (history).
func hashKeyFlags(fs *flag.FlagSet) func(stdout, stderr io.Writer) int {
	env := fs.String("env", "", "read the key from this environment variable instead of stdin")
	return func(stdout, stderr io.Writer) int {
		var key string
		if *env != "" {
			v, ok := os.LookupEnv(*env)
			if !ok {
				fmt.Fprintf(stderr, "sluice hash-key: environment variable %s is not set\n", *env)
				return exitFailure
			}
			key = v
		} else {
			line, err := bufio.NewReader(io.LimitReader(stdin, maxKeyLen)).ReadString('\n')
			if err != nil && err != io.EOF {
				fmt.Fprintf(stderr, "sluice hash-key: reading stdin: %v\n", err)
				return exitFailure
			}
			key = line
		}
		// Sluice matches the key without surrounding spaces, as clients'
		// SDKs send it; a trailing newline from echo or a file is not part
		// of it.
		key = strings.TrimSpace(key)
		if key == "" {
			fmt.Fprintln(stderr, "sluice hash-key: no key (give it on stdin, or name an environment variable with -env)")
			return exitFailure
		}
		sum := sha256.Sum256([]byte(key))
		fmt.Fprintln(stdout, hex.EncodeToString(sum[:]))
		return exitOK
	}
}

package config

import (
	"fmt"
	"log/slog"
	"regexp"
)

// Secret holds a credential. It never prints: every fmt verb (including %v,
// %+v, %#v, %s, %q, %x and %d), JSON/YAML/text marshalling and slog render it
// as "[redacted]", so a Config or Provider can be logged or dumped safely.
// Use string(s) to read the value where it is needed (e.g. when setting the
// upstream Authorization header), and nowhere else.
type Secret string

const redacted = "[redacted]"

// String returns "[redacted]".
func (Secret) String() string { return redacted }

// GoString returns "[redacted]".
func (Secret) GoString() string { return redacted }

// Format writes "[redacted]" whatever the verb, so no verb can show the value.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalText returns "[redacted]" (used by encoding/json, YAML and others).
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue returns "[redacted]" for log/slog.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// IsSet reports whether the secret holds a value.
func (s Secret) IsSet() bool { return s != "" }

// shownEnvVarRE is the spelling of variable names that messages repeat:
// upper case, as environment variables are conventionally named. Provider
// keys are mixed or lower case (gsk_..., 32 random letters and digits,
// hex), so a key pasted where a name belongs is never echoed into
// validate's output or the reload log.
var shownEnvVarRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,63}$`)

// envVarName names an environment variable in a message: "environment
// variable OPENAI_API_KEY", or, when name is not spelled like a variable
// name (see shownEnvVarRE), a description that does not repeat it.
func envVarName(name string) string {
	if shownEnvVarRE.MatchString(name) {
		return "environment variable " + name
	}
	return "the environment variable named here (name not repeated: it is not upper case and may be a key pasted by mistake)"
}

// adminToken resolves (when loading) or checks (Validate) the admin token.
// Like an API key, its value never appears in a message.
func (v *validator) adminToken(a *Admin) {
	const path = "admin.token_env"
	switch {
	case a.TokenEnv == "":
		return // no token; a hand-built config may still set Token
	case !envVarRE.MatchString(a.TokenEnv):
		v.add(path, "must be the name of an environment variable (letters, digits and _, not starting with a digit), not the token itself")
		return
	case v.lookup != nil:
		val, ok := v.lookup(a.TokenEnv)
		if !ok {
			v.add(path, "%s is not set", envVarName(a.TokenEnv))
			return
		}
		a.Token = Secret(val)
	case a.Token == "":
		v.add(path, "Token is empty: %s was not resolved", envVarName(a.TokenEnv))
		return
	}
	tok := string(a.Token)
	if len(tok) < MinAdminTokenLen {
		v.add(path, "%s holds %d characters; an admin token needs at least %d (e.g. openssl rand -hex 32)", envVarName(a.TokenEnv), len(tok), MinAdminTokenLen)
		return
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c >= 0x7f {
			v.add(path, "%s holds spaces, control or non-ASCII characters (a trailing newline?); a bearer token cannot carry them", envVarName(a.TokenEnv))
			return
		}
	}
}

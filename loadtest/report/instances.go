package report

import (
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
)

// Redacted replaces a secret's value in a recorded environment or command line.
const Redacted = "<redacted>"

// InstanceSetup is how the load tester started a backend's service
// instances: the binary, the serve flags (the listen address is per
// instance) and the whole environment it gave them, secrets redacted. It is
// recorded so that a result says what ran, not what the caller's shell
// happened to hold.
type InstanceSetup struct {
	Bin  string   `json:"bin"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
}

// secretNames are parts of variable, flag and connection-parameter names
// whose values are secrets.
var secretNames = []string{"TOKEN", "PASSWORD", "SECRET", "KEY"}

// isSecret reports whether a variable, flag or parameter name says its
// value is a secret.
func isSecret(name string) bool {
	upper := strings.ToUpper(strings.ReplaceAll(strings.TrimLeft(name, "-"), "-", "_"))
	for _, s := range secretNames {
		if strings.Contains(upper, s) {
			return true
		}
	}
	return false
}

// Redact returns a NAME=value environment entry or a --name=value flag with
// its value hidden when the name says it is a secret. Otherwise a URL
// value loses its password and every secret-named query parameter's value
// (postgres://u@h/db?password=…), and a keyword/value connection string
// (host=h password=…) every secret-named keyword's value; the rest is kept
// byte for byte, so that the record still says what ran.
func Redact(kv string) string {
	name, value, ok := strings.Cut(kv, "=")
	if !ok {
		return kv
	}
	if isSecret(name) {
		return name + "=" + Redacted
	}
	if strings.Contains(value, "://") {
		return name + "=" + redactURL(value)
	}
	return name + "=" + redactKeywordValues(value)
}

// redactURL hides a URL's userinfo password and its secret-named query
// parameters' values. It works on the text rather than on a url.URL,
// whose String re-encodes, and so also covers what url.Parse refuses but a
// driver accepts, such as libpq's several hosts (postgres://h1,h2/db).
func redactURL(v string) string {
	rest, fragment, hasFragment := strings.Cut(v, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	scheme, afterScheme, _ := strings.Cut(rest, "://")
	authority, path := afterScheme, ""
	if i := strings.IndexByte(afterScheme, '/'); i >= 0 {
		authority, path = afterScheme[:i], afterScheme[i:]
	}
	// The password may hold an escaped '@' only, so the last '@' ends the
	// userinfo.
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		if user, _, hasPassword := strings.Cut(authority[:at], ":"); hasPassword {
			authority = user + ":" + Redacted + authority[at:]
		}
	}
	out := scheme + "://" + authority + path
	if hasQuery {
		params := strings.Split(query, "&")
		for i, p := range params {
			key, _, hasValue := strings.Cut(p, "=")
			if unescaped, err := url.QueryUnescape(key); err == nil {
				key = unescaped
			}
			if hasValue && isSecret(key) {
				params[i] = p[:strings.IndexByte(p, '=')+1] + Redacted
			}
		}
		out += "?" + strings.Join(params, "&")
	}
	if hasFragment {
		out += "#" + fragment
	}
	return out
}

// redactKeywordValues hides the secret-named keywords' values of a libpq
// keyword/value connection string (host=h password='a b' dbname=d): a
// keyword, '=' with optional spaces around it, then a value that is either
// unquoted up to the next space or single-quoted with backslash escapes.
// A value that does not parse as one is returned unchanged: no driver
// would take a password from it either.
func redactKeywordValues(v string) string {
	var out strings.Builder
	i := 0
	skipSpaces := func() {
		for i < len(v) && isSpace(v[i]) {
			i++
		}
	}
	for {
		start := i
		skipSpaces()
		if i == len(v) {
			out.WriteString(v[start:])
			return out.String()
		}
		keyStart := i
		for i < len(v) && v[i] != '=' && !isSpace(v[i]) {
			i++
		}
		key := v[keyStart:i]
		skipSpaces()
		if key == "" || i == len(v) || v[i] != '=' {
			return v
		}
		i++
		skipSpaces()
		out.WriteString(v[start:i])
		valueStart := i
		if i < len(v) && v[i] == '\'' {
			for i++; i < len(v) && v[i] != '\''; i++ {
				if v[i] == '\\' {
					i++
				}
			}
			if i >= len(v) {
				return v
			}
			i++
		} else {
			for i < len(v) && !isSpace(v[i]) {
				i++
			}
		}
		if isSecret(key) {
			out.WriteString(Redacted)
		} else {
			out.WriteString(v[valueStart:i])
		}
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// Print writes the setup for the terminal, one line each for the command
// and the environment.
func (s InstanceSetup) Print(w io.Writer, backend string) {
	fmt.Fprintf(w, "  %s instances: %s %s\n", backend, s.Bin, strings.Join(s.Args, " "))
	fmt.Fprintf(w, "  %s environment: %s\n", backend, strings.Join(s.Env, " "))
}

// SetupSection is the report's section on how each backend's instances
// were started; setups maps a backend to its setup.
func SetupSection(setups map[string]InstanceSetup) Section {
	backends := make([]string, 0, len(setups))
	for b := range setups {
		backends = append(backends, b)
	}
	sort.Strings(backends)
	t := &Table{Columns: []string{"backend", "serve flags", "environment"}}
	for _, b := range backends {
		s := setups[b]
		t.Rows = append(t.Rows, TableRow{Status: StatusNeutral,
			Cells: []string{b, strings.Join(s.Args, " "), strings.Join(s.Env, " ")}})
	}
	return Section{ID: "instances", Title: "How the instances were started", Table: t,
		Intro: "Each instance ran with exactly this environment (the load tester's own is not passed on) and these flags; secrets are redacted."}
}

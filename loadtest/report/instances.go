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
// its value hidden when the name says it is a secret. Otherwise a value
// that starts with a URL scheme loses each URL's password and every
// secret-named query parameter's value (postgres://u@h/db?password=…, a
// comma-separated list such as etcd's endpoints), and a keyword/value
// connection string (host=h password=…) every secret-named keyword's
// value; the rest is kept byte for byte, so that the record still says
// what ran.
func Redact(kv string) string {
	name, value, ok := strings.Cut(kv, "=")
	if !ok {
		return kv
	}
	if isSecret(name) {
		return name + "=" + Redacted
	}
	return name + "=" + redactValue(value)
}

// redactValue hides the secrets of a value that is not a secret as a
// whole. Only a value that starts with a scheme is read as URLs: a
// keyword/value string may hold "://" in another keyword's value
// (application_name=http://…), and read as a URL it would keep its
// password.
func redactValue(v string) string {
	if hasScheme(v) {
		return redactURLs(v)
	}
	if kv, ok := redactKeywordValues(v); ok {
		return kv
	}
	return redactURLWords(v)
}

// hasScheme reports whether v starts with a URL scheme and "://"
// (RFC 3986: a letter, then letters, digits, '+', '-' or '.').
func hasScheme(v string) bool {
	scheme, _, ok := strings.Cut(v, "://")
	if !ok || scheme == "" || !isLetter(scheme[0]) {
		return false
	}
	for i := 1; i < len(scheme); i++ {
		if c := scheme[i]; !isLetter(c) && !('0' <= c && c <= '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// redactURLs hides the secrets of a URL or of a comma-separated list of
// them (--etcd-endpoints=http://u:pw1@h1,http://u:pw2@h2). A comma may
// also sit inside one URL (libpq's several hosts, a query value), so v is
// read both ways, as a list split before each comma-led scheme and as one
// URL, and what either reading takes for a secret is hidden: neither hides
// anything the other would show.
func redactURLs(v string) string {
	var list strings.Builder
	start := 0
	for i := 0; i < len(v); i++ {
		if v[i] == ',' && hasScheme(v[i+1:]) {
			list.WriteString(redactURL(v[start:i]) + ",")
			start = i + 1
		}
	}
	list.WriteString(redactURL(v[start:]))
	return redactURL(list.String())
}

// redactURLWords hides the secrets of every word of free text that
// starts with a URL scheme, keeping the rest, spaces included, byte for
// byte.
func redactURLWords(v string) string {
	var out strings.Builder
	for i := 0; i < len(v); {
		j := i
		for j < len(v) && isSpace(v[j]) {
			j++
		}
		out.WriteString(v[i:j])
		i = j
		for j < len(v) && !isSpace(v[j]) {
			j++
		}
		if word := v[i:j]; hasScheme(word) {
			out.WriteString(redactURLs(word))
		} else {
			out.WriteString(word)
		}
		i = j
	}
	return out.String()
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
// keyword/value connection string (host=h password='a b' dbname=d), and
// the secrets of any other keyword's value that starts with a URL scheme.
// It reads the string as pgx and libpq do: a keyword, '=' with optional
// spaces around it, then a value, unquoted up to the next space or
// single-quoted; in either, a backslash escapes the next character
// (password=a\ b is "a b"). ok is false when v does not parse as one: no
// driver would take a password from it either.
func redactKeywordValues(v string) (redacted string, ok bool) {
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
			return out.String(), true
		}
		keyStart := i
		for i < len(v) && v[i] != '=' && !isSpace(v[i]) {
			i++
		}
		key := v[keyStart:i]
		skipSpaces()
		if key == "" || i == len(v) || v[i] != '=' {
			return v, false
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
				return v, false
			}
			i++
		} else {
			for ; i < len(v) && !isSpace(v[i]); i++ {
				// A trailing backslash escapes nothing: pgx drops it.
				if v[i] == '\\' && i+1 < len(v) {
					i++
				}
			}
		}
		switch value := v[valueStart:i]; {
		case isSecret(key):
			out.WriteString(Redacted)
		case hasScheme(value):
			out.WriteString(redactURLs(value))
		default:
			out.WriteString(value)
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

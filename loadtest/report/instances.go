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

// secretNames are parts of variable and flag names whose values are
// secrets.
var secretNames = []string{"TOKEN", "PASSWORD", "SECRET", "KEY"}

// Redact returns a NAME=value environment entry or a --name=value flag with
// its value hidden when the name says it is a secret, and with the password
// of a URL value hidden otherwise.
func Redact(kv string) string {
	name, value, ok := strings.Cut(kv, "=")
	if !ok {
		return kv
	}
	upper := strings.ToUpper(strings.ReplaceAll(strings.TrimLeft(name, "-"), "-", "_"))
	for _, s := range secretNames {
		if strings.Contains(upper, s) {
			return name + "=" + Redacted
		}
	}
	if u, err := url.Parse(value); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return name + "=" + strings.Replace(u.String(), "xxxxx", Redacted, 1)
		}
	}
	return kv
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

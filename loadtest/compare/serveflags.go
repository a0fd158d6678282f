package compare

import (
	"fmt"
	"slices"
	"strings"

	"github.com/stockguard/stockguard/loadtest/report"
)

// ownedServeFlags are the serve flags compare sets itself. A --serve-flag
// naming one would win (the last value of a Go flag wins) and the result
// would then record a backend, fencing mode or address that did not run.
var ownedServeFlags = []string{"addr", "lock", "fencing", "admin-token"}

// ValidateServeFlags accepts "--name=value" or a bare boolean "--name", and
// refuses the flags compare owns and those a caller of compare sets itself
// (owned, names without dashes).
func ValidateServeFlags(flags []string, owned ...string) error {
	for _, f := range flags {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if !strings.HasPrefix(f, "-") || name == "" || strings.ContainsAny(name, " \t") {
			return fmt.Errorf("serve-flag %q: want --name=value", f)
		}
		if slices.Contains(ownedServeFlags, name) || slices.Contains(owned, name) {
			return fmt.Errorf("serve-flag %q: the command sets --%s itself", f, name)
		}
	}
	return nil
}

// redactAll is flags as the result records them: a --serve-flag may carry a
// connection string with its password (--database-url=postgres://u:pw@…).
func redactAll(flags []string) []string {
	if flags == nil {
		return nil
	}
	out := make([]string, len(flags))
	for i, f := range flags {
		out[i] = report.Redact(f)
	}
	return out
}

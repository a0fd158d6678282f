package compare

import (
	"fmt"
	"slices"
	"strings"
)

// ownedServeFlags are the serve flags compare sets itself. A --serve-flag
// naming one would win (the last value of a Go flag wins) and the result
// would then record a backend, fencing mode or address that did not run.
var ownedServeFlags = []string{"addr", "lock", "fencing", "admin-token"}

// validateServeFlags accepts "--name=value" or a bare boolean "--name", and
// refuses the flags compare owns.
func validateServeFlags(flags []string) error {
	for _, f := range flags {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if !strings.HasPrefix(f, "-") || name == "" || strings.ContainsAny(name, " \t") {
			return fmt.Errorf("serve-flag %q: want --name=value", f)
		}
		if slices.Contains(ownedServeFlags, name) {
			return fmt.Errorf("serve-flag %q: compare sets --%s itself (use its own flag)", f, name)
		}
	}
	return nil
}

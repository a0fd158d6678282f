// Package cliflag holds the command-line habits every stockguard subcommand
// shares, so serve, migrate and load parse lists the same way.
package cliflag

import "strings"

// SplitList splits a comma-separated list (addresses, URLs, names),
// dropping empty items and the spaces around each.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

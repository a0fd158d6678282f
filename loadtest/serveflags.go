package loadtest

import (
	"strings"
)

// serveFlagList is the repeatable --serve-flag of compare: each value goes
// verbatim to every instance (compare.Config.ServeFlags).
type serveFlagList []string

func (l *serveFlagList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, " ")
}

// Set appends one flag.
func (l *serveFlagList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

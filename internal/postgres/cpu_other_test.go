//go:build !unix

package postgres

import "time"

// cpuTime is unknown here; the cpu-µs/op metric then reads 0.
func cpuTime() time.Duration { return 0 }

package seedtable

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/chaos"
	"github.com/stockguard/stockguard/loadtest/progress"
)

// measureFencing runs chaos's pause-holder scenario on the backend, with
// fencing on and then off, on lock servers and instances of its own: one
// instance SIGSTOPped past its lease while orders sit between claim and
// write, then thawed.
func measureFencing(ctx context.Context, fc FaultConfig, stderr io.Writer) Fencing {
	cc := chaos.DefaultConfig()
	cc.Scenarios, cc.Backends, cc.Fencing = []string{"pause-holder"}, []string{fc.Backend}, []string{"on", "off"}
	cc.Bin, cc.DatabaseURL, cc.LogDir = fc.Bin, fc.DatabaseURL, fc.Dir
	cc.LockTTL = fc.LockTTL
	cc.Duration, cc.Warmup, cc.Recovery = 0, 500*time.Millisecond, time.Second
	cc.Concurrency, cc.Seed, cc.Progress = 6, 1, progress.Off
	cc.StartupTimeout = fc.StartupTimeout
	res, err := chaos.Execute(ctx, cc, stderr)
	if err != nil && res == nil {
		return Fencing{Error: err.Error()}
	}
	var out Fencing
	var problems []string
	for _, r := range res.Runs {
		if r.Error != "" {
			problems = append(problems, fmt.Sprintf("fencing %s: %s", r.Fencing, r.Error))
		}
		damaged := r.Units.Oversold + r.Units.Lost
		if r.Fencing == "on" {
			out.StaleWritesRefused, out.OnDamaged = r.StaleWritesRejected, damaged
			if !r.Pass && r.Error == "" {
				out.OnFailures = append(out.OnFailures, r.Failures...)
				if len(r.Failures) == 0 {
					out.OnFailures = append(out.OnFailures, r.Verdict)
				}
			}
		} else {
			out.OffDamaged = damaged
		}
	}
	if len(res.Runs) != 2 {
		problems = append(problems, fmt.Sprintf("%d of 2 runs made", len(res.Runs)))
	}
	out.Error = strings.Join(problems, "; ")
	return out
}

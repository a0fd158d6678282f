package chaos

import (
	"syscall"

	"github.com/stockguard/stockguard/loadtest/procs"
)

// instance is one `stockguard serve` of a run as the faults and the
// figures see it, wherever it runs: on loopback (procs.Instance) or inside
// a member of the run's network (netInstance).
type instance interface {
	baseURL() string
	logFile() string
	pid() int
	signal(syscall.Signal) error
}

// loopInstance is an instance on the host's loopback.
type loopInstance struct{ *procs.Instance }

func (in loopInstance) baseURL() string                 { return in.URL }
func (in loopInstance) logFile() string                 { return in.LogPath }
func (in loopInstance) pid() int                        { return in.PID() }
func (in loopInstance) signal(sig syscall.Signal) error { return in.Signal(sig) }

func (in *netInstance) baseURL() string                 { return in.url }
func (in *netInstance) logFile() string                 { return in.logPath }
func (in *netInstance) pid() int                        { return in.proc.PID() }
func (in *netInstance) signal(sig syscall.Signal) error { return in.proc.Signal(sig) }

// addLoop records instances started on loopback: the faults reach them as
// the others, teardown stops them.
func (e *chaosEnv) addLoop(ins []*procs.Instance) {
	e.procs = append(e.procs, ins...)
	for _, in := range ins {
		e.ins = append(e.ins, loopInstance{in})
	}
}

// urls are the instances' base URLs in order.
func (e *chaosEnv) urls() []string {
	out := make([]string, len(e.ins))
	for i, in := range e.ins {
		out[i] = in.baseURL()
	}
	return out
}

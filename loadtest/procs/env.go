package procs

import (
	"os"
	"sort"

	"github.com/stockguard/stockguard/loadtest/report"
)

// inherited are the only variables of the load tester's own environment an
// instance gets: what a process needs to run, nothing that configures the
// service. A STOCKGUARD_COALESCE=off left in the caller's shell must not
// silently change every backend's run. LOADTEST_FAKE_SERVE lets the load
// tester's tests start their own binary as a stand-in service.
var inherited = []string{"PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "GOCOVERDIR", "LOADTEST_FAKE_SERVE"}

// Environ is the whole environment of an instance: the inherited basics
// the caller has, plus exactly the STOCKGUARD_* variables the options set.
// It is sorted, so that recorded environments compare equal.
func (o ServeOptions) Environ() []string {
	var env []string
	for _, name := range inherited {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	if o.AdminToken != "" {
		env = append(env, "STOCKGUARD_ADMIN_TOKEN="+o.AdminToken)
	}
	sort.Strings(env)
	return env
}

// Setup is how instances started with these options run, as the result
// records it: the serve flags (with a placeholder address) and the
// environment, secrets redacted.
func (o ServeOptions) Setup() report.InstanceSetup {
	s := report.InstanceSetup{Bin: o.Bin}
	for _, a := range o.args("127.0.0.1:PORT") {
		s.Args = append(s.Args, report.Redact(a))
	}
	for _, kv := range o.Environ() {
		s.Env = append(s.Env, report.Redact(kv))
	}
	return s
}

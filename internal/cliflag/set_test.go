package cliflag

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type testFlags struct {
	addr  string
	n     int
	wait  time.Duration
	on    bool
	redis string
}

func newTestSet(out, errOut *strings.Builder) (*Set, *testFlags) {
	var f testFlags
	s := New("stockguard load run", "STOCKGUARD_LOAD_", out, errOut)
	s.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address")
	s.IntVar(&f.n, "orders", 10, "orders to send")
	s.DurationVar(&f.wait, "lock-wait", time.Second, "lock wait")
	s.BoolVar(&f.on, "expect-unsafe", false, "expect damage")
	s.StringVar(&f.redis, "redis-addrs", "", "Redis masters")
	s.ShareEnv("STOCKGUARD_", "redis-addrs")
	s.Example("stockguard load run --orders=5")
	return s, &f
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseFormsAndEnvironment(t *testing.T) {
	var out, errOut strings.Builder
	s, f := newTestSet(&out, &errOut)
	getenv := env(map[string]string{
		"STOCKGUARD_LOAD_ORDERS":    "7",
		"STOCKGUARD_LOAD_LOCK_WAIT": "3s",
		"STOCKGUARD_REDIS_ADDRS":    "a:1,b:2",
		// serve's variables of flags the load tester does not share are not read.
		"STOCKGUARD_ADDR":       "0.0.0.0:1",
		"STOCKGUARD_LOCK_WAIT":  "9s",
		"STOCKGUARD_LOAD_REDIS": "ignored",
	})
	if err := s.Parse([]string{"--addr", "127.0.0.1:9", "--lock-wait=2s", "--expect-unsafe"}, getenv); err != nil {
		t.Fatal(err)
	}
	want := testFlags{addr: "127.0.0.1:9", n: 7, wait: 2 * time.Second, on: true, redis: "a:1,b:2"}
	if *f != want {
		t.Errorf("flags = %+v, want %+v", *f, want)
	}
	if !s.IsSet("orders") || s.IsSet("zzz") {
		t.Errorf("IsSet: orders %v (set by its variable)", s.IsSet("orders"))
	}
	if out.Len()+errOut.Len() != 0 {
		t.Errorf("printed %q %q", out.String(), errOut.String())
	}
}

func TestInvalidEnvironmentNamesTheVariable(t *testing.T) {
	var out, errOut strings.Builder
	s, _ := newTestSet(&out, &errOut)
	err := s.Parse(nil, env(map[string]string{"STOCKGUARD_LOAD_ORDERS": "many"}))
	if !errors.Is(err, ErrUsage) || !errors.Is(err, ErrReported) || !strings.Contains(err.Error(), "STOCKGUARD_LOAD_ORDERS") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(errOut.String(), `STOCKGUARD_LOAD_ORDERS="many"`) || out.Len() != 0 {
		t.Errorf("stderr %q stdout %q", errOut.String(), out.String())
	}
}

func TestUsageErrorsGoToStderr(t *testing.T) {
	for _, args := range [][]string{{"--nope"}, {"--orders=x"}, {"--orders"}, {"stray"}} {
		var out, errOut strings.Builder
		s, _ := newTestSet(&out, &errOut)
		err := s.Parse(args, env(nil))
		if !errors.Is(err, ErrUsage) || !errors.Is(err, ErrReported) {
			t.Errorf("%q: err = %v", args, err)
		}
		if out.Len() != 0 || !strings.Contains(errOut.String(), "stockguard load run --help") {
			t.Errorf("%q: stdout %q stderr %q", args, out.String(), errOut.String())
		}
	}
	var out, errOut strings.Builder
	s, _ := newTestSet(&out, &errOut)
	if err := s.Parse([]string{"--nope"}, env(nil)); !strings.Contains(errOut.String(), "--nope") {
		t.Errorf("message %q does not name --nope (err %v)", errOut.String(), err)
	}
}

func TestHelpGoesToStdout(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		var out, errOut strings.Builder
		s, _ := newTestSet(&out, &errOut)
		err := s.Parse([]string{arg}, env(nil))
		if !errors.Is(err, ErrHelp) || Done(err) != nil {
			t.Errorf("%s: err = %v", arg, err)
		}
		if errOut.Len() != 0 {
			t.Errorf("%s wrote to stderr: %q", arg, errOut.String())
		}
		u := out.String()
		for _, want := range []string{
			"usage: stockguard load run [flags]",
			"  --addr=string\n", `default: 127.0.0.1:8080; env: STOCKGUARD_LOAD_ADDR`,
			"  --orders=int\n", "default: 10; env: STOCKGUARD_LOAD_ORDERS",
			"  --expect-unsafe\n", "default: false; env: STOCKGUARD_LOAD_EXPECT_UNSAFE",
			"default: none; env: STOCKGUARD_REDIS_ADDRS",
			"examples:\n  stockguard load run --orders=5\n",
		} {
			if !strings.Contains(u, want) {
				t.Errorf("%s: usage lacks %q:\n%s", arg, want, u)
			}
		}
		if strings.Contains(u, "\n  -addr") {
			t.Errorf("single-dash flag in usage:\n%s", u)
		}
	}
}

func TestReject(t *testing.T) {
	var out, errOut strings.Builder
	s, _ := newTestSet(&out, &errOut)
	err := s.Reject(errors.Join(ErrUsage, errors.New("x")))
	if !errors.Is(err, ErrUsage) || !errors.Is(err, ErrReported) || !strings.Contains(errOut.String(), "stockguard load run: ") {
		t.Errorf("err %v, stderr %q", err, errOut.String())
	}
	if err := s.Reject(errors.New("plain")); !errors.Is(err, ErrUsage) {
		t.Errorf("Reject(plain) = %v, want ErrUsage", err)
	}
}

func TestSplitList(t *testing.T) {
	if got := strings.Join(SplitList(" a:1, ,b:2,"), "|"); got != "a:1|b:2" {
		t.Errorf("SplitList = %q", got)
	}
}

// TestCommandLineWinsOverABadVariable: a variable is read only for a flag
// the command line does not give, so a bad one under a good flag is not an
// error; alone, it is, naming the flag and the variable.
func TestCommandLineWinsOverABadVariable(t *testing.T) {
	var out, errOut strings.Builder
	s, f := newTestSet(&out, &errOut)
	getenv := env(map[string]string{"STOCKGUARD_LOAD_LOCK_WAIT": "bogus", "STOCKGUARD_LOAD_ORDERS": "x"})
	if err := s.Parse([]string{"--lock-wait=5s", "--orders", "3"}, getenv); err != nil {
		t.Fatalf("Parse: %v\n%s", err, errOut.String())
	}
	if f.wait != 5*time.Second || f.n != 3 || errOut.Len() != 0 {
		t.Errorf("flags %+v, stderr %q", *f, errOut.String())
	}
	errOut.Reset()
	s, _ = newTestSet(&out, &errOut)
	err := s.Parse(nil, getenv)
	if !errors.Is(err, ErrUsage) || !strings.Contains(errOut.String(), `--lock-wait (STOCKGUARD_LOAD_LOCK_WAIT="bogus")`) {
		t.Errorf("err %v, stderr %q", err, errOut.String())
	}
}

func TestCommandLineOnlyReadsNoVariable(t *testing.T) {
	var out, errOut strings.Builder
	s, f := newTestSet(&out, &errOut)
	s.CommandLineOnly("expect-unsafe")
	if err := s.Parse(nil, env(map[string]string{"STOCKGUARD_LOAD_EXPECT_UNSAFE": "true"})); err != nil {
		t.Fatal(err)
	}
	if f.on || s.IsSet("expect-unsafe") {
		t.Error("a command-line-only flag was set by its variable")
	}
	if !strings.Contains(errOut.String(), "STOCKGUARD_LOAD_EXPECT_UNSAFE is ignored") {
		t.Errorf("no warning that the variable is ignored: %q", errOut.String())
	}
	if err := s.Parse([]string{"--expect-unsafe"}, env(nil)); err != nil || !f.on {
		t.Errorf("on the command line: err %v, set %v", err, f.on)
	}
	s.PrintUsage(&out)
	if !strings.Contains(out.String(), "default: false; env: none (command line only)") {
		t.Errorf("usage does not say the flag reads no variable:\n%s", out.String())
	}
}

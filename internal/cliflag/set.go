package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ErrUsage marks a command line (or an environment value) that could not be
// understood. Errors from Set wrap it together with ErrReported.
var ErrUsage = errors.New("usage")

// ErrReported marks an error whose message has already been written to
// stderr, so the caller exits without printing it a second time.
var ErrReported = errors.New("reported")

// ErrHelp is returned by Parse after the usage was printed to stdout because
// -h or --help was asked for: the command ends successfully.
var ErrHelp = flag.ErrHelp

// Set is one subcommand's flags. Every flag can also be set from an
// environment variable (its prefix plus the flag's name in capitals, dashes
// as underscores), which the command line overrides. Flags are written
// --name=value or --name value (booleans: --name or --name=false).
type Set struct {
	*flag.FlagSet
	cmd      string // "stockguard serve": how usage and errors name the command
	prefix   string
	env      map[string]string // flag name → its variable, where not prefix+NAME
	synopsis string
	about    string
	examples []string
	stdout   io.Writer
	stderr   io.Writer
}

// New returns the flags of cmd (e.g. "stockguard serve"), whose variables
// are prefix+FLAG (e.g. "STOCKGUARD_"). Help goes to stdout, usage errors to
// stderr.
func New(cmd, prefix string, stdout, stderr io.Writer) *Set {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	// Parse reports errors itself, in the double-dash form.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &Set{FlagSet: fs, cmd: cmd, prefix: prefix, env: map[string]string{}, stdout: stdout, stderr: stderr}
}

// Synopsis sets the usage line after the command name, e.g.
// "--urls=URL,... [flags]" (default "[flags]").
func (s *Set) Synopsis(line string) { s.synopsis = line }

// About sets the paragraph printed after the usage line.
func (s *Set) About(text string) { s.about = strings.TrimRight(text, "\n") }

// Example adds an example command line to the usage.
func (s *Set) Example(line string) { s.examples = append(s.examples, line) }

// ShareEnv makes the named flags read prefix+FLAG instead of the Set's own
// prefix: the load tester's connection flags read the variables serve reads
// (STOCKGUARD_REDIS_ADDRS), while its other flags keep their own namespace
// (STOCKGUARD_LOAD_FENCING never collides with serve's STOCKGUARD_FENCING).
func (s *Set) ShareEnv(prefix string, names ...string) {
	for _, n := range names {
		s.env[n] = EnvName(prefix, n)
	}
}

// CommandLineOnly makes the named flags read no variable: a confirmation
// such as migrate's --yes must be typed for the one run it confirms, not
// left in an environment that confirms every later run too. Parse warns
// on stderr when such a variable is set: whoever set it expects it to work.
func (s *Set) CommandLineOnly(names ...string) {
	for _, n := range names {
		s.env[n] = ""
	}
}

// EnvName is the variable of flag name under prefix: "STOCKGUARD_" and
// "redis-addrs" give STOCKGUARD_REDIS_ADDRS.
func EnvName(prefix, name string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// EnvVar is the environment variable flag name reads, "" for none
// (CommandLineOnly).
func (s *Set) EnvVar(name string) string {
	if v, ok := s.env[name]; ok {
		return v
	}
	return EnvName(s.prefix, name)
}

// Parse applies args, then the environment (through getenv; an empty value
// counts as unset) to the flags args did not set: the command line wins, so
// a bad variable under a flag given on the command line is never read. -h
// or --help prints the usage to stdout and returns ErrHelp. A bad flag,
// value, variable or a stray argument prints the reason to stderr and
// returns an error wrapping ErrUsage and ErrReported; a bad variable is
// named with its flag.
func (s *Set) Parse(args []string, getenv func(string) string) error {
	if err := s.FlagSet.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			s.PrintUsage(s.stdout)
			return ErrHelp
		}
		return s.Fail("%s", dashes(err.Error()))
	}
	if s.NArg() > 0 {
		return s.Fail("unexpected arguments %q", s.Args())
	}
	given := map[string]bool{}
	s.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var envErr error
	s.VisitAll(func(f *flag.Flag) {
		name := s.EnvVar(f.Name)
		if name == "" {
			if v := EnvName(s.prefix, f.Name); getenv(v) != "" {
				fmt.Fprintf(s.stderr, "%s: warning: %s is ignored: --%s is read from the command line only\n", s.cmd, v, f.Name)
			}
			return
		}
		if given[f.Name] {
			return
		}
		if v := getenv(name); v != "" {
			if err := s.Set(f.Name, v); err != nil {
				envErr = errors.Join(envErr, fmt.Errorf("--%s (%s=%q): %w", f.Name, name, v, err))
			}
		}
	})
	if envErr != nil {
		return s.Fail("%v", envErr)
	}
	return nil
}

// dashes rewrites the flag package's single-dash names in its messages
// ("flag provided but not defined: -nope") to the double dash we document.
func dashes(msg string) string {
	return strings.Replace(msg, " -", " --", 1)
}

// Fail prints the reason and a pointer to --help to stderr and returns an
// error wrapping ErrUsage and ErrReported: what a command does when a value
// passes parsing but not its own checks.
func (s *Set) Fail(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(s.stderr, "%s: %s\nRun \"%s --help\" for its flags.\n", s.cmd, msg, s.cmd)
	return fmt.Errorf("%w: %w: %s", ErrUsage, ErrReported, msg)
}

// IsSet reports whether flag name was given, on the command line or
// through its variable.
func (s *Set) IsSet(name string) bool {
	set := false
	s.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Reject reports err, a value that passed parsing but not the command's own
// checks, as Fail does. err should wrap ErrUsage; the result also wraps
// ErrReported.
func (s *Set) Reject(err error) error {
	msg := strings.TrimPrefix(err.Error(), ErrUsage.Error()+": ")
	fmt.Fprintf(s.stderr, "%s: %s\nRun \"%s --help\" for its flags.\n", s.cmd, msg, s.cmd)
	if !errors.Is(err, ErrUsage) {
		err = fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return fmt.Errorf("%w: %w", ErrReported, err)
}

// Done turns what Parse returned into what a command returns: nil after
// help was printed, the error otherwise. Call it only when Parse failed.
func Done(err error) error {
	if errors.Is(err, ErrHelp) {
		return nil
	}
	return err
}

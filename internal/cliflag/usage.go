package cliflag

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// PrintUsage writes the command's usage: its synopsis, every flag in
// double-dash form with its default and its variable, and the examples.
func (s *Set) PrintUsage(w io.Writer) {
	synopsis := s.synopsis
	if synopsis == "" {
		synopsis = "[flags]"
	}
	fmt.Fprintf(w, "usage: %s %s\n", s.cmd, synopsis)
	if s.about != "" {
		fmt.Fprintf(w, "\n%s\n", s.about)
	}
	fmt.Fprintf(w, "\nflags (each also read from the variable shown; the command line wins):\n")
	s.VisitAll(func(f *flag.Flag) {
		typ, text := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if typ != "" {
			head += "=" + typ
		}
		fmt.Fprintln(w, head)
		for _, line := range strings.Split(text, "\n") {
			fmt.Fprintf(w, "        %s\n", line)
		}
		def := f.DefValue
		if def == "" {
			def = "none"
		} else if strings.ContainsAny(def, " ,") {
			def = fmt.Sprintf("%q", def)
		}
		env := s.EnvVar(f.Name)
		if env == "" {
			env = "none (command line only)"
		}
		fmt.Fprintf(w, "        default: %s; env: %s\n", def, env)
	})
	if len(s.examples) > 0 {
		fmt.Fprintf(w, "\nexamples:\n")
		for _, e := range s.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

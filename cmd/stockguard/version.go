package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/stockguard/stockguard/internal/cliflag"
)

// Set at link time by the Makefile and the Dockerfile:
// -ldflags "-X main.version=... -X main.commit=...". Empty, the build info
// that the Go toolchain stamps into the binary is used instead.
var (
	version string
	commit  string
)

// buildVersion is what `stockguard version` prints.
type buildVersion struct {
	Version string // the module version, or what -X main.version set
	Commit  string // the VCS revision, "+dirty" when modified
	Go      string // the toolchain that built the binary
}

// readVersion combines the link-time values with the build info.
func readVersion() buildVersion {
	v := buildVersion{Version: version, Commit: commit, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		v.Go = bi.GoVersion
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if v.Commit == "" && rev != "" {
			v.Commit = rev
			if dirty {
				v.Commit += "+dirty"
			}
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	return v
}

func versionCmd(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := cliflag.New("stockguard version", envPrefix, stdout, stderr)
	fs.About("Prints the module version, the commit and the Go version the binary was built with.")
	fs.Example("stockguard version")
	if err := fs.Parse(args, getenv); err != nil {
		return cliflag.Done(err)
	}
	v := readVersion()
	fmt.Fprintf(stdout, "stockguard %s\ncommit %s\n%s\n", v.Version, v.Commit, v.Go)
	return nil
}

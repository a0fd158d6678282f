//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// installTimeout bounds EnsureTools, apt-get update included.
const installTimeout = 5 * time.Minute

// ErrNotRoot is returned when the process lacks the privileges that network
// namespaces need.
var ErrNotRoot = errors.New("netns: network namespaces need root (run the tests as root)")

// tools maps each command this package runs to the Debian package that
// ships it.
var tools = []struct{ command, pkg string }{
	{"ip", "iproute2"},
	{"nft", "nftables"},
}

// EnsureTools checks that the process is root and that ip and nft exist,
// installing iproute2 and nftables with apt-get when they are missing
// (nftables is not installed on a fresh Debian). It starts no service: the
// nftables package only ships a disabled unit, and no rule is loaded on the
// host.
func EnsureTools(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t.command); err != nil {
			missing = append(missing, t.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	if err := aptInstall(ctx, missing); err != nil {
		// A fresh machine has empty package lists: refresh once and retry.
		if _, uerr := aptGet(ctx, "update"); uerr != nil {
			return fmt.Errorf("netns: install %s: %w (apt-get update: %w)", strings.Join(missing, " "), err, uerr)
		}
		if err := aptInstall(ctx, missing); err != nil {
			return fmt.Errorf("netns: install %s: %w", strings.Join(missing, " "), err)
		}
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t.command); err != nil {
			return fmt.Errorf("netns: %s still missing after installing %s: %w", t.command, t.pkg, err)
		}
	}
	return nil
}

func aptInstall(ctx context.Context, pkgs []string) error {
	_, err := aptGet(ctx, append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...)
	return err
}

// aptGet runs apt-get non-interactively, waiting for a dpkg lock held by a
// parallel install instead of failing at once.
func aptGet(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-o", "DPkg::Lock::Timeout=120"}, args...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("apt-get %s: %w: %s", strings.Join(args, " "), err, tail(out))
	}
	return out, nil
}

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "; ")
}

//go:build linux

package netns

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// commandTimeout bounds one ip or nft invocation; they touch only kernel
// state and finish in milliseconds, so hitting it means something is wedged.
const commandTimeout = 10 * time.Second

// run executes name with args, feeding stdin when it is not empty, and
// returns its standard output. The error carries the command line and its
// standard error, which is where ip and nft explain themselves.
func run(ctx context.Context, stdin, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("netns: %s %s: %w: %s",
			name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// ipBatch runs several ip commands in one process inside namespace ns (the
// empty name means the namespace of the caller).
func ipBatch(ctx context.Context, ns string, lines []string) error {
	args := []string{"-batch", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	_, err := run(ctx, strings.Join(lines, "\n")+"\n", "ip", args...)
	return err
}

// nft loads an nftables script inside namespace ns.
func nft(ctx context.Context, ns, script string) error {
	_, err := run(ctx, script, "ip", "netns", "exec", ns, "nft", "-f", "-")
	return err
}

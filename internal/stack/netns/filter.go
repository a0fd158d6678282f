//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// table is the nftables table this package owns inside each member
// namespace; the host's namespace never gets a table.
const table = "inet stockguard_netns"

// rule drops packets between two members in one direction: from src to dst.
type rule struct{ src, dst *Member }

// Partition cuts every member of side a off from every member of side b, in
// both directions; members on the same side still reach each other, and
// members on neither side reach everybody. Packets are dropped, so
// connection attempts across the cut time out and established connections
// stall. Partitions add up until Heal.
func (t *Topology) Partition(ctx context.Context, a, b []string) error {
	rules, err := t.rulesBetween(a, b)
	if err != nil {
		return err
	}
	back, err := t.rulesBetween(b, a)
	if err != nil {
		return err
	}
	return t.apply(ctx, append(rules, back...))
}

// Isolate cuts member name off from every other member, both directions.
func (t *Topology) Isolate(ctx context.Context, name string) error {
	var rest []string
	for _, n := range t.order {
		if n != name {
			rest = append(rest, n)
		}
	}
	return t.Partition(ctx, []string{name}, rest)
}

// Heal removes every partition: the table this package loaded into each
// member namespace is deleted, so all members reach each other again.
func (t *Topology) Heal(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errClosed
	}
	var errs []error
	for _, m := range t.Members() {
		// "add" before "delete" makes the script succeed whether or not the
		// table exists yet.
		if err := nft(ctx, m.namespace, fmt.Sprintf("add table %s\ndelete table %s\n", table, table)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var errClosed = errors.New("netns: topology closed")

func (t *Topology) rulesBetween(from, to []string) ([]rule, error) {
	var rules []rule
	for _, f := range from {
		src, err := t.member(f)
		if err != nil {
			return nil, err
		}
		for _, d := range to {
			dst, err := t.member(d)
			if err != nil {
				return nil, err
			}
			if src == dst {
				return nil, fmt.Errorf("netns: member %q on both sides of a cut", f)
			}
			rules = append(rules, rule{src: src, dst: dst})
		}
	}
	return rules, nil
}

// apply loads rules into the namespaces of both ends: the sender drops on
// output and the receiver drops on input, so a cut does not rest on one
// namespace's rules alone.
func (t *Topology) apply(ctx context.Context, rules []rule) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errClosed
	}
	scripts := make(map[*Member]*strings.Builder)
	script := func(m *Member) *strings.Builder {
		if b, ok := scripts[m]; ok {
			return b
		}
		b := &strings.Builder{}
		fmt.Fprintf(b, "add table %s\n", table)
		fmt.Fprintf(b, "add chain %s input { type filter hook input priority 0; policy accept; }\n", table)
		fmt.Fprintf(b, "add chain %s output { type filter hook output priority 0; policy accept; }\n", table)
		scripts[m] = b
		return b
	}
	for _, r := range rules {
		fmt.Fprintf(script(r.src), "add rule %s output ip daddr %s drop\n", table, r.dst.addr)
		fmt.Fprintf(script(r.dst), "add rule %s input ip saddr %s drop\n", table, r.src.addr)
	}
	var errs []error
	for m, b := range scripts {
		if err := nft(ctx, m.namespace, b.String()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

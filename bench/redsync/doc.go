// Package redsyncbench measures Stockguard's redlock backend against
// go-redsync/redsync on the same Redis masters, in one run: time per
// acquire+release cycle uncontended and under 16-way contention, and how
// evenly 16 contending clients share one key.
//
// It is a separate module so that redsync never enters the service's
// dependencies. Run it against the local stack (scripts/stack.sh up):
//
//	cd bench/redsync && go test -run '^$' -bench . -count 5
//	cd bench/redsync && go test -run Fairness -v
package redsyncbench

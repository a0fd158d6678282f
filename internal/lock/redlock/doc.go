// Package redlock is the Redlock lock backend over N independent Redis
// masters (default five), with a fencing token none of the public Redis
// libraries offer.
//
// # Acquisition
//
// The published algorithm: the requests go to every node in parallel, each
// bounded by a short node timeout; the lock is held when a majority (N/2+1)
// granted it, and it is valid for TTL − elapsed − drift, where elapsed runs
// from before the first request and drift (1% of the TTL + 2 ms) allows for
// the nodes' clocks running at other rates than ours. An attempt that fails
// (no majority, or no validity left) unlocks every node it may have written
// before the next attempt, which comes after a jittered pause.
//
// # Fencing token
//
// Round 1, on every node in one atomic script: SET NX PX, and read the
// node's fence counter. Once a majority granted the lock, token = the largest
// counter read + 1. Round 2, on the nodes that granted the lock: a script
// raises the counter to the token only if it is below the token and only
// while the node still holds our lock value. The token is valid only if
// round 2 succeeded on a majority; otherwise the attempt fails like any
// other.
//
// Why tokens are unique: two acquisitions that published the same token
// would each have raised the counter to it on a majority, and any two
// majorities share a node; on that node the second script found the counter
// no longer below the token and refused.
//
// Why tokens increase: when lease B starts acquiring after lease A became
// valid, B's round-1 majority intersects A's round-2 majority. On a shared
// node A's counter write happened while A held that node's lock, hence
// before B could take it, and B reads the counter in the same script that
// takes the lock; so B reads at least A's token and picks a larger one.
// Counters are read on every node that answers, not only the acquired
// majority: a larger maximum is still a correct bound, and it makes the next
// token skip past counters raised by attempts that failed.
//
// A node that restarts empty (no persistence) forgets both the lock and the
// counter. That is tolerated while a majority remembers: the next round-1
// majority still intersects the last round-2 majority in a node that kept its
// counter, so tokens keep increasing (round 2 usually reaches every node, so
// one restart leaves four of five remembering). The restarted node catches
// up with the next round 2. Losing the counters on a majority at once breaks
// the guarantee, as it breaks Redlock's mutual exclusion.
//
// Goroutines of one Locker that want the same key wait in a local FIFO line
// (package keyqueue), and only the head polls the nodes: several goroutines
// polling at once would split the nodes' votes so that none wins.
//
// # Wake-ups
//
// Between attempts the head of the line does not just sleep: it blocks
// (BLPOP, for at most its pause) on the key's wake list on one node, chosen
// by hashing the key, and a release pushes one element there when it
// deletes the lock. Redis gives the element to the client blocked longest,
// so each release wakes one waiter across all processes, oldest first: the
// key no longer stands free for the rest of everyone's pause (on a hot key
// it was free about a third of the time), and there is no herd to split the
// votes, which is what publishing releases to every waiter (Redisson's way)
// did here. Wake-ups are hints: safety never depends on them, and with the
// wake node down, waiters fall back to their pauses.
//
// # Early return
//
// Each round returns as soon as a majority has answered; the slower nodes'
// requests run on in the background and late nodes that granted the lock
// still receive round 2. A release (after a failed attempt, a cancelled one,
// or of a lease) first waits, node by node, for the reply to every lock
// write sent to that node, and only then deletes there: a SET that landed
// after the delete would hold that node for the whole TTL.
package redlock

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
// counter read + 1. Round 2, on every node that answered round 1, whether it
// granted us the lock or not: a script raises the counter to the token if it
// is below the token. The raise counts only on a node that still holds our
// lock value, and the token is valid only if it counted on a majority;
// otherwise the attempt fails like any other.
//
// Why tokens are unique: two acquisitions that published the same token
// would each have raised the counter to it, counted, on a majority, and any
// two majorities share a node; on that node the second script found the
// counter no longer below the token and did not count.
//
// Why tokens increase: when lease B starts acquiring after lease A became
// valid, B's round-1 majority intersects A's counted round-2 majority. On a
// shared node A's counter write happened while A held that node's lock,
// hence before B could take it, and B reads the counter in the same script
// that takes the lock; so B reads at least A's token and picks a larger one.
// Counters are read on every node that answers, not only the acquired
// majority: a larger maximum is still a correct bound, and it makes the next
// token skip past counters raised by attempts that failed. Raising counters
// where the lock is not ours only makes them larger, which keeps both
// arguments (a raise there never counts) and costs at most an attempt that
// raced another one.
//
// Empty restarts. A node that restarts empty (no persistence) forgets both
// the locks and the counters. Token T stays safe while more than N−quorum
// nodes remember a counter ≥ T (for five nodes: three), because every
// round-1 majority then includes one of them. Round 2 writes T to every node
// that answers — normally all N, including those where another holder's
// stale lock refused us in round 1, which is what a release that reached
// only a majority leaves behind — so with all N up the scheme tolerates
// quorum−1 empty restarts (two of five) between two acquisitions of a key;
// each node of round 2 that did not answer takes one off that number. The
// next acquisition's round 2 brings the restarted nodes up again. Losing the
// counters on more nodes at once breaks the guarantee, as it breaks
// Redlock's mutual exclusion (which, like the paper, assumes that a node
// restarted empty stays away for a TTL or keeps its data).
//
// # Batches
//
// AcquireBatch makes one attempt for many keys: each round (and the release)
// is one script call per node carrying every key, each key under its own
// lease id, with its own counter, token, validity, watchdog and lost signal,
// exactly as if acquired alone. The attempt settles each key by its own
// majority; keys not obtained are unlocked, in one call per node, on every
// node that may hold them, and reported held. A key whose line in this
// Locker is busy counts as held and is not sent (see below). Leases of one
// Locker released together (lock.Set.Release) go in one call per node.
//
// Goroutines of one Locker that want the same key wait in a local FIFO line
// (package keyqueue), and only the head polls the nodes: several goroutines
// polling at once would split the nodes' votes so that none wins. A batch
// takes a key only when its line is free; a busy line (held, being acquired,
// or waited for by a goroutine of this Locker) makes the key held, so a
// batch never overtakes a waiter of its own process.
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
// or of a lease) first waits, node by node, for that node's round-1 reply
// (the attempt's only lock write there), and only then deletes there: a SET
// that landed after the delete would hold that node for the whole TTL.
package redlock

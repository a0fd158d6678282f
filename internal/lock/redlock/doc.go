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
// Round 1, on every node in one atomic script: SET NX PX and, where the
// node granted us the lock, increment the key's fence counter (where it did
// not, only read it). Once a majority granted the lock, the token is decided:
//
//   - If every node that has answered so far (a majority at least) granted
//     us the lock and incremented the counter to the same value v, the token
//     is v and the lease is ours: those nodes published v under our lock in
//     round 1. That is the ordinary case — the counters agree whenever the
//     key's previous token reached every node — and it costs no second
//     round. A node that answers round 1 later with another value is sent
//     round 2 (below) to learn v, uncounted.
//   - Otherwise, token = the largest counter returned + 1, and round 2 goes
//     to every node that answered round 1, whether it granted us the lock or
//     not: a script raises the counter to the token if it is below the
//     token. The raise counts only on a node that still holds our lock
//     value, and the token is valid only if it counted on a majority;
//     otherwise the attempt fails like any other.
//
// Either way the token is published on a majority of nodes while we hold
// their lock: by an increment that took the counter to it, or by a raise
// from below it. Call those nodes the token's witnesses.
//
// Why tokens are unique: two acquisitions with the same token T have
// witness majorities that share a node. There the counter was taken to T
// from below twice, under two grants one after the other; but the first
// left it at T, counters never go down, and from T an increment leads past
// T while a raise to T does not count.
//
// Why tokens increase: when lease B starts acquiring after lease A became
// valid, the majority B's token is decided on (the nodes that answered by
// then, of which a majority granted it) intersects A's witnesses. On a
// shared node that granted B, A's publication happened while A held that
// node's lock, hence before B could take it, and B's script increments the
// counter in the step that takes the lock: so B sees more than A's token
// there, and its token, in either case, is larger. Counters are read on
// every node that answers, not only the acquired majority: a larger maximum
// is still a correct bound, and it makes the next token skip past counters
// raised by attempts that failed. Counters moved where no lease comes of it
// (a failed attempt, a raise where the lock is not ours) only become
// larger, which keeps both arguments and costs at most a gap in the tokens
// or an attempt that raced another one.
//
// Empty restarts. A node that restarts empty (no persistence) forgets both
// the locks and the counters. Token T stays safe while more than N−quorum
// nodes remember a counter ≥ T (for five nodes: three), because every
// majority a token is decided on then includes one of them. T reaches every
// node that answers round 1 — normally all N: by the increments, by the
// lesson a late node gets, or by round 2, including the nodes where another
// holder's stale lock refused us, which is what a release that reached only
// a majority leaves behind — so with all N up the scheme tolerates quorum−1
// empty restarts (two of five) between two acquisitions of a key; each node
// that did not answer takes one off that number. The next acquisition
// brings the restarted nodes up again: their counters differ from the
// others', so it takes round 2 (or teaches them, when they answer late).
// On a node that granted us the lock, the lease's release waits until the
// attempt has sent that node everything (round 2, the lesson), so T lands
// there before the lock is free for the next holder's increment; on a node
// that refused us nothing orders the lesson before the other holder's lock
// lapses, so there the lesson is best effort, and such a node counts as
// one that did not answer. Losing the counters on more nodes at once
// breaks the guarantee, as it
// breaks Redlock's mutual exclusion (which, like the paper, assumes that a
// node restarted empty stays away for a TTL or keeps its data).
//
// Why not always two rounds (round 1 reading, round 2 publishing): on a
// batch of spread orders round 2 was a third of the script calls and of
// the per-key work on every node, for counters that almost always agreed.
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
// (BLPOP, for up to retry.AwaitSpan retry delays) on the key's wake list on
// one node, chosen by hashing the key, and a release pushes one element
// there, whether or
// not that node is among the majority the lease held (a lease whose write
// the wake node refused frees the key by its deletes elsewhere). After a
// split vote — some nodes granted the attempt — it sleeps a quarter of a
// delay instead (retry.SplitShare): possibly nobody holds the key, no
// release is coming to end that wait, and Redis keeps a blocked client's
// timeout only to its event loop's next wake-up, a tenth of a second on a
// quiet server. A refusal names the lease id that holds the key on that
// node; where one id refused the attempt on a majority, and did so on the
// attempt before too, a lease holds the key there (exactly a majority: the
// other nodes free, or restarted empty), and its waiter awaits its
// release like any other. The first such refusal still counts as a split:
// it is also what a waiter meets when it outruns, by a round trip, the
// deletes of the release that woke it (see Locker.split). Redis gives the
// element to the client blocked longest in its current pop, so each
// release wakes one waiter, at once: the
// key no longer stands free for the rest of everyone's pause (on a hot key
// it was free about a third of the time), and there is no herd to split the
// votes, which is what publishing releases to every waiter (Redisson's way)
// did here. The clean-up of an attempt that a majority refused wakes
// nobody: the key is still set there, so the wake-up could only send a
// waiter (its own line's head, often) straight into the same refusal, an
// attempt a round trip while the holder keeps the key; the holder's release
// wakes them. Wake-ups are hints: safety never depends on them, and with the
// wake node down, waiters fall back to their pauses. Nor are they a line
// across processes: a pop lasts one span, and a waiter refused again blocks
// anew behind those already blocked, so Lockers' waiters are not served in
// the order they began to wait. A Locker that wants a
// key again within its retry delay of releasing it awaits a wake-up before
// its first attempt (package retry): the release woke the waiter blocked
// longest, and trying at once would race it and split the votes; with
// nobody else waiting the release's own wake-up is still there, and the
// wait returns at once.
//
// # Early return, and late writes
//
// Each round returns as soon as a majority has answered; the slower nodes'
// requests run on in the background, and late nodes still receive round 2,
// or the lesson of a token decided in round 1. A release (after a failed attempt, a cancelled one,
// or of a lease) first waits, node by node, for that node's round-1 reply
// (the attempt's only lock write there), and only then deletes there: a SET
// that landed after the delete would hold that node for the whole TTL.
//
// A round-1 request that timed out has no reply to wait for, and its SET
// may still land: a paused Redis runs what its connections buffered when it
// resumes, after any delete sent in the meantime (those need new
// connections, which the paused server does not answer). So the delete of
// such a write counts only once the node has answered a delete and then
// one more sent after that answer, or deleted the write (see
// redisnode.Release for why that order holds); a delete a node does not
// confirm in its tries, or, once the acquisition's ctx is done, at once
// (the caller's deadline does not wait for a frozen node's tries; the
// deletes on nodes that answered round 1 are still awaited, for up to a
// node timeout), goes on in the background, for up to four TTLs or until Close, and the failed or
// cancelled acquisition's error wraps lock.ErrCleanupPending. A request that never reached the node (no
// connection) left nothing there and needs no delete. A release whose
// nodes all answered round 1 and its delete costs what it always did.
package redlock

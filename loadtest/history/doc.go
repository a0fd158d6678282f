// Package history records what load clients asked the service and what it
// answered, and checks the record against the final state, the way Jepsen
// judges a database: not by end-of-run counters alone but by whether one
// legal sequential order of the operations explains every answer.
//
// A History holds operations (place, confirm, cancel, expire), each with its
// client, SKU lines, invocation and completion times and outcome: OK (with
// the order and its lines), a definite failure (the request had no effect),
// or unknown (a timeout, a dropped connection or a 503 after the request was
// sent: it may or may not have taken effect). A client that retries with its
// Idempotency-Key records one operation for all its attempts: invoked at the
// first, completed at the last, OK if any attempt was acknowledged, failed
// only when the answer is definite, unknown otherwise.
//
// Check verifies, per SKU, against a final read of orders and SKU counters
// taken after every instance has stopped or drained:
//   - every acknowledged order exists exactly once, with its lines, and no
//     order exists that no operation placed;
//   - acknowledged units still outstanding never exceed the stock;
//   - transitions are consistent: confirm and cancel act only on reserved
//     orders, final statuses agree with acknowledged transitions;
//   - the fence tokens the store accepted never decrease in real time: an
//     order placed after another was acknowledged has, on each SKU they
//     share, a token at least as high (overlapping orders may be written
//     in either order);
//   - the SKU's (available, held, sold), with the status of each of its
//     orders, is linearizable under the operations, checked by porcupine
//     with a time bound.
//
// Expiry is modelled, not assumed away: an order the final read shows
// expired becomes an expire operation that took effect at an unknown moment
// between its expires_at and the final read (recorded expire operations,
// from a client that saw one, are checked as recorded). Unknown outcomes are
// modelled as porcupine expects of a nondeterministic model: the operation
// may take effect or not, at any moment between its invocation and the
// final read. For the search alone, the final read settles the ones it
// decides (a place whose key has no order never happened; a confirm of an
// order that ended cancelled never took effect), since each one left open
// doubles the states porcupine carries.
package history

// Package pgproxy is a TCP proxy between a Postgres client and its server
// that can lose a commit's acknowledgement on purpose. Armed
// (Proxy.ArmAutocommit), it forwards a statement that runs outside an
// explicit transaction, and so commits by itself, waits until the server
// has answered it (so it is really committed, or really refused), discards
// the answer and closes both connections. The client sees its connection
// die in the middle of the statement and cannot know the outcome: the "lost
// commit ack" fault that idempotent retries must survive without doing the
// work twice. It is the fault a single-statement write, which never sends
// COMMIT, can suffer; the service's writes are such statements.
//
// The proxy reads the frontend protocol just enough to recognise the
// statements: the text of a simple-protocol Query, and that of the
// prepared statement behind an extended-protocol Execute. Whether an
// explicit transaction is open it learns from the transaction status of
// the server's ReadyForQuery: it drops no statement sent inside one. A
// dropped answer counts as committed only if no answer from the statement
// to the end of its Query or Sync group is an error or a ROLLBACK, and the
// ReadyForQuery that ends the group says no transaction is open (a BEGIN
// it could not see, earlier in the same Query or pipeline, leaves one open
// and the write is rolled back); see Drop.Committed.
// Everything else is forwarded unchanged. The proxy answers an SSL or GSS encryption request
// with "no" itself, so the stream it reads is never encrypted: use
// sslmode=disable or prefer.
package pgproxy

// Package pgproxy is a TCP proxy between a Postgres client and its server
// that can lose a commit's acknowledgement on purpose: armed, it forwards a
// COMMIT to the server, waits until the server has answered (so the
// transaction is really committed, or really refused), discards the answer
// and closes both connections. The client sees its connection die in the
// middle of COMMIT and cannot know the outcome: the "lost commit ack" fault
// that idempotent retries must survive without doing the work twice.
//
// The proxy reads the frontend protocol just enough to recognise a COMMIT:
// a simple-protocol Query whose whole text is COMMIT (or END), which is what
// pgx sends for Tx.Commit (Exec("commit") without arguments always takes the
// simple protocol, in database/sql's stdlib wrapper too), and the
// extended-protocol Execute of a statement whose text is COMMIT. It also
// keeps the texts of the statements of each connection's open transaction so
// that a predicate can pick the transaction whose commit to lose. Armed with
// ArmAutocommit instead, it loses the answer of a statement sent outside an
// explicit transaction, which commits by itself. Everything
// else is forwarded unchanged. The proxy answers an SSL or GSS encryption
// request with "no" itself, so the stream it reads is never encrypted: use
// sslmode=disable or prefer.
package pgproxy

// Package models holds the Promela models of Stockguard's two safety
// arguments and the test that checks them with spin: claim.pml (claim,
// read, write under fencing tokens, with paused and duplicate-token
// holders) and redlock.pml (the two-round Redlock fencing token with nodes
// that are down, hold foreign keys or restart empty). Each model is checked
// exhaustively as written, and each weakened variant must yield a
// counterexample, so a model that stopped exercising the race would fail.
package models

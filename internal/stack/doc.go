// Package stack connects code and tests to the servers stockguard runs
// against: the shared local stack that scripts/stack.sh starts (five Redis
// masters, a three-node ZooKeeper ensemble, PostgreSQL), and private servers
// that a test or the chaos load tester starts, owns and breaks on purpose.
//
// Shared-stack tests call RequireRedis, RequireZK, RequirePostgres or
// NewDatabase. Fault tests call StartRedis or StartZKEnsemble instead, so that
// killing a server never disturbs anybody else using the shared stack.
package stack

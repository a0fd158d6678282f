// Package stack connects code and tests to the servers stockguard runs
// against: the shared local stack that scripts/stack.sh starts (five Redis
// masters, a three-node ZooKeeper ensemble, a three-member etcd cluster,
// PostgreSQL), and private servers that a test or the chaos load tester
// starts, owns and breaks on purpose.
//
// Shared-stack tests call RequireRedis, RequireZK, RequireEtcd,
// RequirePostgres or NewDatabase. Fault tests call StartRedis,
// StartZKEnsemble or StartEtcdCluster instead, so that killing a server never
// disturbs anybody else using the shared stack.
package stack

package seedtable

// facts are the CAP choice and the lock types of each backend's system, as
// its own documentation (or the analysis it links) states them.
var facts = map[string][2]Fact{
	"none": {
		{Text: "no coordination", Source: "—"},
		{Text: "none", Source: "—"},
	},
	"local": {
		{Text: "one process only: nothing is distributed", Source: "https://pkg.go.dev/sync#Mutex"},
		{Text: "in-process mutex per key", Source: "https://pkg.go.dev/sync#Mutex"},
	},
	"postgres": {
		{Text: "single primary: consistent, unavailable while it is down (no automatic failover)",
			Source: "https://www.postgresql.org/docs/15/high-availability.html"},
		{Text: "advisory locks: session or transaction level, exclusive or shared, blocking or try",
			Source: "https://www.postgresql.org/docs/15/explicit-locking.html#ADVISORY-LOCKS"},
	},
	"redis": {
		{Text: "AP-ish: one master; asynchronous replication loses acknowledged writes on failover",
			Source: "https://redis.io/docs/latest/operate/oss_and_stack/management/replication/"},
		{Text: "SET NX PX lease (exclusive, TTL-bound); no fencing token of its own",
			Source: "https://redis.io/docs/latest/develop/use/patterns/distributed-locks/"},
	},
	"redlock": {
		{Text: "AP-ish quorum of independent masters; safety assumes bounded clock drift and pauses",
			Source: "https://redis.io/docs/latest/develop/use/patterns/distributed-locks/ ; https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html"},
		{Text: "exclusive TTL lease on a majority (Redisson adds reentrant, fair, read-write, semaphore)",
			Source: "https://redis.io/docs/latest/develop/use/patterns/distributed-locks/"},
	},
	"zookeeper": {
		{Text: "CP: ZAB atomic broadcast, writes need a quorum; a minority side stops serving",
			Source: "https://zookeeper.apache.org/doc/r3.8.0/zookeeperInternals.html"},
		{Text: "recipes: exclusive lock, shared (read-write) lock, leader election; Curator adds semaphores",
			Source: "https://zookeeper.apache.org/doc/r3.8.0/recipes.html"},
	},
	"etcd": {
		{Text: "CP: Raft, linearizable reads and writes need a quorum",
			Source: "https://etcd.io/docs/v3.4/learning/api_guarantees/"},
		{Text: "concurrency.Mutex (exclusive, FIFO by create revision), election; leases carry TTLs",
			Source: "https://pkg.go.dev/go.etcd.io/etcd/client/v3/concurrency"},
	},
}

// FactsFor fills the table's CAP and lock-type facts.
func FactsFor(backend string) (cap, lockTypes Fact) {
	f, ok := facts[backend]
	if !ok {
		return Fact{Text: "unknown backend", Source: "—"}, Fact{Text: "unknown backend", Source: "—"}
	}
	return f[0], f[1]
}

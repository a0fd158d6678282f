// Package loadtest is the command line of Stockguard's load tester,
// `stockguard load <run|compare|chaos|bench>`: it parses each command's
// flags, calls the package that does the work, prints its table and writes
// its JSON and HTML. Main is the entry point cmd/stockguard calls.
//
// The load tester drives the service's HTTP API as a client would, over
// several instances, and proves from three independent sources whether any
// unit was oversold or lost: the client's own receipts of 201 answers (the
// "ledger" of the output), each SKU's /audit and each SKU's counters. Its
// packages:
//
//   - run: the workload runner against instances already up, and the
//     verification run, compare and chaos share;
//   - compare: every backend on the same workload, on instances it starts;
//   - chaos: fault scenarios under load; it starts its own Redis and
//     ZooKeeper servers and pauses, kills and restarts them through
//     internal/stack, and SIGSTOPs instances;
//   - bench: the benchmark suite; it writes to Postgres directly (pgx) for
//     the store ceiling and runs the backends through compare;
//   - procs: starting and stopping `stockguard serve` instances;
//   - client: the HTTP client of the API; tally: counts and latency;
//     progress: the progress bar; report: HTML, SVG and JSON output;
//     fakeservice: a stand-in service for the tests.
//
// Of the service's own packages it imports internal/cliflag (here),
// internal/lock/backends (compare: the list of backends and which are
// fenced) and internal/stack (chaos); it imports nothing of the request
// path.
package loadtest

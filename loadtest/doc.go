// Package loadtest is Stockguard's load tester: it drives the service's HTTP
// API exactly as a client would, over several instances, and then proves from
// three independent sources whether any unit was oversold or lost.
//
// The three sources are the client's own ledger of 201 answers, each SKU's
// /audit (computed by the service from order lines) and each SKU's counters
// (GET /v1/skus/{sku}). A safe lock backend makes all three agree; an unsafe
// one (none, or local with several instances) makes them disagree, and the
// report says by how many units.
//
// The package imports no service internals. Main is the entry point for
// `stockguard load ...`; Run executes one workload against running
// instances; compare starts its own instances per backend and writes an HTML
// report whose data model (Report, Section, Chart) other scenarios can extend.
package loadtest

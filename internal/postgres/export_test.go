package postgres

// StatementSpanName is the span name the pgx tracer gives sql when it is
// none of the named statements.
func StatementSpanName(sql string) string {
	name, _ := (&queryTracer{}).statement(sql)
	return "postgres " + name
}

// ClaimSQL is the claim as pgx sends it ($1 SKUs, $2 tokens, $3 holders).
var ClaimSQL = numbered(claimSQL)

// WriteSQL is the fenced write as pgx sends it.
var WriteSQL = func() string { _, q := writeStatements(true); return q }()

package postgres

import (
	"context"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// traceScope is the instrumentation scope of the statement spans.
const traceScope = "github.com/stockguard/stockguard/internal/postgres"

// attrRows is the row count of the statement's command tag: rows returned
// by a SELECT, rows changed by an UPDATE or INSERT (RETURNING or not).
const attrRows = attribute.Key("stockguard.db.rows")

// WithTracer gives every statement a span on tp: the hot ones by name
// (claim, read, write), the others by their first keyword. Default: none,
// and then no tracer is installed on the connections at all.
func WithTracer(tp trace.TracerProvider) Option { return func(c *config) { c.tracer = tp } }

// queryTracer is the pgx tracer of every pooled connection. A span is
// named by the statement, never by its text: the text is long and, for
// gorm's statements, ours to keep out of a collector.
type queryTracer struct {
	tracer trace.Tracer
	names  map[string]string // SQL as pgx sees it → statement name
}

// newQueryTracer is the tracer of the store's connections.
func newQueryTracer(tp trace.TracerProvider, fencing bool) *queryTracer {
	_, write := writeStatements(fencing)
	return &queryTracer{tracer: tp.Tracer(traceScope), names: map[string]string{
		numbered(claimSQL): "claim", numbered(readSQL): "read", write: "write"}}
}

var (
	_ pgx.QueryTracer = (*queryTracer)(nil)
	_ pgx.BatchTracer = (*queryTracer)(nil)
)

// operations are the statement kinds the service sends, the names of
// every statement that is not one of the hot ones.
var operations = map[string]bool{"SELECT": true, "INSERT": true, "UPDATE": true, "DELETE": true, "WITH": true,
	"BEGIN": true, "COMMIT": true, "ROLLBACK": true, "SAVEPOINT": true, "RELEASE": true, "SET": true}

// statement is the name and operation of sql.
func (t *queryTracer) statement(sql string) (name, op string) {
	op = strings.TrimSpace(sql)
	if i := strings.IndexFunc(op, func(r rune) bool { return unicode.IsSpace(r) || r == ';' }); i >= 0 {
		op = op[:i]
	}
	op = strings.ToUpper(op)
	if !operations[op] {
		op = "OTHER"
	}
	if name, ok := t.names[sql]; ok {
		return name, op
	}
	return strings.ToLower(op), op
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	name, op := t.statement(d.SQL)
	return t.start(ctx, name, op)
}

// start begins the client span of the statement named name.
func (t *queryTracer) start(ctx context.Context, name, op string) context.Context {
	ctx, _ = t.tracer.Start(ctx, "postgres "+name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.DBSystemNamePostgreSQL, semconv.DBOperationName(op), semconv.DBQuerySummary(name)))
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer. pgx calls it when the rows are
// closed, so a query's span covers reading its rows.
func (t *queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	span := trace.SpanFromContext(ctx)
	defer span.End()
	if failed(span, d.Err) {
		return
	}
	span.SetAttributes(attrRows.Int64(d.CommandTag.RowsAffected()))
}

// TraceBatchStart implements pgx.BatchTracer. The hot statements go in
// batches behind genericPlanSQL (hotBatch): a batch's span is named by the
// statement it carries, as if sent alone, and covers the round trip.
func (t *queryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	name, op := "batch", "OTHER"
	for _, q := range d.Batch.QueuedQueries {
		if q.SQL != genericPlanSQL {
			name, op = t.statement(q.SQL)
			break
		}
	}
	return t.start(ctx, name, op)
}

// TraceBatchQuery implements pgx.BatchTracer: the rows of the statement the
// span is named by. A failure is the batch's (TraceBatchEnd).
func (t *queryTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if d.Err == nil && d.SQL != genericPlanSQL {
		trace.SpanFromContext(ctx).SetAttributes(attrRows.Int64(d.CommandTag.RowsAffected()))
	}
}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *queryTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	span := trace.SpanFromContext(ctx)
	defer span.End()
	failed(span, d.Err)
}

// failed marks span failed with err, if any, and reports whether it did.
func failed(span trace.Span, err error) bool {
	if err == nil {
		return false
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, "statement failed")
	return true
}

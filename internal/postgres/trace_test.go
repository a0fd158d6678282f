package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/postgres"
)

// TestStatementSpans runs the critical section's statements against the
// stack's Postgres and reads their spans: named by statement, children of
// the caller's span, with the rows each touched and no SQL text.
func TestStatementSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := newStore(t, postgres.WithTracer(tp))
	mustStock(t, s, "sku-traced", 10, 1)

	ctx, parent := tp.Tracer("test").Start(context.Background(), "batch")
	before := len(rec.Ended())
	f := fence("sku-traced", 2)
	if err := reserve(ctx, s, f, 3); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	// An older token claims nothing: a span with no rows, not a failure.
	if _, err := s.Claim(ctx, []inventory.Fence{fence("sku-traced", 1)}, false); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("stale claim = %v, want ErrStaleFence", err)
	}
	parent.End()

	rows := map[string][]int64{}
	for _, sp := range rec.Ended()[before:] {
		if sp.Name() == "batch" {
			continue
		}
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() || sp.SpanKind() != trace.SpanKindClient {
			t.Fatalf("span %q is not a client span under the caller's", sp.Name())
		}
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range sp.Attributes() {
			if strings.Contains(kv.Value.Emit(), "fence_token") {
				t.Fatalf("span %q carries SQL text in %s", sp.Name(), kv.Key)
			}
			a[kv.Key] = kv.Value
		}
		if a["db.system.name"].AsString() != "postgresql" {
			t.Fatalf("span %q: db.system.name %q", sp.Name(), a["db.system.name"].AsString())
		}
		rows[sp.Name()] = append(rows[sp.Name()], a["stockguard.db.rows"].AsInt64())
	}
	t.Logf("spans: %v", rows)
	if got := rows["postgres claim"]; len(got) != 2 || got[0] != 1 || got[1] != 0 {
		t.Fatalf("claim spans' rows = %v, want [1 0] (claimed, then stale)", got)
	}
	if got := rows["postgres write"]; len(got) != 1 || got[0] < 1 {
		t.Fatalf("write spans' rows = %v, want one write that changed rows", got)
	}
}

func TestStatementNames(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT 1":                  "postgres select",
		"  select\n\tsku FROM skus": "postgres select",
		"begin;":                    "postgres begin",
		"VACUUM skus":               "postgres other",
		"":                          "postgres other",
	} {
		if got := postgres.StatementSpanName(sql); got != want {
			t.Errorf("span name of %q = %q, want %q", sql, got, want)
		}
	}
}

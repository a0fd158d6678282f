package pglock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/stack"
)

// TEMPORARY until internal/stack offers NewDatabase.
func testDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := stack.DatabaseURL()
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer c.Close(ctx)
	name := fmt.Sprintf("pglock_%016x", rand.Uint64())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	u, _ := url.Parse(base)
	u.Path = "/" + name
	return u.String()
}

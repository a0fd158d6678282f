// Package migrations embeds the SQL schema so the binary carries it; the
// service applies it at start and `stockguard migrate` on demand.
package migrations

import "embed"

// FS holds the goose migrations, in version order.
//
//go:embed *.sql
var FS embed.FS

package client

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// Metrics returns GET /metrics as served, in the Prometheus text format.
// Scrapers should use Prometheus itself; this is for tests and load tools
// that read a few counters before and after a run. An answer longer than
// the client reads (1 MiB, some 80 times what the service serves) is
// ErrBadAnswer, not a text cut short that would lack the counters read.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var raw []byte
	if _, err := c.do(ctx, call{op: "metrics", method: http.MethodGet, path: "/metrics",
		want: http.StatusOK, out: &raw, raw: true}); err != nil {
		return nil, err
	}
	return raw, nil
}

// GetJSON reads path, escaped and from the API's root (for example
// "/debug/zk-session"), and decodes its 200 answer into v: for the
// operations that have no method of their own, the test-only ones. It
// sends the admin token (WithAdminToken), which /debug/zk-session asks for.
// It is retried as the other reads; an Observer sees its Op as "GET " and
// path.
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("client: GET %q: want a path from the root, such as /healthz", path)
	}
	_, err := c.do(ctx, call{op: "GET " + path, method: http.MethodGet, path: path, header: c.admin(), want: http.StatusOK, out: v})
	return err
}

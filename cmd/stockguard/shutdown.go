package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockguard/stockguard/internal/httpapi"
)

// shutdown drains srv until ctx ends, then closes the connections left.
// Only a failure to close is an error: connections cut at the deadline are
// what the deadline is for, and are logged.
func shutdown(ctx context.Context, srv *http.Server, log *slog.Logger) error {
	err := srv.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	log.Warn("shutdown timeout reached: closing the connections still open")
	return srv.Close()
}

// serveMetrics serves reg's /metrics on a listener of its own at addr, so
// that the API's listener can face clients while the metrics stay on a
// private network. It has the API's limits, and not the API's request
// bound (a scrape must get through an overload) but a bound of its own,
// as /metrics has on the API's listener: httpapi.MetricsInFlight scrapes at
// once, beyond which promhttp answers a plain-text 503.
func serveMetrics(addr string, reg prometheus.Gatherer, l *serverLimits, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen --metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: httpapi.MetricsInFlight}))
	srv := l.server(mux, requestMargin, log)
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return srv, nil
}

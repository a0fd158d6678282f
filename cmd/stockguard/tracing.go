package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/stockguard/stockguard/internal/tracing"
)

// traceFlushTimeout bounds the export of the spans still buffered at exit:
// a collector that is down must not hold the process after its drain.
const traceFlushTimeout = 5 * time.Second

// startTracing builds the tracer provider the OTEL_* variables ask for and
// returns the function that flushes it at exit.
func startTracing(ctx context.Context, getenv func(string) string, log *slog.Logger) (*tracing.Provider, func(), error) {
	p, err := tracing.New(ctx, getenv, readVersion().Version, log)
	if err != nil {
		if errors.Is(err, tracing.ErrConfig) {
			err = fmt.Errorf("%w: %w", errUsage, err)
		}
		return nil, nil, err
	}
	if !p.Enabled() {
		return p, func() {}, nil
	}
	log.Info("tracing on", "endpoint", withoutUserinfo(p.Settings().Endpoint), "service", p.Settings().ServiceName)
	return p, func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushTimeout)
		defer cancel()
		if err := p.Shutdown(fctx); err != nil {
			log.Warn("spans not flushed at exit", "err", err)
		}
	}, nil
}

// withoutUserinfo is endpoint for the log: credentials in its URL
// (user:token@host) stay out of it.
func withoutUserinfo(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.User == nil {
		return endpoint
	}
	u.User = nil
	return u.String()
}

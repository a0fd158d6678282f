// Package tracing builds Stockguard's OpenTelemetry TracerProvider from the
// standard OTEL_* variables and holds the spans the service's packages
// share (the coalesced batch's, see Tracer). Tracing is off by default:
// then nothing is installed anywhere and a request pays nothing for it.
//
// Nothing here is global: the provider is passed down from main to each
// package that makes spans, and the W3C trace context propagator is used
// directly where requests come in.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Provider is the service's tracer provider and the way to flush it.
type Provider struct {
	settings Settings
	sdk      *sdktrace.TracerProvider // nil when tracing is off
}

// New builds the provider the variables read through getenv ask for, with
// service.version set to version. When tracing is off it starts nothing:
// no exporter, no batching goroutine. When on, spans go through a batching
// processor to the OTLP/HTTP exporter; what the variables of ParseEnv do
// not cover (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, the TLS
// files, OTEL_TRACES_SAMPLER, OTEL_BSP_*, OTEL_SPAN_*_LIMIT,
// OTEL_RESOURCE_ATTRIBUTES) the SDK and the exporter read from the process
// environment themselves, as the spec has them. What the SDK can honour only
// in part (an OTEL_RESOURCE_ATTRIBUTES entry without '=') is warned of on
// log, and the rest kept, as the spec has the SDK do.
func New(ctx context.Context, getenv func(string) string, version string, log *slog.Logger) (*Provider, error) {
	s, err := ParseEnv(getenv)
	if err != nil {
		return nil, err
	}
	if !s.Enabled {
		return &Provider{settings: s}, nil
	}
	var opts []otlptracehttp.Option
	if s.Endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(s.Endpoint))
	}
	// The exporter only builds its client here: it dials when it first
	// exports, so a collector that is down delays nothing at start.
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	res, err := newResource(ctx, s.ServiceName, version)
	if errors.Is(err, resource.ErrPartialResource) {
		log.Warn("OTEL_RESOURCE_ATTRIBUTES honoured in part", "err", err)
	} else if err != nil {
		return nil, err
	}
	return &Provider{settings: s, sdk: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}

// newResource describes this process. OTEL_RESOURCE_ATTRIBUTES may add to
// it; the service's name and version are ours to say, after it. An error
// that wraps resource.ErrPartialResource comes with the resource made of
// what could be read.
func newResource(ctx context.Context, name, version string) (*resource.Resource, error) {
	attrs := []resource.Option{resource.WithSchemaURL(semconv.SchemaURL), resource.WithTelemetrySDK(),
		resource.WithFromEnv(), resource.WithAttributes(semconv.ServiceName(name))}
	if version != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(version)))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil {
		return res, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
}

// Settings is what the variables asked for.
func (p *Provider) Settings() Settings { return p.settings }

// Enabled reports whether spans are recorded and exported.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// TracerProvider is the provider to pass to the packages that make spans,
// or nil when tracing is off: each of them then installs nothing (no
// middleware, no pgx tracer, no lock decorator), which is what makes
// tracing free when it is off.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p.sdk == nil {
		return nil
	}
	return p.sdk
}

// Shutdown exports the spans still buffered and stops the exporter; ctx
// bounds how long that may take. It is a no-op when tracing is off.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

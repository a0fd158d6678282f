package main

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/tracing"
	"github.com/stockguard/stockguard/internal/tracing/tracingtest"
)

// TestServeExportsTraces runs serve with an OTLP endpoint and a real lock
// backend: after SIGTERM the collector holds the request's span in the
// client's trace, and the lock and statement spans under the critical
// section, all flushed on the way out.
func TestServeExportsTraces(t *testing.T) {
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	col := tracingtest.NewCollector(t)
	env := append(backendEnv(t), "OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL, "OTEL_SERVICE_NAME=stockguard-e2e")
	in := startInstance(t, env, "--lock=redis")
	if st, _ := call(t, "PUT", in.url+"/v1/skus/traced", `{"available":5}`); st != 200 {
		t.Fatalf("PUT answered %d", st)
	}
	if st, _ := call(t, "POST", in.url+"/v1/orders", `{"lines":[{"sku":"traced","quantity":1}]}`,
		"traceparent", "00-"+traceID+"-b7ad6b7169203331-01"); st != 201 {
		t.Fatalf("POST answered %d", st)
	}
	if err := in.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, in.log())
	}

	var names []string
	var orderTrace string
	for _, s := range col.Spans() {
		names = append(names, s.GetName())
		if s.GetName() == "POST /v1/orders" {
			orderTrace = hex.EncodeToString(s.GetTraceId())
		}
	}
	for _, want := range []string{"PUT /v1/skus/:sku", "POST /v1/orders", "postgres claim", "postgres write", "lock.release"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %q span among those exported: %v", want, names)
		}
	}
	if !slices.Contains(names, "lock.acquire") && !slices.Contains(names, "lock.acquire_batch") {
		t.Errorf("no lock acquisition span among those exported: %v", names)
	}
	if orderTrace != traceID {
		t.Errorf("order span in trace %s, want the traceparent's %s", orderTrace, traceID)
	}
}

// TestBadResourceAttributesWarns: an OTEL_RESOURCE_ATTRIBUTES entry the SDK
// cannot read (no '=') is no reason to stop: serve warns, starts, and its
// spans carry the entries it could read.
func TestBadResourceAttributesWarns(t *testing.T) {
	col := tracingtest.NewCollector(t)
	env := append(backendEnv(t), "OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL,
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment,team=stock")
	in := startInstance(t, env, "--lock=local")
	if st, _ := call(t, "PUT", in.url+"/v1/skus/traced-attrs", `{"available":5}`); st != 200 {
		t.Fatalf("PUT answered %d", st)
	}
	if err := in.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, in.log())
	}
	if !strings.Contains(in.log(), `"level":"WARN","msg":"OTEL_RESOURCE_ATTRIBUTES honoured in part"`) {
		t.Errorf("no warning of the entry dropped:\n%s", in.log())
	}
	var team []string
	reqs, _ := col.Requests()
	for _, req := range reqs {
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "team" {
					team = append(team, kv.GetValue().GetStringValue())
				}
			}
		}
	}
	if len(team) == 0 || team[0] != "stock" {
		t.Errorf("exported resources' team = %v, want stock", team)
	}
}

// TestTracingUsageError: an OTEL_* value this build cannot honour stops
// serve at start with the usage exit status, before it touches any server.
func TestTracingUsageError(t *testing.T) {
	var out, errOut strings.Builder
	getenv := func(k string) string {
		if k == "OTEL_TRACES_EXPORTER" {
			return "zipkin"
		}
		return ""
	}
	err := run(context.Background(), []string{"serve"}, getenv, &out, &errOut)
	if !errors.Is(err, tracing.ErrConfig) || exitCode(err) != 2 {
		t.Fatalf("serve with OTEL_TRACES_EXPORTER=zipkin = %v (exit %d), want a usage error", err, exitCode(err))
	}
}

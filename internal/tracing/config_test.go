package tracing_test

import (
	"errors"
	"testing"

	"github.com/stockguard/stockguard/internal/tracing"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseEnv(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		enabled  bool
		endpoint string
		service  string
	}{
		{name: "off by default", env: nil},
		{name: "otlp exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, enabled: true},
		{name: "general endpoint gets the traces path",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
			enabled: true, endpoint: "http://collector:4318/v1/traces"},
		{name: "traces endpoint is used as given",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/custom"},
			enabled: true, endpoint: "https://b/custom"},
		{name: "none wins over an endpoint",
			env:      map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"},
			endpoint: "http://a:4318/v1/traces"},
		{name: "sdk disabled wins", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "sdk disabled false is not disabled",
			env: map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, enabled: true},
		{name: "service name", env: map[string]string{"OTEL_SERVICE_NAME": "checkout-stock"}, service: "checkout-stock"},
		{name: "http/protobuf accepted",
			env:     map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			enabled: true},
		{name: "the signal's protocol wins over the general one",
			env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			enabled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tracing.ParseEnv(env(tt.env))
			if err != nil {
				t.Fatalf("ParseEnv: %v", err)
			}
			want := tt.service
			if want == "" {
				want = tracing.DefaultServiceName
			}
			if s.Enabled != tt.enabled || s.Endpoint != tt.endpoint || s.ServiceName != want {
				t.Fatalf("ParseEnv = %+v, want enabled %v, endpoint %q, service %q", s, tt.enabled, tt.endpoint, want)
			}
		})
	}
}

func TestParseEnvRefuses(t *testing.T) {
	for name, e := range map[string]map[string]string{
		"unknown exporter":        {"OTEL_TRACES_EXPORTER": "zipkin"},
		"grpc protocol":           {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
		"endpoint without scheme": {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
		"endpoint not a URL":      {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://[::1"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := tracing.ParseEnv(env(e)); !errors.Is(err, tracing.ErrConfig) {
				t.Fatalf("ParseEnv(%v) = %v, want ErrConfig", e, err)
			}
		})
	}
}

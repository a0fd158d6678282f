package tracing

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrConfig marks an OTEL_* variable this build cannot honour; serve
// refuses to start rather than run without the traces it was asked for.
var ErrConfig = errors.New("tracing: bad configuration")

// DefaultServiceName is service.name when OTEL_SERVICE_NAME is empty.
const DefaultServiceName = "stockguard"

// Settings is what the standard OTEL_* variables ask of tracing.
type Settings struct {
	// Enabled is false unless an OTLP exporter is asked for, by
	// OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint; OTEL_SDK_DISABLED=true
	// and OTEL_TRACES_EXPORTER=none win over both.
	Enabled bool
	// ServiceName is OTEL_SERVICE_NAME, default DefaultServiceName.
	ServiceName string
	// Endpoint is the URL spans are posted to: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// as given, else OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended,
	// else empty (the exporter's default, http://localhost:4318/v1/traces).
	Endpoint string
}

// ParseEnv reads the OTEL_* variables through getenv. The spec's default
// exporter is otlp; ours is none, so that a service started without any
// collector neither retries exports nor spends anything per request.
func ParseEnv(getenv func(string) string) (Settings, error) {
	s := Settings{ServiceName: strings.TrimSpace(getenv("OTEL_SERVICE_NAME"))}
	if s.ServiceName == "" {
		s.ServiceName = DefaultServiceName
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return s, nil
	}
	otlp, none, err := exporters(getenv("OTEL_TRACES_EXPORTER"))
	if err != nil {
		return s, err
	}
	if s.Endpoint, err = endpoint(getenv); err != nil {
		return s, err
	}
	if none || !otlp && s.Endpoint == "" {
		return s, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			if p != "http/protobuf" {
				return s, fmt.Errorf("%w: %s=%q: only http/protobuf is built in", ErrConfig, v, p)
			}
			break // the signal's own variable wins over the general one
		}
	}
	s.Enabled = true
	return s, nil
}

// exporters reads OTEL_TRACES_EXPORTER, a comma-separated list.
func exporters(v string) (otlp, none bool, err error) {
	for e := range strings.SplitSeq(v, ",") {
		switch e = strings.TrimSpace(e); e {
		case "":
		case "otlp":
			otlp = true
		case "none":
			none = true
		default:
			return false, false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: only otlp and none are built in", ErrConfig, e)
		}
	}
	return otlp, none, nil
}

// endpoint is the traces URL the variables name, following the spec: the
// signal's own variable is the whole URL, the general one a base URL.
func endpoint(getenv func(string) string) (string, error) {
	name, u := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	if u == "" {
		name, u = "OTEL_EXPORTER_OTLP_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
		if u == "" {
			return "", nil
		}
		u = strings.TrimSuffix(u, "/") + "/v1/traces"
	}
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return "", fmt.Errorf("%w: %s=%q: want an http:// or https:// URL", ErrConfig, name, u)
	}
	return u, nil
}

package metrics

import "github.com/prometheus/client_golang/prometheus"

// BuildInfo is what stockguard_build_info says about a running instance.
type BuildInfo struct {
	Version  string
	Backend  string
	Fencing  bool
	Coalesce bool
}

// RegisterBuildInfo registers stockguard_build_info, a gauge that is 1 and
// carries the instance's version and settings as labels, so a dashboard can
// group or join by them (for example, show which backend a replica runs).
func RegisterBuildInfo(reg prometheus.Registerer, b BuildInfo) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stockguard_build_info",
		Help: "Always 1; labels say the instance's version, lock backend, and whether fencing and coalescing are on.",
		ConstLabels: prometheus.Labels{"version": b.Version, "backend": b.Backend,
			"fencing": onOff(b.Fencing), "coalesce": onOff(b.Coalesce)},
	})
	g.Set(1)
	reg.MustRegister(g)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

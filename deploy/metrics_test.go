package deploy

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
	"github.com/stockguard/stockguard/internal/metrics"
)

// fakePool stands for the store's *sql.DB: only the names matter here.
type fakePool struct{}

func (fakePool) Stats() sql.DBStats { return sql.DBStats{MaxOpenConnections: 16} }

// registered gathers a registry built as `stockguard serve` builds its own
// and returns every series name it exposes, histogram and summary series
// included.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, "redlock")
	metrics.RegisterBuildInfo(reg, metrics.BuildInfo{Version: "test", Backend: "redlock", Fencing: true, Coalesce: true})
	metrics.RegisterPool(reg, fakePool{})
	metrics.NewLockProbe(reg, "redlock", func(context.Context) error { return nil }, time.Second)
	lm, err := lockmetrics.New(reg, "redlock")
	if err != nil {
		t.Fatal(err)
	}
	// Series of vectors appear once they have a child: touch the ones the
	// service creates on its first request.
	m.HTTP("GET", "/healthz", 200, time.Millisecond)
	m.Batch(1)
	lm.Acquired(time.Millisecond)
	lm.Failed(lockmetrics.ReasonNotAcquired)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		switch mf.GetType().String() {
		case "HISTOGRAM":
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case "SUMMARY":
			names[n+"_sum"], names[n+"_count"] = true, true
		}
	}
	return names
}

// ruleFile is the shape of deploy/prometheus/rules.yml.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record      string            `json:"record,omitempty"`
			Alert       string            `json:"alert,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	raw, err := os.ReadFile("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(raw, &rf); err != nil {
		t.Fatalf("rules.yml: %v", err)
	}
	return rf
}

// selectors parses expr and returns the metric names it selects.
func selectors(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse as PromQL: %v", where, expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	if len(names) == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
	return names
}

// checkNames fails for a name that is neither registered nor recorded.
func checkNames(t *testing.T, where string, names []string, known map[string]bool) {
	t.Helper()
	for _, n := range names {
		if !known[n] {
			t.Errorf("%s uses %q, which the service does not register and no rule records", where, n)
		}
	}
}

func TestRulesUseRegisteredMetrics(t *testing.T) {
	known := registered(t)
	rf := loadRules(t)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	alerts := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			where := "rules.yml " + r.Record + r.Alert
			checkNames(t, where, selectors(t, where, r.Expr), known)
			if r.Alert != "" {
				alerts++
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
					t.Errorf("%s: an alert needs a severity label and a summary", where)
				}
			}
		}
	}
	if alerts < 6 {
		t.Errorf("rules.yml has %d alerts, want the six of the runbook", alerts)
	}
}

// dashboard is the part of the Grafana JSON the test reads.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func TestDashboardQueries(t *testing.T) {
	known := registered(t)
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	raw, err := os.ReadFile("grafana/stockguard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("stockguard.json: %v", err)
	}
	// Grafana replaces its variables before Prometheus sees the query.
	vars := strings.NewReplacer("$job", ".*", "$__rate_interval", "5m", "$__interval", "1m")
	queries := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			where := "dashboard panel " + p.Title
			checkNames(t, where, selectors(t, where, vars.Replace(tg.Expr)), known)
		}
	}
	if queries == 0 {
		t.Fatal("the dashboard has no queries")
	}
}

package deploy

import (
	"context"
	"database/sql"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
	"github.com/stockguard/stockguard/internal/metrics"
)

// fakePool stands for the store's *sql.DB: only the names matter here.
type fakePool struct{}

func (fakePool) Stats() sql.DBStats { return sql.DBStats{MaxOpenConnections: 16} }

// freshRegistry is a registry built as `stockguard serve` builds its own,
// with the redlock backend's collectors, on which nothing has happened yet.
func freshRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics.New(reg, "redlock")
	metrics.RegisterBuildInfo(reg, metrics.BuildInfo{Version: "test", Backend: "redlock", Fencing: true, Coalesce: true})
	metrics.RegisterPool(reg, fakePool{})
	metrics.NewLockProbe(reg, "redlock", func(context.Context) error { return nil }, time.Second)
	if _, err := lockmetrics.New(reg, "redlock"); err != nil {
		t.Fatal(err)
	}
	return reg
}

// exposed is every series a fresh registry exposes, as Prometheus stores a
// scrape of it: a histogram as its _bucket (one per le), _sum and _count
// series, a summary as its quantiles, _sum and _count.
func exposed(t *testing.T) []labels.Labels {
	t.Helper()
	mfs, err := freshRegistry(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []labels.Labels
	for _, mf := range mfs {
		name := mf.GetName()
		for _, m := range mf.GetMetric() {
			b := labels.NewScratchBuilder(len(m.GetLabel()) + 2)
			add := func(name string, extra ...string) {
				b.Reset()
				b.Add(labels.MetricName, name)
				for _, l := range m.GetLabel() {
					b.Add(l.GetName(), l.GetValue())
				}
				for i := 0; i+1 < len(extra); i += 2 {
					b.Add(extra[i], extra[i+1])
				}
				b.Sort()
				series = append(series, b.Labels())
			}
			switch mf.GetType().String() {
			case "HISTOGRAM":
				for _, bk := range m.GetHistogram().GetBucket() {
					add(name+"_bucket", "le", strconv.FormatFloat(bk.GetUpperBound(), 'g', -1, 64))
				}
				add(name+"_bucket", "le", "+Inf")
				add(name + "_sum")
				add(name + "_count")
			case "SUMMARY":
				for _, q := range m.GetSummary().GetQuantile() {
					add(name, "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))
				}
				add(name + "_sum")
				add(name + "_count")
			default:
				add(name)
			}
		}
	}
	return series
}

// registered returns every series name a fresh registry exposes.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, s := range exposed(t) {
		names[s.Get(labels.MetricName)] = true
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

// vectorSelectors parses expr and returns the series selectors in it.
func vectorSelectors(t *testing.T, where, expr string) []*parser.VectorSelector {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse as PromQL: %v", where, expr, err)
		return nil
	}
	var vss []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			vss = append(vss, vs)
		}
		return nil
	})
	if len(vss) == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
	return vss
}

// selectors parses expr and returns the metric names it selects.
func selectors(t *testing.T, where, expr string) []string {
	t.Helper()
	var names []string
	for _, vs := range vectorSelectors(t, where, expr) {
		names = append(names, vs.Name)
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

// panelQueries is every query of the dashboard, keyed by where it is, as
// Prometheus receives it: Grafana replaces its variables first.
func panelQueries(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("grafana/stockguard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("stockguard.json: %v", err)
	}
	vars := strings.NewReplacer("$job", ".*", "$__rate_interval", "5m", "$__interval", "1m")
	queries := map[string][]string{}
	for _, p := range d.Panels {
		where := "dashboard panel " + p.Title
		if len(p.Targets) == 0 {
			t.Errorf("%s has no query", where)
		}
		for _, tg := range p.Targets {
			queries[where] = append(queries[where], vars.Replace(tg.Expr))
		}
	}
	return queries
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
	queries := 0
	for where, exprs := range panelQueries(t) {
		for _, expr := range exprs {
			queries++
			checkNames(t, where, selectors(t, where, expr), known)
		}
	}
	if queries == 0 {
		t.Fatal("the dashboard has no queries")
	}
}

// TestQueriedSeriesExistAtStart: every series a rule or a dashboard panel
// selects is there on a fresh instance, before any event (README: "every
// labelled series exists from the start at 0"). rate() and increase()
// count an event only from a sample taken before it: a series born with
// its first event loses that event (the first lock failure of a reason,
// the first unready /readyz), and a panel over it reads No data on a
// healthy instance.
func TestQueriedSeriesExistAtStart(t *testing.T) {
	series := exposed(t)
	queries := map[string][]string{}
	recorded := map[string]bool{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			where := "rules.yml " + r.Record + r.Alert
			queries[where] = append(queries[where], r.Expr)
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	maps.Copy(queries, panelQueries(t))
	for where, exprs := range queries {
		for _, expr := range exprs {
			for _, vs := range vectorSelectors(t, where, expr) {
				if recorded[vs.Name] {
					continue // there when the series it is recorded from are
				}
				if !slices.ContainsFunc(series, func(s labels.Labels) bool { return selects(vs, s) }) {
					t.Errorf("%s selects %s, which a fresh instance does not expose before its first event", where, vs)
				}
			}
		}
	}
}

// selects reports whether vs selects s as scraped. job and instance are
// the scrape's own labels, which a registry does not have.
func selects(vs *parser.VectorSelector, s labels.Labels) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name != "job" && m.Name != "instance" && !m.Matches(s.Get(m.Name)) {
			return false
		}
	}
	return true
}

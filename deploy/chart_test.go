package deploy

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chart = "helm/stockguard"
	// redlockAddrs are five masters, as README's install example names them
	// (commas escaped for --set).
	redlockAddrs = "lock.redisAddrs=r1:6379\\,r2:6379\\,r3:6379\\,r4:6379\\,r5:6379"
	// kubeVersion is the cluster version rendered for: a helm built with go
	// install assumes v1.20, older than the chart's kubeVersion.
	kubeVersion = "--kube-version=1.31.0"
)

// helmBinary is the helm that deploy/tools.sh built; make test passes it
// as STOCKGUARD_HELM.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STOCKGUARD_HELM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	t.Fatal("no helm: run `make test`, or build it with `bash deploy/tools.sh helm` and set STOCKGUARD_HELM to the path it prints")
	return ""
}

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.Bytes()
}

// rendered is every object of one `helm template`, strict-decoded.
type rendered struct {
	deployments    []appsv1.Deployment
	jobs           []batchv1.Job
	services       []corev1.Service
	secrets        []corev1.Secret
	pdbs           []policyv1.PodDisruptionBudget
	serviceMonitor []monitoringv1.ServiceMonitor
}

// decode strict-decodes each document into its Kubernetes type: a field the
// API does not know, or a value of the wrong type, fails.
func decode(t *testing.T, manifest []byte) rendered {
	t.Helper()
	var r rendered
	for i, doc := range bytes.Split(manifest, []byte("\n---")) {
		if len(bytes.TrimSpace(bytes.TrimPrefix(doc, []byte("---")))) == 0 {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		var err error
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			r.deployments, err = strictAppend(doc, r.deployments)
		case "batch/v1 Job":
			r.jobs, err = strictAppend(doc, r.jobs)
		case "v1 Service":
			r.services, err = strictAppend(doc, r.services)
		case "v1 Secret":
			r.secrets, err = strictAppend(doc, r.secrets)
		case "policy/v1 PodDisruptionBudget":
			r.pdbs, err = strictAppend(doc, r.pdbs)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			r.serviceMonitor, err = strictAppend(doc, r.serviceMonitor)
		default:
			err = errors.New("a kind this test does not know: add it")
		}
		if err != nil {
			t.Fatalf("document %d (%s %s): %v\n%s", i, head.APIVersion, head.Kind, err, doc)
		}
	}
	return r
}

func strictAppend[T any](doc []byte, list []T) ([]T, error) {
	var v T
	if err := yaml.UnmarshalStrict(doc, &v); err != nil {
		return list, err
	}
	return append(list, v), nil
}

func TestChartLint(t *testing.T) {
	helm(t, "lint", "--strict", kubeVersion, chart, "--set", "database.url=postgres://u:p@db:5432/stockguard,"+redlockAddrs)
	helm(t, "lint", "--strict", kubeVersion, chart, "--set",
		"database.existingSecret=db,adminToken.existingSecret=admin,serviceMonitor.enabled=true,metrics.port=9090,"+redlockAddrs)
}

func TestChartDefaults(t *testing.T) {
	r := decode(t, helm(t, "template", "sg", chart, kubeVersion,
		"--set", "database.url=postgres://u:p@db:5432/stockguard,adminToken.value=s3cret,"+redlockAddrs))
	if len(r.deployments) != 1 || len(r.jobs) != 1 || len(r.services) != 1 || len(r.secrets) != 1 || len(r.pdbs) != 1 {
		t.Fatalf("rendered %d deployments, %d jobs, %d services, %d secrets, %d PDBs; want one each",
			len(r.deployments), len(r.jobs), len(r.services), len(r.secrets), len(r.pdbs))
	}
	if len(r.serviceMonitor) != 0 {
		t.Fatal("a ServiceMonitor by default: it needs the operator's CRDs")
	}
	d := r.deployments[0]
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if !slices.Contains(c.Args, "--migrate=false") {
		t.Errorf("the service's args %q: instances must not own the schema", c.Args)
	}
	noJob := decode(t, helm(t, "template", "sg", chart, kubeVersion,
		"--set", "database.url=postgres://u:p@db:5432/stockguard,adminToken.value=s3cret,migration.enabled=false,"+redlockAddrs))
	if a := noJob.deployments[0].Spec.Template.Spec.Containers[0].Args; len(noJob.jobs) != 0 || !slices.Contains(a, "--migrate=true") {
		t.Errorf("migration.enabled=false: %d jobs, the service's args %q; want no job and the replicas migrating on start", len(noJob.jobs), a)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want GET /readyz", p)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	// serve drains for up to 20 s (its --shutdown-timeout) after SIGTERM,
	// which comes after preStop; the drain outlasts the lock wait.
	const drain = 20 * time.Second
	if v := env["STOCKGUARD_SHUTDOWN_TIMEOUT"].Value; v != "20s" {
		t.Errorf("STOCKGUARD_SHUTDOWN_TIMEOUT = %q, want the 20 s drain", v)
	}
	if w, err := time.ParseDuration(env["STOCKGUARD_LOCK_WAIT"].Value); err != nil || w >= drain {
		t.Errorf("STOCKGUARD_LOCK_WAIT = %q (%v), want a duration below the drain", env["STOCKGUARD_LOCK_WAIT"].Value, err)
	}
	preStop := int64(0)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= time.Duration(preStop)*time.Second+drain {
		t.Errorf("termination grace %v s is not longer than preStop %d s + drain %v", g, preStop, drain)
	}
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || csc == nil || !isTrue(psc.RunAsNonRoot) || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		!isTrue(csc.ReadOnlyRootFilesystem) || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("security contexts: pod %+v, container %+v; want non-root, no escalation, read-only root", psc, csc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v", c.Resources.Requests)
	}
	secret := r.secrets[0].Name
	for _, name := range []string{"STOCKGUARD_ADMIN_TOKEN", "STOCKGUARD_DATABASE_URL"} {
		e := env[name]
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != secret {
			t.Errorf("%s = %+v, want it from Secret %s", name, e, secret)
		}
	}
	if env["STOCKGUARD_REDIS_ADDRS"].Value != "r1:6379,r2:6379,r3:6379,r4:6379,r5:6379" {
		t.Errorf("STOCKGUARD_REDIS_ADDRS = %+v", env["STOCKGUARD_REDIS_ADDRS"])
	}
	if r.secrets[0].StringData["admin-token"] != "s3cret" {
		t.Errorf("secret data %v", r.secrets[0].StringData)
	}

	job := r.jobs[0].Spec.Template.Spec
	if a := job.Containers[0].Args; !slices.Equal(a, []string{"migrate"}) || job.SecurityContext == nil || !isTrue(job.SecurityContext.RunAsNonRoot) {
		t.Errorf("migration job runs %q, security context %+v", a, job.SecurityContext)
	}
	// The PDB and the Service select the service's pods, not the job's.
	for what, sel := range map[string]map[string]string{"pdb": r.pdbs[0].Spec.Selector.MatchLabels, "service": r.services[0].Spec.Selector} {
		jobSelected := true
		for k, v := range sel {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("%s selects %s=%s, which the pods lack", what, k, v)
			}
			jobSelected = jobSelected && r.jobs[0].Spec.Template.Labels[k] == v
		}
		if jobSelected {
			t.Errorf("%s also selects the migration job's pods", what)
		}
	}
}

func TestChartExistingSecretsAndServiceMonitor(t *testing.T) {
	r := decode(t, helm(t, "template", "sg", chart, kubeVersion, "--set",
		"database.existingSecret=db,adminToken.existingSecret=admin,serviceMonitor.enabled=true,migration.enabled=false,"+redlockAddrs))
	if len(r.secrets) != 0 || len(r.jobs) != 0 || len(r.serviceMonitor) != 1 {
		t.Fatalf("rendered %d secrets, %d jobs, %d service monitors; want 0, 0, 1", len(r.secrets), len(r.jobs), len(r.serviceMonitor))
	}
	refs := map[string]string{}
	for _, e := range r.deployments[0].Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name
		}
	}
	if refs["STOCKGUARD_DATABASE_URL"] != "db" || refs["STOCKGUARD_ADMIN_TOKEN"] != "admin" {
		t.Fatalf("secret references %v", refs)
	}
	if ep := r.serviceMonitor[0].Spec.Endpoints; len(ep) != 1 || ep[0].Path != "/metrics" || ep[0].Port != "http" {
		t.Fatalf("service monitor endpoints %+v", ep)
	}
}

func TestChartRefusesNoDatabase(t *testing.T) {
	cmd := exec.Command(helmBinary(t), "template", "sg", chart, kubeVersion, "--set", redlockAddrs)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "database.url") {
		t.Fatalf("helm template without a database = %v\n%s", err, out)
	}
}

// TestChartLockSettings: the chart refuses to render a Deployment that
// could not take a lock (no servers for its backend, too few Redlock
// masters, a lock TTL serve refuses), whose replicas would oversell (none
// or local on several, unless acknowledged) or whose drain would cut off
// requests still waiting for their locks; what serve accepts renders.
func TestChartLockSettings(t *testing.T) {
	for _, c := range []struct {
		name, set, want string // want "": renders
	}{
		{"redlock by default, no servers", "", "lock.redisAddrs"},
		{"redlock on two masters", "lock.redisAddrs=r1:6379\\,r2:6379", "at least 3"},
		{"redlock on three masters", "lock.redisAddrs=r1:6379\\, r2:6379\\,r3:6379", ""},
		{"redis, no server", "lock.backend=redis", "lock.redisAddrs"},
		{"zookeeper, no servers", "lock.backend=zookeeper," + redlockAddrs, "lock.zkServers"},
		{"etcd, no endpoints", "lock.backend=etcd", "lock.etcdEndpoints"},
		{"etcd", "lock.backend=etcd,lock.etcdEndpoints=http://etcd-0.etcd:2379", ""},
		{"postgres needs only the database", "lock.backend=postgres", ""},
		{"lock wait as long as the drain", redlockAddrs + ",lock.wait=20s", "shutdown.drainSeconds"},
		{"lock wait of a minute", redlockAddrs + ",lock.wait=1m", "shutdown.drainSeconds"},
		{"lock wait just under the drain", redlockAddrs + ",lock.wait=19s900ms", ""},
		{"a longer drain for a longer wait", redlockAddrs + ",lock.wait=1m30s,shutdown.drainSeconds=100", ""},
		{"lock wait not a duration", redlockAddrs + ",lock.wait=soon", "lock.wait"},
		// serve would exit 2 on each of these, and every replica crash-loop.
		{"lock TTL a bare number", redlockAddrs + ",lock.ttl=10", "lock.ttl"},
		{"lock TTL under 100ms", redlockAddrs + ",lock.ttl=50ms", "want 100ms to 24h"},
		{"lock TTL of 1500ms", redlockAddrs + ",lock.ttl=1500ms", ""},
		// none and local lock nothing across replicas.
		{"local on three replicas", "lock.backend=local", "lock.acknowledgeOversell"},
		{"none on two replicas", "lock.backend=none,replicaCount=2", "oversells"},
		{"local on one replica", "lock.backend=local,replicaCount=1", ""},
		{"local on three replicas, acknowledged", "lock.backend=local,lock.acknowledgeOversell=true", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			set := "database.url=postgres://u:p@db:5432/stockguard"
			if c.set != "" {
				set += "," + c.set
			}
			cmd := exec.Command(helmBinary(t), "template", "sg", chart, kubeVersion, "--set", set)
			out, err := cmd.CombinedOutput()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("helm template --set %s: %v\n%s", set, err, out)
			case c.want == "":
				env := map[string]string{}
				for _, e := range decode(t, out).deployments[0].Spec.Template.Spec.Containers[0].Env {
					env[e.Name] = e.Value
				}
				w, _ := time.ParseDuration(env["STOCKGUARD_LOCK_WAIT"])
				d, _ := time.ParseDuration(env["STOCKGUARD_SHUTDOWN_TIMEOUT"])
				if w <= 0 || d <= w {
					t.Errorf("rendered lock wait %q and shutdown timeout %q: want 0 < wait < drain",
						env["STOCKGUARD_LOCK_WAIT"], env["STOCKGUARD_SHUTDOWN_TIMEOUT"])
				}
			case err == nil || !strings.Contains(string(out), c.want):
				t.Fatalf("helm template --set %s = %v, want a failure naming %q\n%s", set, err, c.want, out)
			}
		})
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// TestChartMetricsPort: the ServiceMonitor scrapes the listener serve
// serves /metrics on. By default that is the API's; with metrics.port it
// is serve's --metrics-addr alone (README, "Operating it": /metrics on
// --addr is then 404), reached through a ClusterIP Service even when the
// API's Service is a LoadBalancer, which would publish it.
func TestChartMetricsPort(t *testing.T) {
	for _, c := range []struct {
		name, set string
		listener  string // the variable serve reads the /metrics listener from
		want      int32
	}{
		{"on the API's port", "service.port=8081", "STOCKGUARD_ADDR", 8081},
		{"on a port of its own", "metrics.port=9090,service.type=LoadBalancer", "STOCKGUARD_METRICS_ADDR", 9090},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := decode(t, helm(t, "template", "sg", chart, kubeVersion, "--set",
				"database.url=postgres://u:p@db:5432/stockguard,serviceMonitor.enabled=true,"+c.set+","+redlockAddrs))
			if len(r.deployments) != 1 || len(r.serviceMonitor) != 1 {
				t.Fatalf("rendered %d deployments, %d service monitors", len(r.deployments), len(r.serviceMonitor))
			}
			env := map[string]string{}
			for _, e := range r.deployments[0].Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			if _, set := env["STOCKGUARD_METRICS_ADDR"]; set != (c.listener == "STOCKGUARD_METRICS_ADDR") {
				t.Errorf("STOCKGUARD_METRICS_ADDR = %q", env["STOCKGUARD_METRICS_ADDR"])
			}
			_, port, err := net.SplitHostPort(env[c.listener])
			if err != nil || port != strconv.Itoa(int(c.want)) {
				t.Fatalf("%s = %q, want port %d", c.listener, env[c.listener], c.want)
			}
			if ep := r.serviceMonitor[0].Spec.Endpoints; len(ep) != 1 || ep[0].Path != "/metrics" {
				t.Fatalf("service monitor endpoints %+v", ep)
			}
			svc, got := scrapeTarget(t, r)
			if got != c.want {
				t.Errorf("the ServiceMonitor scrapes container port %d, serve listens for /metrics on %s (%s)", got, env[c.listener], c.listener)
			}
			if svc.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("the metrics are scraped through Service %s of type %s, want ClusterIP", svc.Name, svc.Spec.Type)
			}
		})
	}
}

// scrapeTarget follows the ServiceMonitor's endpoint as the Prometheus
// Operator does: to the Service port of that name on a Service it selects,
// then to the pod's container port which that Service port targets. It
// returns that Service and container port, and fails unless there is
// exactly one.
func scrapeTarget(t *testing.T, r rendered) (corev1.Service, int32) {
	t.Helper()
	sm := r.serviceMonitor[0]
	pod := r.deployments[0].Spec.Template
	var svcs []corev1.Service
	var ports []int32
	for _, svc := range r.services {
		if !matchLabels(sm.Spec.Selector.MatchLabels, svc.Labels) || !matchLabels(svc.Spec.Selector, pod.Labels) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if sp.Name != sm.Spec.Endpoints[0].Port {
				continue
			}
			for _, cp := range pod.Spec.Containers[0].Ports {
				if target := sp.TargetPort.String(); target == cp.Name || target == strconv.Itoa(int(cp.ContainerPort)) {
					svcs, ports = append(svcs, svc), append(ports, cp.ContainerPort)
				}
			}
		}
	}
	if len(ports) != 1 {
		t.Fatalf("the ServiceMonitor's endpoint port %q (selector %v) reaches container ports %v, want one",
			sm.Spec.Endpoints[0].Port, sm.Spec.Selector.MatchLabels, ports)
	}
	return svcs[0], ports[0]
}

// matchLabels reports whether a selector's match labels select labels.
func matchLabels(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestChartJobPlacedAsTheReplicas: the migration Job's pod gets the
// replicas' node selector, tolerations, pod labels and annotations: on a
// cluster that needs them it could not run otherwise, and every replica
// would wait unready for its migrations.
func TestChartJobPlacedAsTheReplicas(t *testing.T) {
	r := decode(t, helm(t, "template", "sg", chart, kubeVersion, "--set",
		"database.url=postgres://u:p@db:5432/stockguard,nodeSelector.pool=db-egress,tolerations[0].key=dedicated,"+
			"tolerations[0].operator=Exists,podLabels.egress=postgres,podAnnotations.team=shop,"+redlockAddrs))
	if len(r.jobs) != 1 {
		t.Fatalf("rendered %d jobs", len(r.jobs))
	}
	pod := r.jobs[0].Spec.Template
	if pod.Spec.NodeSelector["pool"] != "db-egress" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "dedicated" ||
		pod.Labels["egress"] != "postgres" || pod.Annotations["team"] != "shop" {
		t.Fatalf("migration pod: node selector %v, tolerations %v, labels %v, annotations %v",
			pod.Spec.NodeSelector, pod.Spec.Tolerations, pod.Labels, pod.Annotations)
	}
}

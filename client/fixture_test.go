package client_test

// The one place that builds the service under test: the real handler
// (internal/httpapi) over the real service, the local lock and a fresh
// database of the running stack, as internal/httpapi's own tests do. Every
// exchange goes through a transport that checks the request and the answer
// against api/openapi.yaml.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/lock/memlock"
	"github.com/stockguard/stockguard/internal/metrics"
	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/reservation"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

const (
	specPath   = "../api/openapi.yaml"
	adminToken = "s3cret"
	// lockWait is the service's lock wait: short, so a held lock answers
	// 503 quickly.
	lockWait = 300 * time.Millisecond
	// zkSessionID is the session GET /debug/zk-session answers: the
	// fixture's lock has none, so the test stands in for ZooKeeper's, with
	// an id past 2^53 as real ones are.
	zkSessionID = 0x1000a2b3c4d5e6f
)

// fixture is one service under test.
type fixture struct {
	t   *testing.T
	url string
	// locker is the service's lock: a test holds a SKU's key to make the
	// service answer 503 lock_unavailable.
	locker *memlock.Locker
	// http validates every exchange against the spec and records it.
	http *http.Client
	tr   *validatingTransport
}

// fixtureOption changes the service's configuration from the fixture's.
type fixtureOption func(*reservation.Config, *httpapi.Config)

func newFixture(t *testing.T, opts ...fixtureOption) *fixture {
	t.Helper()
	ctx := context.Background()
	// The local lock issues no tokens: the store runs unfenced, as serve
	// runs it for this backend.
	lk := memlock.New()
	store, err := postgres.Open(ctx, stacktest.NewDatabase(t, ctx), postgres.WithFencing(lk.Fenced()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if _, err := postgres.Migrate(ctx, store.DB()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, lk.Name())
	rc := reservation.Config{Store: store, Locker: lk, Observer: m, LockWait: lockWait}
	hc := httpapi.Config{Metrics: m, Gatherer: reg, AdminToken: adminToken, Chaos: true,
		ZKSession: func() (int64, []byte, bool) { return zkSessionID, []byte("0123456789abcdef"), true }}
	for _, o := range opts {
		o(&rc, &hc)
	}
	hc.Service = reservation.New(rc)
	srv := httptest.NewServer(httpapi.New(hc))
	t.Cleanup(srv.Close)
	tr := &validatingTransport{t: t, v: specValidator(t), next: srv.Client().Transport}
	return &fixture{t: t, url: srv.URL, locker: lk, http: &http.Client{Transport: tr}, tr: tr}
}

// specValidator parses api/openapi.yaml; every test builds its own, as
// nothing here is shared between tests.
func specValidator(t testing.TB) validator.Validator {
	t.Helper()
	raw, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		t.Fatalf("%s: %v", specPath, err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", specPath, errs)
	}
	return v
}

// exchange is one request and its answer as the transport saw them.
type exchange struct {
	method, path, idempotencyKey string
	status                       int
}

// validatingTransport checks each request and answer against the spec; a
// mismatch fails the test.
type validatingTransport struct {
	t    *testing.T
	v    validator.Validator
	next http.RoundTripper

	mu   sync.Mutex
	seen []exchange
}

func (vt *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	check := req.Clone(req.Context())
	check.Body = io.NopCloser(bytes.NewReader(body))
	vt.mu.Lock()
	_, reqErrs := vt.v.ValidateHttpRequest(check)
	vt.mu.Unlock()

	res, err := vt.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	// A request the spec refuses must be one the service refuses too: a
	// test sends some on purpose, and the service must answer them 400.
	if res.StatusCode != http.StatusBadRequest {
		for _, e := range reqErrs {
			vt.t.Errorf("request %s %s does not match the spec, yet the service answered %d: %s: %s",
				req.Method, req.URL.Path, res.StatusCode, e.Message, e.Reason)
		}
	}
	raw, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, err
	}
	answer := *res
	answer.Body = io.NopCloser(bytes.NewReader(raw))
	check.Body = io.NopCloser(bytes.NewReader(body))
	vt.mu.Lock()
	if ok, errs := vt.v.ValidateHttpResponse(check, &answer); !ok {
		for _, e := range errs {
			vt.t.Errorf("answer %d to %s %s does not match the spec: %s: %s\n%s",
				res.StatusCode, req.Method, req.URL.Path, e.Message, e.Reason, raw)
		}
	}
	vt.seen = append(vt.seen, exchange{method: req.Method, path: req.URL.Path,
		idempotencyKey: req.Header.Get("Idempotency-Key"), status: res.StatusCode})
	vt.mu.Unlock()
	res.Body = io.NopCloser(bytes.NewReader(raw))
	return res, nil
}

// exchanges returns what the transport has seen so far.
func (vt *validatingTransport) exchanges() []exchange {
	vt.mu.Lock()
	defer vt.mu.Unlock()
	return append([]exchange(nil), vt.seen...)
}

// hold takes sku's lock as another holder would, until release is called.
func (f *fixture) hold(sku string) (release func()) {
	f.t.Helper()
	l, err := f.locker.Acquire(context.Background(), sku)
	if err != nil {
		f.t.Fatalf("hold %s: %v", sku, err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = l.Release(context.Background()) }) }
	f.t.Cleanup(release)
	return release
}

// raw sends one request through the validating transport, bypassing the
// client, for what the client never sends (the chaos pause header).
func (f *fixture) raw(method, path, body string, headers ...string) (*http.Response, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.url+path, bytes.NewBufferString(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := f.http.Do(req)
	if err != nil {
		f.t.Error(fmt.Errorf("%s %s: %w", method, path, err))
		return nil, nil
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res, raw
}

// TestSpecCatchesDrift shows the transport's check has teeth: an answer
// that breaks the spec is reported.
func TestSpecCatchesDrift(t *testing.T) {
	v := specValidator(t)
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:8080/v1/skus/a", nil)
	res := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewBufferString(`{"sku":"a","available":"many"}`)), Request: req}
	if ok, errs := v.ValidateHttpResponse(req, res); ok || len(errs) == 0 {
		t.Fatal("a SKU answer with a string count and missing counters passed the spec check")
	}
}

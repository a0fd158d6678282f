package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/inventory"
)

// The checks below keep api/openapi.yaml and the code from drifting apart:
// routes, error codes and the statuses they come with, the headers the
// handlers read and write, and the request limits. They read files and
// build the gin engine's route table; no server is started.

const specPath = "../../api/openapi.yaml"

// spec is the parsed document; goccy/go-yaml is already required by gin.
type spec map[string]any

func loadSpec(t *testing.T) spec {
	t.Helper()
	raw, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil { // also refuses duplicate keys
		t.Fatalf("%s: %v", specPath, err)
	}
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("%s: openapi = %q, want 3.1.x", specPath, v)
	}
	return spec(doc)
}

// get walks a path of map keys; nil when any step is missing.
func get(n any, keys ...string) any {
	for _, k := range keys {
		m, ok := n.(map[string]any)
		if !ok {
			return nil
		}
		n = m[k]
	}
	return n
}

func asMap(n any) map[string]any { m, _ := n.(map[string]any); return m }

func asList(n any) []any { l, _ := n.([]any); return l }

func stringList(n any) []string {
	var out []string
	for _, v := range asList(n) {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

func asInt(t *testing.T, n any, where string) int64 {
	t.Helper()
	switch v := n.(type) {
	case int:
		return int64(v)
	case int64:
		return v
	case uint64:
		return int64(v)
	case float64:
		return int64(v)
	}
	t.Fatalf("%s: %v (%T) is not a number", where, n, n)
	return 0
}

// resolve follows a local $ref (#/components/...) once or more.
func (s spec) resolve(n any) any {
	for range 10 {
		ref, ok := get(n, "$ref").(string)
		if !ok {
			return n
		}
		n = get(map[string]any(s), strings.Split(strings.TrimPrefix(ref, "#/"), "/")...)
	}
	return n
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// operations lists "METHOD /path" for every operation in the spec.
func (s spec) operations() map[string]map[string]any {
	ops := map[string]map[string]any{}
	for path, item := range asMap(s["paths"]) {
		for _, m := range httpMethods {
			if op := asMap(get(item, m)); op != nil {
				ops[strings.ToUpper(m)+" "+path] = op
			}
		}
	}
	return ops
}

// ginRoutes lists "METHOD /path" for every route routes.go registers, with
// gin's :param written as OpenAPI's {param}.
func ginRoutes(t *testing.T) []string {
	t.Helper()
	// Every optional route on: the chaos-only ones are documented too.
	noSession := func() (int64, []byte, bool) { return 0, nil, false }
	engine, ok := New(Config{Gatherer: prometheus.NewRegistry(), Chaos: true, ZKSession: noSession}).(*gin.Engine)
	if !ok {
		t.Fatal("New no longer returns a *gin.Engine")
	}
	param := regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)
	var out []string
	for _, r := range engine.Routes() {
		out = append(out, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	slices.Sort(out)
	if len(out) == 0 {
		t.Fatal("no routes registered")
	}
	return out
}

func TestOpenAPIRoutes(t *testing.T) {
	s := loadSpec(t)
	ops := s.operations()
	routes := ginRoutes(t)
	for _, r := range routes {
		if ops[r] == nil {
			t.Errorf("route %s is registered in routes.go but not documented in %s", r, specPath)
		}
	}
	for op := range ops {
		if !slices.Contains(routes, op) {
			t.Errorf("%s documents %s, which routes.go does not register", specPath, op)
		}
	}
	for name, op := range ops {
		if id, _ := op["operationId"].(string); id == "" {
			t.Errorf("%s: no operationId", name)
		}
		// Every operation documents what a wrong method on its path gets.
		if get(op, "responses", "405") == nil {
			t.Errorf("%s: no 405 response", name)
		}
	}
}

// codeStatus maps each code the API can answer with to its HTTP status.
func codeStatus() map[string]int {
	m := map[string]int{}
	for _, e := range errorTable {
		m[e.code] = e.status
	}
	status, body := classify(errors.New("something unforeseen"))
	m[body.Code] = status
	return m
}

func TestOpenAPIErrorCodes(t *testing.T) {
	s := loadSpec(t)
	codes := codeStatus()
	enum := stringList(get(s.resolve(get(map[string]any(s), "components", "schemas", "ErrorCode")), "enum"))
	if len(enum) == 0 {
		t.Fatal("components.schemas.ErrorCode has no enum")
	}
	for code := range codes {
		if !slices.Contains(enum, code) {
			t.Errorf("error code %q (status %d) is missing from ErrorCode's enum", code, codes[code])
		}
	}
	for _, code := range enum {
		if _, ok := codes[code]; !ok {
			t.Errorf("ErrorCode lists %q, which errorTable never answers", code)
		}
	}

	// Each error response narrows error.code to codes of its own status, and
	// each of its examples carries one of them.
	check := func(where, status string, resp any) {
		resp = s.resolve(resp)
		media := asMap(get(resp, "content", "application/json"))
		if media == nil {
			t.Errorf("%s %s: no application/json body", where, status)
			return
		}
		narrowed := codeEnums(s, media["schema"])
		for _, c := range narrowed {
			if got, ok := codes[c]; !ok || strconv.Itoa(got) != status {
				t.Errorf("%s %s: code %q belongs to status %d", where, status, c, got)
			}
		}
		for name, ex := range asMap(media["examples"]) {
			c, _ := get(s.resolve(ex), "value", "error", "code").(string)
			if got, ok := codes[c]; !ok || strconv.Itoa(got) != status {
				t.Errorf("%s %s: example %s has code %q (status %d)", where, status, name, c, got)
			}
			if len(narrowed) > 0 && !slices.Contains(narrowed, c) {
				t.Errorf("%s %s: example %s has code %q, not among %v", where, status, name, c, narrowed)
			}
		}
		if status == "503" && get(resp, "headers", "Retry-After") == nil {
			t.Errorf("%s %s: no Retry-After header", where, status)
		}
	}
	for name, op := range s.operations() {
		for status, resp := range asMap(op["responses"]) {
			if n, err := strconv.Atoi(status); err == nil && n >= 400 {
				check(name, status, resp)
			}
			if get(s.resolve(resp), "headers", requestIDHeader) == nil {
				t.Errorf("%s %s: no %s header", name, status, requestIDHeader)
			}
		}
	}
}

// codeEnums collects the enums given to a "code" property anywhere in
// schema, following $refs to other schemas.
func codeEnums(s spec, schema any) []string {
	var out []string
	var walk func(n any, depth int)
	walk = func(n any, depth int) {
		if depth > 20 {
			return
		}
		n = s.resolve(n)
		switch v := n.(type) {
		case map[string]any:
			for k, c := range v {
				if k == "code" {
					out = append(out, stringList(get(c, "enum"))...)
					continue
				}
				walk(c, depth+1)
			}
		case []any:
			for _, c := range v {
				walk(c, depth+1)
			}
		}
	}
	walk(schema, 0)
	return out
}

// TestOpenAPIHeaders checks that every header name the handlers read or
// set is documented as a parameter or a response header: the names written
// as literals in any header call (gin's GetHeader and Header, http.Header's
// Get, Values, Set, Add and Del), those of the *Header constants, and the
// ones the trace propagator reads, which appear nowhere in our source.
func TestOpenAPIHeaders(t *testing.T) {
	s := loadSpec(t)
	documented := map[string]bool{}
	var walk func(n any)
	walk = func(n any) {
		switch v := n.(type) {
		case map[string]any:
			if v["in"] == "header" {
				if name, ok := v["name"].(string); ok {
					documented[http.CanonicalHeaderKey(name)] = true
				}
			}
			for k, c := range v {
				if k == "headers" {
					for h := range asMap(c) {
						documented[http.CanonicalHeaderKey(h)] = true
					}
				}
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(map[string]any(s))
	// OpenAPI leaves these two out of parameters: a security scheme stands
	// for Authorization, and a request body's media type for Content-Type.
	if get(map[string]any(s), "components", "securitySchemes", "adminBearer", "scheme") == "bearer" {
		documented["Authorization"] = true
	}
	for _, op := range s.operations() {
		if asMap(get(s.resolve(op["requestBody"]), "content")) != nil {
			documented["Content-Type"] = true
		}
	}

	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, f := range (requestTracer{}).prop.Fields() {
		used[http.CanonicalHeaderKey(f)] = true
	}
	lit := regexp.MustCompile(`\.(?:GetHeader|Header|Get|Values|Set|Add|Del)\("([A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)"`)
	constant := regexp.MustCompile(`\b[A-Za-z0-9]*Header\s*=\s*"([A-Za-z0-9-]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range []*regexp.Regexp{lit, constant} {
			for _, m := range re.FindAllStringSubmatch(string(src), -1) {
				used[http.CanonicalHeaderKey(m[1])] = true
			}
		}
	}
	for _, h := range []string{"Idempotency-Key", "Content-Type", "Traceparent", requestIDHeader} {
		if !used[h] {
			t.Fatalf("the scan misses header %s, which the handlers use: has the code changed shape?", h)
		}
	}
	if len(used) < 5 {
		t.Fatalf("found only %d header names in the handlers: has the code changed shape?", len(used))
	}
	for h := range used {
		if !documented[h] {
			t.Errorf("the handlers use header %s, which %s does not document", h, specPath)
		}
	}
}

// TestOpenAPILimits checks the request schemas against the limits the code
// enforces.
func TestOpenAPILimits(t *testing.T) {
	s := loadSpec(t)
	schema := func(name string) map[string]any {
		m := asMap(s.resolve(get(map[string]any(s), "components", "schemas", name)))
		if m == nil {
			t.Fatalf("no schema %s", name)
		}
		return m
	}
	for _, name := range []string{"StockRequest", "OrderRequest", "OrderLineRequest"} {
		if ap, ok := schema(name)["additionalProperties"].(bool); !ok || ap {
			t.Errorf("%s: additionalProperties must be false (the decoder refuses unknown keys)", name)
		}
	}
	bounds := func(where string, n any, lo, hi int64) {
		t.Helper()
		n = s.resolve(n)
		if got := asInt(t, get(n, "minimum"), where+".minimum"); got != lo {
			t.Errorf("%s.minimum = %d, code says %d", where, got, lo)
		}
		if got := asInt(t, get(n, "maximum"), where+".maximum"); got != hi {
			t.Errorf("%s.maximum = %d, code says %d", where, got, hi)
		}
	}
	bounds("StockRequest.available", get(schema("StockRequest"), "properties", "available"), 0, inventory.MaxStock)
	for _, f := range []string{"expect_available", "expect_received"} {
		// Any count a GET shows: past MaxStock too.
		n := s.resolve(get(schema("StockRequest"), "properties", f))
		if got := asInt(t, get(n, "minimum"), f+".minimum"); got != 0 {
			t.Errorf("StockRequest.%s.minimum = %d, code says 0", f, got)
		}
		if m, ok := n.(map[string]any); !ok || m["maximum"] != nil {
			t.Errorf("StockRequest.%s has a maximum; the code takes any non-negative int64", f)
		}
	}
	bounds("OrderLineRequest.quantity", get(schema("OrderLineRequest"), "properties", "quantity"), 1, inventory.MaxQuantity)
	hold := get(schema("OrderRequest"), "properties", "hold_seconds")
	bounds("OrderRequest.hold_seconds", hold, 1, int64(inventory.MaxHold/time.Second))
	if got := asInt(t, get(hold, "default"), "hold_seconds.default"); got != int64(inventory.DefaultHold/time.Second) {
		t.Errorf("hold_seconds.default = %d, code says %d", got, int64(inventory.DefaultHold/time.Second))
	}
	lines := get(schema("OrderRequest"), "properties", "lines")
	if got := asInt(t, get(lines, "maxItems"), "lines.maxItems"); got != inventory.MaxLines {
		t.Errorf("lines.maxItems = %d, code says %d", got, inventory.MaxLines)
	}
	if got := asInt(t, get(s.resolve(get(map[string]any(s), "components", "parameters", "IdempotencyKey")), "schema", "maxLength"),
		"Idempotency-Key maxLength"); got != inventory.MaxIdempotency {
		t.Errorf("Idempotency-Key maxLength = %d, code says %d", got, inventory.MaxIdempotency)
	}

	// The SKU pattern accepts exactly what ValidateSKU accepts.
	pattern, _ := schema("SKUName")["pattern"].(string)
	re, err := regexp.Compile(pattern)
	if err != nil {
		t.Fatalf("SKUName.pattern %q: %v", pattern, err)
	}
	probes := []string{"a", "A9", "widget-1", "gadget:blue", "SKU.2026_04", "0", strings.Repeat("x", 64), strings.Repeat("x", 65),
		"", "-a", ".a", "_a", ":a", "a/b", "a b", "a%2F", "ä", "a\n", "a..b", "a--", "a:b:c", "a*", "a?", "a{b}"}
	for _, p := range probes {
		if want, got := inventory.ValidateSKU(p) == nil, re.MatchString(p); want != got {
			t.Errorf("SKU %q: ValidateSKU accepts = %v, spec pattern matches = %v", p, want, got)
		}
	}

	enum := stringList(schema("OrderStatus")["enum"])
	want := []string{string(inventory.StatusReserved), string(inventory.StatusConfirmed), string(inventory.StatusCancelled),
		string(inventory.StatusExpired)}
	slices.Sort(enum)
	slices.Sort(want)
	if !slices.Equal(enum, want) {
		t.Errorf("OrderStatus enum = %v, clients can see %v", enum, want)
	}
}

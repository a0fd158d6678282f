package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type fakeZK struct {
	id     int64
	passwd []byte
	ok     bool
}

func (f fakeZK) SessionCredentials() (int64, []byte, bool) { return f.id, f.passwd, f.ok }

// TestZKSessionRoute checks that /debug/zk-session exists only with --chaos
// and a ZooKeeper locker, asks for the admin token when the service has
// one, and answers the credentials in the documented shape.
func TestZKSessionRoute(t *testing.T) {
	live := fakeZK{id: 0x1000044cb690001, passwd: []byte{0x6f, 0x1c, 0x00, 0xff}, ok: true}
	cases := []struct {
		name       string
		chaos      bool
		locker     any
		token      string // the service's admin token
		auth       string // the request's Authorization header
		wantStatus int
		wantCode   string
	}{
		{"chaos with zookeeper", true, live, "", "", 200, ""},
		{"no chaos", false, live, "", "", 404, "not_found"},
		{"chaos, other backend", true, struct{}{}, "", "", 404, "not_found"},
		{"chaos, between sessions", true, fakeZK{}, "", "", 503, "lock_unavailable"},
		{"admin token, none sent", true, live, "s3cret", "", 401, "unauthorized"},
		{"admin token, wrong one", true, live, "s3cret", "Bearer nope", 401, "unauthorized"},
		{"admin token, right one", true, live, "s3cret", "Bearer s3cret", 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(New(Config{Gatherer: prometheus.NewRegistry(), Chaos: tc.chaos,
				ZKSession: ZKSessionOf(tc.locker), AdminToken: tc.token}))
			defer srv.Close()
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/debug/zk-session", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			raw, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.wantStatus, raw)
			}
			var body struct {
				SessionID    int64  `json:"session_id"`
				SessionIDHex string `json:"session_id_hex"`
				PasswordHex  string `json:"password_hex"`
				Error        struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("body %s: %v", raw, err)
			}
			if body.Error.Code != tc.wantCode {
				t.Fatalf("code %q, want %q", body.Error.Code, tc.wantCode)
			}
			if tc.wantStatus == 200 && (body.SessionID != live.id || body.SessionIDHex != "0x1000044cb690001" || body.PasswordHex != "6f1c00ff") {
				t.Fatalf("body %s", raw)
			}
		})
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// checkDebugAddr refuses a --debug-addr that is not on loopback: pprof
// shows memory contents and lets anyone who reaches it burn CPU.
func checkDebugAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return badValue("debug-addr", addr, err)
	}
	if !isLoopback(host) {
		return badValue("debug-addr", addr, errors.New("pprof is served on loopback only (127.0.0.1, ::1 or localhost)"))
	}
	if err := checkHostPort(addr, true); err != nil {
		return badValue("debug-addr", addr, err)
	}
	return nil
}

// startDebug serves net/http/pprof on addr (already checked to be loopback)
// until stop is called; an empty addr serves nothing.
func startDebug(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug listen: %w", err)
	}
	mux := http.NewServeMux()
	// No /debug/pprof/cmdline: the command line may carry --admin-token
	// and a --database-url with its password, and anything on the host can
	// reach a loopback port. pprof.Index answers it 404 (no such profile).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("debug server", "err", err)
		}
	}()
	log.Info("serving pprof", "addr", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // a running profile is cut short
		<-done
	}, nil
}

package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/stockguard/stockguard/internal/httpapi"
)

// serverLimits bound what one client can hold of an instance: how long it
// may take to send a request, how much it may send, how many requests run
// at once, and how long a shutdown waits for them.
type serverLimits struct {
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	idleTimeout       time.Duration
	shutdownTimeout   time.Duration
	maxHeaderBytes    int
	maxInFlight       int
	metricsAddr       string
}

// Defaults of the limits; README's "Limits" lists them.
const (
	defaultReadHeaderTimeout = 5 * time.Second
	// defaultReadTimeout covers the headers and a body of at most 64 KiB,
	// which a legitimate client sends in milliseconds.
	defaultReadTimeout     = 10 * time.Second
	defaultIdleTimeout     = 2 * time.Minute
	defaultShutdownTimeout = 10 * time.Second
	// defaultMaxHeaderBytes is ample for the few headers the API reads
	// (Go's server allows 4 KiB more than this before it answers 431).
	defaultMaxHeaderBytes = 16 << 10
	// defaultMaxInFlight is far above what two cores serve at once. The
	// bodies buffered are bounded apart, in bytes (httpapi: 32 MiB).
	defaultMaxInFlight = 1024

	// requestMargin is what a request may take beyond its lock wait (and,
	// with --chaos, its pause): its batch's claim and write, and the answer.
	requestMargin = 10 * time.Second
	// writeGrace keeps the server's write deadline after the request's own
	// deadline, so that a request that runs out of time still gets its
	// 503 timeout answer instead of a cut connection.
	writeGrace = 5 * time.Second
)

// Ceilings of the limits: beyond each, serve would accept a value and then
// misbehave, so validate refuses it as a usage error.
const (
	// inFlightCeiling is Linux's default ceiling on a process's open files
	// (fs.nr_open, 1,048,576): every request in flight holds a connection,
	// so a larger bound could never be reached. It also keeps httpapi's
	// in-flight slots a channel that can be made: near 2^63 serve panicked
	// after dialling every server.
	inFlightCeiling = 1 << 20
	// headerBytesCeiling is net/http's own default, 64 times ours: headers
	// past it are no request this API reads. Near math.MaxInt Go's server
	// adds its 4 KiB of slack, wraps, and answers every request 431.
	headerBytesCeiling = http.DefaultMaxHeaderBytes
	// durationCeiling bounds the durations serve adds up (--lock-wait and
	// --read-timeout make the request and write deadlines) or hands to a
	// lock backend (--lock-ttl). A request that may wait a day for its
	// locks is already no request; the sums stay far from Go's 292-year
	// Duration, which they wrapped past into negative deadlines, turning
	// both bounds off; and a day of TTL fits pglock's idle timeout, an
	// int32 of milliseconds (24.8 days), and etcd's lease.
	durationCeiling = 24 * time.Hour
)

func (l *serverLimits) register(fs *flag.FlagSet) {
	fs.DurationVar(&l.readHeaderTimeout, "read-header-timeout", defaultReadHeaderTimeout,
		"longest a client may take to send a request's headers")
	fs.DurationVar(&l.readTimeout, "read-timeout", defaultReadTimeout,
		"longest a client may take to send a whole request, headers and body; at most 24h")
	fs.DurationVar(&l.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long an idle keep-alive connection stays open")
	fs.DurationVar(&l.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout,
		"how long SIGTERM waits for in-flight requests before it closes the connections left")
	fs.IntVar(&l.maxHeaderBytes, "max-header-bytes", defaultMaxHeaderBytes, "most bytes of request line and headers (beyond, after about 4 KiB of net/http's slack: 431), 1024 to 1048576")
	fs.IntVar(&l.maxInFlight, "max-in-flight", defaultMaxInFlight, "most /v1 requests served at once, at most 1048576 (beyond: 503 overloaded)")
	fs.StringVar(&l.metricsAddr, "metrics-addr", "", "serve /metrics on this address only (empty: on --addr with the API)")
}

func (l *serverLimits) validate() error {
	if err := positive(map[string]time.Duration{"read-header-timeout": l.readHeaderTimeout, "read-timeout": l.readTimeout,
		"idle-timeout": l.idleTimeout, "shutdown-timeout": l.shutdownTimeout}); err != nil {
		return err
	}
	if err := notAbove(durationCeiling, map[string]time.Duration{"read-timeout": l.readTimeout}); err != nil {
		return err
	}
	if l.maxHeaderBytes < 1024 || l.maxHeaderBytes > headerBytesCeiling {
		return badValue("max-header-bytes", strconv.Itoa(l.maxHeaderBytes), fmt.Errorf("want 1024 to %d", headerBytesCeiling))
	}
	if l.maxInFlight < 1 || l.maxInFlight > inFlightCeiling {
		return badValue("max-in-flight", strconv.Itoa(l.maxInFlight), fmt.Errorf("want 1 to %d", inFlightCeiling))
	}
	return nil
}

// requestTimeout is how long a request may run: its lock wait, the longest
// chaos pause when those are honoured, and requestMargin. A slow but
// legitimate order — one that waits its whole lock wait, or is paused on
// purpose — still gets its answer. With lockWait at most durationCeiling
// (validate), neither this nor the write deadline that adds the read
// timeout can overflow.
func requestTimeout(lockWait time.Duration, chaos bool) time.Duration {
	d := lockWait + requestMargin
	if chaos {
		d += httpapi.MaxChaosPause
	}
	return d
}

// server is the HTTP server of handler under the limits; its write deadline
// follows the requests' own (see writeGrace).
func (l *serverLimits) server(handler http.Handler, requestTimeout time.Duration, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: l.readHeaderTimeout,
		ReadTimeout:       l.readTimeout,
		WriteTimeout:      l.readTimeout + requestTimeout + writeGrace,
		IdleTimeout:       l.idleTimeout,
		MaxHeaderBytes:    l.maxHeaderBytes,
		// OPTIONS * would get net/http's own empty 200, which the API does
		// not document; the router answers it 404 like any other path.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

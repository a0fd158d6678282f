package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
)

// libRepeatEvery is how often a library line of one kind may be logged:
// with its servers down, go-redis reports a failed pool dial for every
// command on every node (27 of 31 stderr lines in 4 s with Redlock's masters
// down), which would bury the service's own lines; the lock probe's WARN
// already says the backend is down, so one line a kind per interval, with
// the count of those left out, keeps the cause without the flood.
const libRepeatEvery = 30 * time.Second

// libLog writes the lines of the client libraries (go-redis, OpenTelemetry)
// as the service's JSON log lines at WARN, each kind at most once per
// interval.
type libLog struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	seen map[string]*libRepeat
}

// libRepeat is the last time a kind was logged and how many of its lines
// were left out since.
type libRepeat struct {
	at      time.Time
	dropped int
}

func newLibLog(log *slog.Logger, interval time.Duration) *libLog {
	return &libLog{log: log, interval: interval, now: time.Now, seen: map[string]*libRepeat{}}
}

// routeLibraryLogs sends go-redis's and OpenTelemetry's messages to log.
// Both hooks are process-global: neither library takes a logger per client
// or per provider, and their defaults write plain lines to stderr, which
// breaks the one-JSON-object-a-line log README promises. A process runs one
// serve, so the hook belongs to it; where tests run several serves in one
// process the last one started gets the lines, which only moves a library
// line to a neighbour's log.
func routeLibraryLogs(log *slog.Logger) {
	l := newLibLog(log, libRepeatEvery)
	redis.SetLogger(redisLog{l})
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		l.emit("otel", "opentelemetry", err.Error())
	}))
}

// redisLog is go-redis's Logging interface over a libLog.
type redisLog struct{ l *libLog }

// Printf keys the repeats by format, so that the dial failures of every
// node count as one kind whatever address and attempt they name.
func (r redisLog) Printf(_ context.Context, format string, v ...any) {
	r.l.emit("redis:"+format, "go-redis", fmt.Sprintf(format, v...))
}

func (l *libLog) emit(kind, source, msg string) {
	l.mu.Lock()
	now := l.now()
	r := l.seen[kind]
	if r != nil && now.Sub(r.at) < l.interval {
		r.dropped++
		l.mu.Unlock()
		return
	}
	dropped := 0
	if r != nil {
		dropped = r.dropped
	}
	l.seen[kind] = &libRepeat{at: now}
	l.mu.Unlock()
	attrs := []any{"source", source}
	if dropped > 0 {
		attrs = append(attrs, "repeats_not_logged", dropped, "repeat_window", l.interval.String())
	}
	l.log.Warn(msg, attrs...)
}

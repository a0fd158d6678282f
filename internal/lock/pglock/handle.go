package pglock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/internal/lock"
)

// handle is one lease's session. The lease never runs Extend and Release at
// once, but Close and a lost lease's clean-up can come from other goroutines:
// mu serialises every use of conn.
type handle struct {
	l    *Locker
	key  string
	ttl  time.Duration
	lose func(error) // set before the handle is shared

	mu   sync.Mutex
	conn *pgxpool.Conn // nil once released or discarded
}

var _ lock.Extender = (*handle)(nil)

// Extend restarts the server's idle timer. The new deadline is counted from
// before the statement was sent, so it comes before the moment the server
// would end the session.
func (h *handle) Extend(ctx context.Context) (time.Time, error) {
	ctx, stop := h.l.bind(ctx)
	defer stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return time.Time{}, fmt.Errorf("pglock: %w: connection already closed", lock.ErrLeaseLost)
	}
	sent := time.Now()
	if _, err := h.conn.Exec(ctx, keepaliveSQL); err != nil {
		// Whatever the cause, the session can no longer be shown alive before
		// the deadline; the lease ends and onLost closes the connection.
		return time.Time{}, fmt.Errorf("pglock: %w: keepalive: %w", lock.ErrLeaseLost, err)
	}
	return validUntil(sent, h.ttl), nil
}

// Release unlocks and hands the connection back to the pool, or, when
// anything is off, closes it: ending the session frees its locks too.
func (h *handle) Release(ctx context.Context) error {
	defer h.l.forget(h)
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.conn
	if c == nil {
		return nil // lost, and its session already ended
	}
	h.conn = nil
	var unlocked bool
	if err := c.QueryRow(ctx, unlockSQL, h.key, poolAppName).Scan(&unlocked, nil, nil); err != nil {
		destroy(c)
		if ctx.Err() != nil {
			// The caller would not wait for the unlock; ending the session
			// frees the lock all the same.
			return nil
		}
		return fmt.Errorf("pglock: %w: unlock: %w", lock.ErrLeaseLost, err)
	}
	if !unlocked {
		// Cannot happen while the session lives; do not reuse a session in a
		// state we do not understand.
		destroy(c)
		return fmt.Errorf("pglock: %w: the session no longer held the lock", lock.ErrLeaseLost)
	}
	c.Release()
	return nil
}

// onLost is the lease's OnLost: count, log, and end the session so the lock
// is free at once rather than when the server's idle timer fires, and so the
// connection returns even if the holder never calls Release.
func (h *handle) onLost(err error) {
	h.l.m.Lost()
	h.l.log.Warn("lease lost", "key", h.key, "err", err)
	h.discard()
}

// discard closes the lease's connection, if it still has one.
func (h *handle) discard() {
	h.mu.Lock()
	c := h.conn
	h.conn = nil
	h.mu.Unlock()
	if c != nil {
		destroy(c)
	}
	h.l.forget(h)
}

// destroy takes a connection out of the pool and closes it. Ending the
// session is the one sure way to drop whatever lock it holds or is about to
// be granted.
func destroy(c *pgxpool.Conn) {
	conn := c.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

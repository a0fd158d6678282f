package redlock

import (
	"context"
	"time"
)

// Await is l's wait for a wake-up of key, as its retry loop makes it.
func Await(ctx context.Context, l *Locker, key string, d time.Duration) error {
	return l.loop.Await(ctx, key, d)
}

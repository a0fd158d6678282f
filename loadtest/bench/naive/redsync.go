package naive

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
)

// lockTTL is the loops' lock expiry, far above a cycle's milliseconds.
const lockTTL = 8 * time.Second

// releaseTimeout bounds an unlock. It runs on a fresh context: redsync
// releasing with a cancelled one leaves the key held on some nodes until
// its TTL (../shared/NOTES.md).
const releaseTimeout = 2 * time.Second

// Redsync is go-redsync over the Redis masters, one go-redis client with
// its default pool per master, and redsync's default retries, as its
// README shows it.
type Redsync struct {
	rs      *redsync.Redsync
	clients []*goredis.Client
}

// NewRedsync connects to every master and checks each answers.
func NewRedsync(ctx context.Context, addrs []string) (*Redsync, error) {
	r := &Redsync{}
	var pools []redsyncredis.Pool
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		r.clients = append(r.clients, c)
		if err := c.Ping(ctx).Err(); err != nil {
			r.Close()
			return nil, fmt.Errorf("naive redsync: %s: %w (start the stack: eval \"$(bash scripts/stack.sh up)\")", a, err)
		}
		pools = append(pools, redsyncgoredis.NewPool(c))
	}
	r.rs = redsync.New(pools...)
	return r, nil
}

// Name implements Locker.
func (r *Redsync) Name() string { return "go-redsync" }

// Lock implements Locker.
func (r *Redsync) Lock(ctx context.Context, key string) (func() error, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(lockTTL))
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", ErrLockFailed, err)
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		if _, err := m.UnlockContext(ctx); err != nil {
			return fmt.Errorf("naive redsync: %w: %w", ErrUnlockExpires, err)
		}
		return nil
	}, nil
}

// Close closes the clients.
func (r *Redsync) Close() {
	for _, c := range r.clients {
		_ = c.Close()
	}
}

package redisnode_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/stack"
)

// startRedis is a test-owned server that a test may pause.
func startRedis(t *testing.T) *stack.Redis {
	t.Helper()
	srv, err := stack.StartRedis(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// conn is a bare RESP connection, to place each command on a connection of
// the test's choosing.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &conn{Conn: c, r: bufio.NewReader(c)}
}

func (c *conn) send(t *testing.T, args ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
}

// reply reads one reply's first line.
func (c *conn) reply(t *testing.T) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(line, "$") && line != "$-1\r\n" {
		line, _ = c.r.ReadString('\n') // a bulk string's body
	}
	return strings.TrimSpace(line)
}

// answered is a connection the server has answered on, as every go-redis
// connection is before its first command (HELLO).
func answered(t *testing.T, addr string) *conn {
	t.Helper()
	c := dial(t, addr)
	c.send(t, "PING")
	if r := c.reply(t); r != "+PONG" {
		t.Fatalf("PING = %q", r)
	}
	return c
}

// TestPausedServerRunsBufferedWriteFirst checks, on a real SIGSTOPped
// redis-server, the order Release's rule for a lock write whose reply was
// lost counts on (see redisnode.Release): the write waits on a connection
// the server had answered on, and is closed by the client, as go-redis
// closes one that timed out; after SIGCONT,
//   - a command sent after it on a connection opened during the pause runs
//     after it;
//   - a delete sent after the server answered any command sent after the
//     write (here a delete on another answered connection, which may run
//     just before the write) finds the write.
//
// And go-redis sends no command on a new connection before the server
// answered its HELLO: a call on an empty pool during the pause never
// reaches the server, so a lock write is never sent on a connection the
// server has not answered on.
func TestPausedServerRunsBufferedWriteFirst(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	addr := srv.Addr()
	const trials = 20
	firstFound := 0
	for i := range trials {
		key := fmt.Sprintf("order-%d", i)
		w, p := answered(t, addr), answered(t, addr)
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		// The lock write, and a mark of it that nothing else touches.
		w.send(t, "SET", key, "ours", "NX", "PX", "60000")
		w.send(t, "SET", key+"-mark", "ours", "PX", "60000")
		time.Sleep(time.Millisecond)
		_ = w.Close()
		fresh := dial(t, addr)
		fresh.send(t, "GET", key+"-mark")
		p.send(t, "DEL", key)
		time.Sleep(2 * time.Millisecond)
		if err := srv.Cont(); err != nil {
			t.Fatal(err)
		}
		if r := fresh.reply(t); r != "ours" {
			t.Fatalf("trial %d: a GET on a connection opened during the pause = %q: it ran before the buffered SET", i, r)
		}
		if p.reply(t) == ":1" {
			firstFound++
		}
		p.send(t, "DEL", key) // sent after the server's answer
		p.reply(t)
		if n := p.exists(t, key); n != 0 {
			t.Fatalf("trial %d: the delete sent after an answer left the buffered SET's key", i)
		}
	}
	// Both happen: the order within one iteration is the kernel's.
	t.Logf("the first delete (same iteration as the SET) found it in %d of %d trials", firstFound, trials)

	n := redisnode.New(addr, 100*time.Millisecond)
	t.Cleanup(func() { _ = n.Close() })
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := n.AcquireIncr(t.Context(), []redisnode.Hold{{Key: "never", ID: "x"}}, time.Minute, 0)
	if cerr := srv.Cont(); cerr != nil {
		t.Fatal(cerr)
	}
	if err == nil {
		t.Fatal("AcquireIncr on a paused server succeeded")
	}
	time.Sleep(50 * time.Millisecond)
	if c := answered(t, addr); c.exists(t, redisnode.LockKey("never")) != 0 {
		t.Fatal("a command sent on a new connection during the pause ran after it: go-redis sent it before HELLO was answered")
	}
}

func (c *conn) exists(t *testing.T, key string) int {
	t.Helper()
	c.send(t, "EXISTS", key)
	if c.reply(t) == ":1" {
		return 1
	}
	return 0
}

// TestReleaseOfALateWriteGoesOn: a lock write sent to a paused server,
// whose reply never came, runs when the server resumes; its Release, made
// during the pause, cannot be confirmed in its tries and says so
// (redisnode.ErrPending), then goes on in the background and deletes the
// late key once the server answers, rather than leave it for its TTL.
func TestReleaseOfALateWriteGoesOn(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = raw.Close() })
	n := redisnode.New(srv.Addr(), 100*time.Millisecond)
	t.Cleanup(func() { _ = n.Close() })
	ctx := context.Background()
	// Load the scripts and leave an answered connection in the pool: the
	// lock write must get as far as the server to be run late.
	warm := []redisnode.Hold{{Key: "warm", ID: "w"}}
	if _, err := n.AcquireIncr(ctx, warm, time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Release(ctx, warm, nil, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	holds := []redisnode.Hold{{Key: "late", ID: "ours"}}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Cont() }()
	_, err := n.AcquireIncr(ctx, holds, time.Minute, 0)
	if err == nil || redisnode.Unsent(err) {
		t.Fatalf("AcquireIncr on a paused server = %v; want a timeout on an open connection", err)
	}
	_, _, err = n.Release(ctx, holds, nil, []redisnode.Written{redisnode.Unknown}, time.Minute)
	if !errors.Is(err, redisnode.ErrPending) {
		t.Fatalf("Release across the pause = %v; want ErrPending", err)
	}
	if s := n.Settling(); s != 1 {
		t.Fatalf("%d deletes in the background, want 1", s)
	}
	if err := srv.Cont(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for n.Settling() != 0 || raw.Exists(ctx, redisnode.LockKey("late")).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("2 s after the server resumed: the late key is %q (PTTL %v), %d deletes pending",
				raw.Get(ctx, redisnode.LockKey("late")).Val(), raw.PTTL(ctx, redisnode.LockKey("late")).Val(), n.Settling())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A release that answers at once costs one call and hands nothing on.
	if _, _, err := n.Release(ctx, holds, nil, []redisnode.Written{redisnode.Landed}, time.Minute); err != nil || n.Settling() != 0 {
		t.Fatalf("Release on a running server = %v, %d pending", err, n.Settling())
	}
}

// TestSettleWakesOnce: a release whose lock write is of unknown fate and
// whose tries all fail goes on in the background, where, as in Release's
// own loop (TestConfirmingReleaseWakesOnce), it wakes the key's waiters
// once: the call that confirms the delete after an answered one wakes
// nobody. Each background call used to send the hold's wake again, so one
// release woke two waiters.
func TestSettleWakesOnce(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	ctx := context.Background()
	key := "settle-wakes-once"
	// Load the scripts through another Node, so that n's pool stays empty:
	// its calls during the pause never reach the server (go-redis waits for
	// HELLO's answer), and only the background's calls run.
	warmer := redisnode.New(srv.Addr(), time.Second)
	warm := []redisnode.Hold{{Key: "warm", ID: "w"}}
	if _, err := warmer.AcquireIncr(ctx, warm, time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := warmer.Release(ctx, warm, []redisnode.Wake{redisnode.WakeAnyway}, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = warmer.Close() })
	n := redisnode.New(srv.Addr(), 100*time.Millisecond)
	t.Cleanup(func() { _ = n.Close() })

	// Two waiters blocked on the key's wake list, on connections of their own.
	woken := make(chan struct{}, 2)
	for range 2 {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, DisableIdentity: true})
		t.Cleanup(func() { _ = c.Close() })
		go func() {
			if c.BLPop(ctx, 8*time.Second, redisnode.WakeKey(key)).Err() == nil {
				woken <- struct{}{}
			}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); infoField(t, warmer.Client(), "clients", "blocked_clients") < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiters never blocked")
		}
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Cont() }()
	// Our lock write's reply never came (it did not land: nothing is there).
	holds := []redisnode.Hold{{Key: key, ID: "ours"}}
	_, _, err := n.Release(ctx, holds, []redisnode.Wake{redisnode.WakeAnyway}, []redisnode.Written{redisnode.Unknown}, time.Minute)
	if !errors.Is(err, redisnode.ErrPending) {
		t.Fatalf("Release across the pause = %v; want ErrPending", err)
	}
	if err := srv.Cont(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Second); n.Settling() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d deletes still pending 3 s after the resume", n.Settling())
		}
	}
	time.Sleep(300 * time.Millisecond) // a second wake-up would reach the other waiter by now
	if got := len(woken); got != 1 {
		t.Errorf("one release woke %d waiters, want 1", got)
	}
}

// TestSettleWakesOnceWithAWarmPool is TestSettleWakesOnce with the Node's
// own pool warm (the usual case: a Locker that has been serving): the
// Release's first try goes out on an idle, answered connection, so it is
// buffered in the paused server and runs on resume (waking one waiter),
// and the background's first answered call runs too. Three waiters, one
// woken: the hold's wake marker (WokeKey) makes every repeat wake nobody.
// (Without it a Landed and an Unknown write each woke two, and before the
// background's repeats stopped waking, an Unknown one woke all three.)
func TestSettleWakesOnceWithAWarmPool(t *testing.T) {
	t.Parallel()
	for _, written := range []redisnode.Written{redisnode.Landed, redisnode.Unknown} {
		t.Run([]string{"Landed", "Unknown"}[written], func(t *testing.T) {
			srv := startRedis(t)
			ctx := context.Background()
			key := "settle-wakes-once-warm"
			n := redisnode.New(srv.Addr(), 100*time.Millisecond)
			t.Cleanup(func() { _ = n.Close() })
			warm := []redisnode.Hold{{Key: "warm", ID: "w"}}
			if _, err := n.AcquireIncr(ctx, warm, time.Minute, 0); err != nil {
				t.Fatal(err)
			}
			if _, _, err := n.Release(ctx, warm, []redisnode.Wake{redisnode.WakeAnyway}, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
			woken := make(chan struct{}, 3)
			for range 3 {
				c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, DisableIdentity: true})
				t.Cleanup(func() { _ = c.Close() })
				go func() {
					if c.BLPop(ctx, 8*time.Second, redisnode.WakeKey(key)).Err() == nil {
						woken <- struct{}{}
					}
				}()
			}
			for deadline := time.Now().Add(5 * time.Second); infoField(t, n.Client(), "clients", "blocked_clients") < 3; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the waiters never blocked")
				}
			}
			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = srv.Cont() }()
			holds := []redisnode.Hold{{Key: key, ID: "ours"}}
			_, _, err := n.Release(ctx, holds, []redisnode.Wake{redisnode.WakeAnyway}, []redisnode.Written{written}, time.Minute)
			if !errors.Is(err, redisnode.ErrPending) {
				t.Fatalf("Release across the pause = %v; want ErrPending", err)
			}
			if err := srv.Cont(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(3 * time.Second); n.Settling() != 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d deletes still pending", n.Settling())
				}
			}
			time.Sleep(300 * time.Millisecond)
			if got := len(woken); got != 1 {
				t.Errorf("one release (written %v) woke %d waiters, want 1", written, got)
			}
		})
	}
}

// TestUnsent: a refused dial sent nothing; a closed Node neither.
func TestUnsent(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	n := redisnode.New(srv.Addr(), 200*time.Millisecond)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	_, err := n.AcquireIncr(t.Context(), []redisnode.Hold{{Key: "k", ID: "x"}}, time.Minute, 0)
	if !redisnode.Unsent(err) {
		t.Errorf("AcquireIncr on a dead server = %v: not known unsent", err)
	}
	_ = n.Close()
	if _, err := n.AcquireIncr(t.Context(), []redisnode.Hold{{Key: "k", ID: "x"}}, time.Minute, 0); !redisnode.Unsent(err) {
		t.Errorf("AcquireIncr on a closed Node = %v: not known unsent", err)
	}
	if redisnode.Unsent(context.DeadlineExceeded) {
		t.Error("a timeout counted as unsent")
	}
}

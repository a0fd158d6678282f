package reservation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock/backends"
	"github.com/stockguard/stockguard/internal/lock/etcdlock"
	"github.com/stockguard/stockguard/internal/lock/zklock"
	"github.com/stockguard/stockguard/internal/reservation"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// TestUnknownSKUsTouchNoLockServer places orders for SKUs that do not exist
// — one line, 100 lines, a line of an existing SKU with one that does not,
// several at once on one SKU — coalesced and not, on every networked
// backend. Each answers unknown_sku, and afterwards no lock server has
// anything for those names: no Redis key on any node, no znode, no etcd
// event, no fence drawn from the postgres sequence, and the locker was not
// even asked. A SKU created later by PUT then gets increasing tokens.
func TestUnknownSKUsTouchNoLockServer(t *testing.T) {
	for _, name := range networked {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			url := stacktest.NewDatabase(t, ctx)
			p := stackParams(t, url)
			store := newPGStoreAt(t, url)
			locker, rec := record(newBackend(t, name, p))
			run := uniq()
			ghost := "ghost-" + run
			known := "known-" + run
			setup := reservation.New(reservation.Config{Store: store, Locker: locker, LockWait: 5 * time.Second})
			if _, err := setup.SetStock(ctx, known, 10); err != nil {
				t.Fatal(err)
			}
			if got := rec.asked(); len(got) != 1 || got[0] != known {
				t.Fatalf("PUT asked the locker for %v, want %s alone", got, known)
			}
			w := watchServers(t, p, url, ghost)
			for _, c := range []reservation.Coalescing{{}, {Disabled: true}} {
				svc := reservation.New(reservation.Config{Store: store, Locker: locker, LockWait: 5 * time.Second, Coalescing: c})
				tag := fmt.Sprintf("%s-c%v", ghost, c.Disabled)
				orders := []inventory.PlaceRequest{
					req("", line(tag+"-one", 1)),
					req("k-"+tag, line(tag+"-keyed", 1)),
					req("", line(known, 1), line(tag+"-mixed", 1)),
				}
				var hundred []inventory.LineRequest
				for i := range inventory.MaxLines {
					hundred = append(hundred, line(fmt.Sprintf("%s-%03d", tag, i), 1))
				}
				orders = append(orders, req("", hundred...))
				for range 8 {
					orders = append(orders, req("", line(tag+"-hot", 1)))
				}
				var wg sync.WaitGroup
				for i, r := range orders {
					wg.Go(func() {
						_, _, err := svc.Place(ctx, r)
						if !errors.Is(err, inventory.ErrUnknownSKU) {
							t.Errorf("coalescing off=%v, order %d: %v, want ErrUnknownSKU", c.Disabled, i, err)
						}
					})
				}
				wg.Wait()
			}
			if got := rec.asked(); len(got) != 0 {
				t.Errorf("orders for unknown SKUs asked the locker for %d keys: %v", len(got), got[:min(len(got), 5)])
			}
			if k, err := setup.SKU(ctx, known); err != nil || k.Available != 10 || k.Reserved != 0 {
				t.Fatalf("known SKU after refused orders = %+v, %v", k, err)
			}
			w.check(t)

			// Created later, a SKU gets tokens that increase from there.
			created := ghost + "-cfalse-one"
			k, err := setup.SetStock(ctx, created, 5)
			if err != nil {
				t.Fatal(err)
			}
			last := k.FenceToken
			for i := range 2 {
				o, _, err := setup.Place(ctx, req("", line(created, 1)))
				if err != nil {
					t.Fatalf("order %d on the created SKU: %v", i, err)
				}
				if tok := o.Lines[0].FenceToken; tok <= last {
					t.Fatalf("order %d on the created SKU has token %d, not above %d", i, tok, last)
				} else {
					last = tok
				}
			}
		})
	}
}

// serverWatch observes, on every lock server of the stack, whatever is
// created for names starting with prefix.
type serverWatch struct {
	p      string
	redis  []*redis.Client
	zk     *zk.Conn
	etcd   *clientv3.Client
	events clientv3.WatchChan
	marker string
	pg     *pgx.Conn
	// seq is the postgres fence sequence's state when the watch began;
	// "" if it does not exist (not the postgres backend).
	seq string
}

func watchServers(t *testing.T, p backends.Params, url, prefix string) *serverWatch {
	t.Helper()
	ctx := context.Background()
	w := &serverWatch{p: prefix, marker: etcdlock.Root + "/~marker-" + uniq()}
	for _, a := range p.RedisAddrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		w.redis = append(w.redis, c)
	}
	conn, _, err := zk.Connect(p.ZKServers, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	w.zk = conn
	cli, err := clientv3.New(clientv3.Config{Endpoints: p.EtcdEndpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	w.etcd = cli
	// The watch starts at the current revision: it sees every later change
	// under the lock root, even a key created and deleted again.
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(gctx, w.marker)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	w.events = cli.Watch(wctx, etcdlock.Root+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	pg, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close(context.Background()) })
	w.pg = pg
	w.seq = w.sequence(t)
	return w
}

// sequence is the fence sequence's state, or "" when it does not exist.
func (w *serverWatch) sequence(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var exists bool
	if err := w.pg.QueryRow(ctx, `SELECT to_regclass('stockguard_lock_fence') IS NOT NULL`).Scan(&exists); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	if !exists {
		return ""
	}
	var state string
	if err := w.pg.QueryRow(ctx, `SELECT last_value::text || '/' || is_called::text FROM stockguard_lock_fence`).
		Scan(&state); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	return state
}

func (w *serverWatch) check(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, c := range w.redis {
		var found []string
		iter := c.Scan(ctx, 0, "stockguard:{"+w.p+"*", 1000).Iterator()
		for iter.Next(ctx) {
			found = append(found, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("redis node %d: scan: %v", i, err)
		}
		if len(found) > 0 {
			t.Errorf("redis node %d has %d keys for unknown SKUs: %v", i, len(found), found[:min(len(found), 5)])
		}
	}
	children, _, err := w.zk.Children(zklock.DefaultRoot)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("zookeeper: %v", err)
	}
	if hit := contains(children, func(n string) bool { return strings.HasPrefix(n, w.p) }); len(hit) > 0 {
		t.Errorf("zookeeper has lock nodes for unknown SKUs: %v", hit[:min(len(hit), 5)])
	}
	// The marker's own event ends the history to read: events arrive in
	// revision order, so every earlier change has been seen by then.
	if _, err := w.etcd.Put(ctx, w.marker, "end"); err != nil {
		t.Fatalf("etcd: %v", err)
	}
	defer func() { _, _ = w.etcd.Delete(context.Background(), w.marker) }()
	var hit []string
	for done := false; !done; {
		select {
		case resp, ok := <-w.events:
			if !ok || resp.Err() != nil {
				t.Fatalf("etcd watch ended: %v", resp.Err())
			}
			for _, ev := range resp.Events {
				k := string(ev.Kv.Key)
				done = done || k == w.marker
				if strings.HasPrefix(k, etcdlock.Root+"/"+w.p) {
					hit = append(hit, k)
				}
			}
		case <-ctx.Done():
			t.Fatal("etcd: the marker's event never came")
		}
	}
	if len(hit) > 0 {
		t.Errorf("etcd saw %d changes under unknown SKUs: %v", len(hit), hit[:min(len(hit), 5)])
	}
	if now := w.sequence(t); now != w.seq {
		t.Errorf("postgres fence sequence moved from %q to %q: a lock was taken", w.seq, now)
	}
	var advisory int
	if err := w.pg.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&advisory); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	if advisory > 0 {
		t.Errorf("%d advisory locks held after every order answered", advisory)
	}
}

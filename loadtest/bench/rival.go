package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/procs"
	"github.com/stockguard/stockguard/loadtest/run"
)

// spreadRivals maps a backend to the backend its 1,000-SKU window is
// judged against in turns: redis ≥ postgres compares two services, and two
// windows measured minutes apart on this shared machine compared the
// minutes as much as the backends (2026-12-07: redis' window lost 12.4 %
// of the machine to other guests, postgres' 3.1 %).
var spreadRivals = map[string]string{"redis": "postgres"}

// rival is the instances of another backend, started beside a backend's
// own for its 1,000-SKU window, coalescing on, with fresh SKUs of their
// own in the suite's database.
type rival struct {
	backend string
	ins     []*procs.Instance
	skus    []string
	c       *client.Client // with the rival's admin token
	logs    func(keep bool) bool
}

// startRival starts bc.Instances instances of backend on the suite's
// database, with the suite's serve flags and coalescing on, and creates n
// fresh SKUs on them.
func (bc Config) startRival(ctx context.Context, backend string, n int, stderr io.Writer) (*rival, error) {
	dir, logs, err := procs.LogRoot(bc.rivalLogDir(backend), "stockguard-bench-rival-", stderr)
	if err != nil {
		return nil, fmt.Errorf("rival %s: %w", backend, err)
	}
	token := strings.ReplaceAll(uuid.NewString(), "-", "")
	opts := procs.ServeOptions{
		Bin: bc.Bin, Lock: backend, Fencing: compare.FencingFor(backend), AdminToken: token,
		RedisAddrs: bc.RedisAddrs, ZKServers: bc.ZKServers, EtcdEndpoints: bc.EtcdEndpoints, DatabaseURL: bc.DatabaseURL,
		LogDir: dir, Extra: append([]string{"--coalesce=on"}, bc.ServeFlags...),
	}
	fmt.Fprintf(stderr, "bench: starting %d %s instances to take turns with\n", bc.Instances, backend)
	ins, err := procs.Start(ctx, opts, bc.Instances, bc.StartupTimeout)
	if err != nil {
		logs(true)
		return nil, fmt.Errorf("rival %s: %w", backend, err)
	}
	r := &rival{backend: backend, ins: ins, c: client.New(16, token, 10*time.Second), logs: logs}
	if r.skus, err = createJudgedSKUs(ctx, r.c, r.urls(), n); err != nil {
		r.stop(true)
		return nil, fmt.Errorf("rival %s: %w", backend, err)
	}
	return r, nil
}

// rivalLogDir is where a rival's instances log under bc.LogDir, or empty
// (temporary).
func (bc Config) rivalLogDir(backend string) string {
	if bc.LogDir == "" {
		return ""
	}
	return filepath.Join(bc.LogDir, "rival-"+backend)
}

func (r *rival) urls() []string {
	urls := make([]string, len(r.ins))
	for i, in := range r.ins {
		urls[i] = in.URL
	}
	return urls
}

// side is the rival's side of a judged window, measured as the service's
// own: its instances' CPU and critical sections.
func (r *rival) side(bc Config) judgeSide { return bc.serviceSide(r.urls(), r.skus, r.ins) }

// readBack reads back j's SKUs, as the service's window is: a rival's
// 201s are owed their units all the same.
func (r *rival) readBack(ctx context.Context, j *Judged) {
	readBackOwed(ctx, r.c, r.ins[0].URL, r.skus, j)
}

// stop ends the rival's instances, keeping their logs if keep (or if one
// did not stop cleanly).
func (r *rival) stop(keep bool) error {
	err := procs.StopAll(r.ins)
	r.c.Close()
	r.logs(keep || err != nil)
	return err
}

// createJudgedSKUs creates n fresh SKUs with judgeStock units, spread over
// urls, and returns their names.
func createJudgedSKUs(ctx context.Context, c *client.Client, urls []string, n int) ([]string, error) {
	skus := make([]string, n)
	id := run.NewRunID()
	for i := range skus {
		skus[i] = run.SKUName(id, i)
	}
	err := run.ForEach(ctx, n, 16, func(ctx context.Context, i int) error {
		u := urls[i%len(urls)]
		var err error
		// A PUT sets the stock, so sending it again is safe; on a
		// saturated machine a lock node's timeout can refuse one.
		for range putTries {
			if _, err = c.PutSKU(ctx, u, skus[i], judgeStock); err == nil || ctx.Err() != nil {
				break
			}
			run.Sleep(ctx, 100*time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("judge: create SKUs on %s: %w", u, err)
		}
		return nil
	})
	return skus, err
}

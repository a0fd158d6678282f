package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/internal/lock"
)

// entry is what a session knows of one of its waiter keys, from before the
// key's put is sent (newWaiter) until the key is released (unregister) or
// abandoned (forget). The session's watch (watchKeys) marks it deleted
// when the key goes without the session deleting it: the session's lease
// revoked or expired (the keys go at once, the next renewal is up to TTL/3
// away), or someone deleting it (etcdctl del --prefix). A granted key's
// lease is then lost at once; a waiting one starts over.
//
// The Locker's own deletions (releases, batch releases in one transaction,
// clean-ups) remove the entry before they are sent, so the watch, seeing
// them, finds no entry and takes no loss.
type entry struct {
	rev  int64         // the key's create revision, once its put was answered
	lose func(error)   // set once granted: ends the lease
	gone chan struct{} // closed when marked deleted
	// deleted is set when the key went; absentAt, when a recheck found no
	// key while rev was still 0 (the put may have been in flight).
	deleted  bool
	absentAt int64
}

// track records path, about to be put, as the session's.
func (s *session) track(path string) *entry {
	e := &entry{gone: make(chan struct{})}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.keys != nil { // nil once the session ended: nothing to follow
		s.keys[path] = e
	}
	return e
}

// created records that w's put was applied at rev.
func (s *session) created(w *waiter, rev int64) {
	w.rev = rev
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.keys[w.path] != w.e {
		return
	}
	w.e.rev = rev
	if w.e.absentAt >= rev {
		s.markLocked(w.path, w.e) // created, then gone before a recheck read it
	}
}

// forget stops following the keys of ws: the Locker deletes them itself, or
// they were never written.
func (s *session) forget(ws ...*waiter) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	for _, w := range ws {
		if s.keys[w.path] == w.e {
			delete(s.keys, w.path)
		}
	}
}

// register makes h's key's deletion end its lease (lose); it fails with
// errSessionGone if the session ended meanwhile, errKeyGone if the key went.
func (s *session) register(h *handle, lose func(error)) error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	e := s.keys[h.w.path]
	switch {
	case s.gone:
		return errSessionGone
	case e == nil || e != h.w.e || e.deleted:
		delete(s.keys, h.w.path)
		return fmt.Errorf("%w: %s", errKeyGone, h.w.path)
	}
	e.lose = lose
	return nil
}

// unregister removes a lease being released; false if its key is gone
// already: the session ended, taking it along, or someone deleted it (the
// lease was lost then).
func (s *session) unregister(h *handle) bool {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.gone || s.keys[h.w.path] != h.w.e {
		return false
	}
	delete(s.keys, h.w.path)
	return true
}

// deleted handles the deletion of path, one of the session's keys or not.
func (s *session) deleted(path string) {
	s.l.mu.Lock()
	lose := s.markLocked(path, s.keys[path])
	s.l.mu.Unlock()
	if lose != nil {
		lose(fmt.Errorf("etcd: %w: key %s deleted (session lease revoked or expired, or deleted by another client)",
			lock.ErrLeaseLost, path))
	}
}

// markLocked marks e, path's entry (nil: not ours), deleted and returns its
// lease's lose function, if granted. It asks for a renewal now: the lease
// may have been revoked. s.l.mu is held.
func (s *session) markLocked(path string, e *entry) func(error) {
	if e == nil || e.deleted {
		return nil
	}
	e.deleted = true
	close(e.gone)
	select {
	case s.check <- struct{}{}:
	default:
	}
	if e.lose == nil {
		return nil // a waiter: it sees its own key gone (watchDelete, register)
	}
	delete(s.keys, path)
	return e.lose
}

// watchRetry spaces the session watch's restarts.
const watchRetry = 100 * time.Millisecond

// errSilent ends a session watch that said nothing for s.silence().
var errSilent = errors.New("session watch silent")

// watchKeys follows every deletion under Root from revision from on, until
// the session ends: one watch per session, requiring a leader (a member cut
// off from the quorum cancels it rather than staying silent), only
// deletions. Every instance's releases pass through it, so it costs a
// message per release cluster-wide, cheap beside the release itself. A
// broken watch starts again from just after the last deletion seen; one
// whose revision was compacted meanwhile reads every key of the session
// (recheck) and goes on from just after the compaction (see resume).
//
// A watch silent for s.silence() may sit on a frozen member, which cancels
// nothing, and the next one would sit there too (see watchDelete): it
// rechecks as well, so a deletion is noticed within the silence and a
// retried read, frozen member or not. On a cluster where no key under Root
// goes for that long, that costs a read of the session's keys (one
// transaction per maxTxnOps keys) every s.silence().
func (s *session) watchKeys(from int64) {
	next := from
	for {
		wctx, cancel := context.WithCancelCause(clientv3.WithRequireLeader(s.ctx))
		// Armed before Watch, which waits for the watch's creation.
		silent := time.AfterFunc(s.silence(), func() { cancel(errSilent) })
		wch := s.l.cli.Watch(wctx, Root+"/", clientv3.WithPrefix(), clientv3.WithRev(next), clientv3.WithFilterPut())
		next = s.follow(wch, next, func() { silent.Reset(s.silence()) })
		silent.Stop()
		if errors.Is(context.Cause(wctx), errSilent) {
			next = s.resume(next, next)
		}
		cancel(nil)
		t := time.NewTimer(watchRetry)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// follow hands the deletions wch reports to deleted until the watch ends,
// calling heard at each response, and returns the revision to watch from
// next.
func (s *session) follow(wch clientv3.WatchChan, next int64, heard func()) int64 {
	for wr := range wch {
		heard()
		if wr.CompactRevision != 0 {
			return s.resume(next, wr.CompactRevision+1)
		}
		if wr.Err() != nil {
			return next
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				s.deleted(string(ev.Kv.Key))
			}
			// Only an event's own revision tells how far the watch got: a
			// response's header may be ahead of events still to come.
			next = max(next, ev.Kv.ModRevision+1)
		}
	}
	return next
}

// resume rechecks the session's keys for a watch that cannot go on from
// next, and returns the revision to watch from: the later of after, the
// first the broken watch cannot tell of (next after a silence, just after
// the compaction after one), and just after the previous recheck's read.
// Not just after this recheck's own read: a key tracked once it listed the
// keys, then put and deleted before it read them, would be neither read
// nor watched. Such a key was put after the previous read (s.lastRead)
// returned, so created after its revision, and the watch sees it go. If
// the recheck fails, next, to recheck again.
func (s *session) resume(next, after int64) int64 {
	rev, err := s.recheck()
	if err != nil {
		s.l.log.Debug("etcd: session keys not rechecked; trying again", "err", err)
		return next
	}
	from := max(after, s.lastRead+1)
	s.lastRead = rev
	return from
}

// recheck reads every key of the session, as it stands, and marks those
// gone deleted (or recreated by someone else: another create revision). It
// returns the revision of its last read: every key put after recheck
// returns is created after it. A key still being put (rev 0) that is
// absent is remembered as absent at that read's revision: if its put turns
// out applied before, it was deleted since (created checks).
func (s *session) recheck() (int64, error) {
	s.l.mu.Lock()
	paths := make([]string, 0, len(s.keys))
	for p := range s.keys {
		paths = append(paths, p)
	}
	s.l.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, cleanupTimeout)
	defer cancel()
	if len(paths) == 0 {
		resp, err := attempt(ctx, s, func(c context.Context, via caller) (*clientv3.GetResponse, error) {
			return via.Get(c, Root+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		})
		if err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	}
	var last int64
	for start := 0; start < len(paths); start += maxTxnOps {
		chunk := paths[start:min(start+maxTxnOps, len(paths))]
		ops := make([]clientv3.Op, len(chunk))
		for i, p := range chunk {
			ops[i] = clientv3.OpGet(p, clientv3.WithKeysOnly())
		}
		resp, err := attempt(ctx, s, func(c context.Context, via caller) (*clientv3.TxnResponse, error) {
			return via.Txn(c).Then(ops...).Commit()
		})
		if err != nil {
			return 0, err
		}
		rev := resp.Header.Revision
		last = max(last, rev)
		var lost []func(error)
		s.l.mu.Lock()
		for i, p := range chunk {
			e := s.keys[p]
			if e == nil {
				continue // released or abandoned meanwhile
			}
			kvs := resp.Responses[i].GetResponseRange().Kvs
			switch {
			case e.rev == 0 && len(kvs) == 0:
				e.absentAt = rev
			case e.rev > rev:
				// Created after the read (its answer came meanwhile): the read
				// could not see it, and the watch, resuming no later than just
				// after the read (see resume), sees its deletion.
			case e.rev != 0 && (len(kvs) == 0 || kvs[0].CreateRevision != e.rev):
				if lose := s.markLocked(p, e); lose != nil {
					lost = append(lost, lose)
				}
			}
		}
		s.l.mu.Unlock()
		for _, lose := range lost {
			lose(fmt.Errorf("etcd: %w: key deleted (session lease revoked or expired, or deleted by another client)", lock.ErrLeaseLost))
		}
	}
	return last, nil
}

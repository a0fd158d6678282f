package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/lock"
)

// node is one waiter's znode.
type node struct {
	key    string
	parent string // <root>/<key>
	name   string // _c_<id>-lock-<seq>
	seq    uint64
	id     uuid.UUID
	token  lock.Token
	first  bool // the only node under its parent when created: nobody can be ahead
}

func (n *node) path() string { return n.parent + "/" + n.name }

const (
	// cleanupTimeout bounds how long a failed Acquire whose caller's
	// context is still running waits for its own node to be deleted
	// before it returns; the deletion goes on in the background.
	cleanupTimeout = 2 * time.Second
	// cleanupGrace is how long past the caller's context a failed call
	// waits for its clean-up: about a round trip, so that a reachable
	// ensemble confirms it, while a client cut off from the ensemble,
	// whose requests wait in go-zookeeper for a server, returns about when
	// its caller asked. The clean-up goes on in the background after it.
	cleanupGrace = 200 * time.Millisecond
)

// cleanupContext is the context a failed call waits for its clean-up in
// (lock.CleanupContext with this package's bounds).
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return lock.CleanupContext(ctx, cleanupTimeout, cleanupGrace)
}

// acquire runs the recipe once in this session.
func (s *session) acquire(ctx context.Context, key string, o lock.Options) (*lock.Lease, error) {
	// TryOnce creates too, rather than reading first: a read is served by
	// the session's server, which may not have applied a release another
	// client has seen complete (a follower answers a delete before the
	// leader applies it, and Sync on the leader waits for nothing), so a
	// free key could be reported held. The listing after our own create
	// follows every release before it; a poll of a held key costs two
	// transactions, as Curator's acquire(0) does.
	nodes, _, err := s.createAll(ctx, []string{key}, nil)
	if err != nil {
		return nil, err
	}
	n := nodes[0]
	if err := s.wait(ctx, n, o.TryOnce); err != nil {
		if !errors.Is(err, errSessionGone) {
			// Never granted: delete our node.
			if aerr := s.abandon(ctx, n); aerr != nil {
				err = fmt.Errorf("%w (%w)", err, aerr)
			}
		}
		return nil, err
	}
	leases, err := s.grant(ctx, []*node{n})
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// grant turns granted nodes into leases, registered all at once, once the
// leader is known to have heard from the session lately (confirm). If the
// leader cannot confirm it, or the session was disconnected or given up
// since the verdict, no lease is
// handed out (it would be born lost): the nodes are deleted, or are gone
// with the session, and the attempt starts over; a delete still pending
// (lock.ErrCleanupPending) is in the error, for the caller to hear of if
// it gives up.
func (s *session) grant(ctx context.Context, nodes []*node) (lock.Set, error) {
	leases := make(lock.Set, len(nodes))
	hs := make([]*handle, len(nodes))
	loses := make([]func(error), len(nodes))
	for i, n := range nodes {
		hs[i] = &handle{s: s, n: n}
		leases[i], loses[i] = lock.NewLease(lock.LeaseParams{
			Key:    n.key,
			Token:  n.token,
			ID:     n.id,
			Handle: hs[i],
			OnLost: func(error) { s.l.m.Lost() },
		})
	}
	err := s.confirm(ctx)
	if err == nil {
		err = s.register(hs, loses)
	}
	if err != nil {
		if !errors.Is(err, errSessionGone) {
			if aerr := s.abandon(ctx, nodes...); aerr != nil {
				err = fmt.Errorf("%w (%w)", err, aerr)
			}
		}
		return nil, err
	}
	return leases, nil
}

// abandon deletes nodes that were never handed out as leases, waiting for
// that as cleanupContext says; the deletion goes on in the background after
// that, and the error (lock.ErrCleanupPending) says so. The caller's ctx
// may be over (often the reason): it only shortens the wait.
func (s *session) abandon(ctx context.Context, nodes ...*node) error {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	err := s.removeAll(cctx, nodes)
	if err != nil {
		s.l.log.Warn("zookeeper: abandoned nodes not deleted yet", "nodes", len(nodes), "err", err)
	}
	return err
}

// ensureParent creates key's parent as a container, tolerating one that
// exists, and the root first if that is missing. It reads before it writes:
// a parent another Locker made is usual (several instances share the keys),
// and a create that fails with ErrNodeExists still costs the ensemble a
// transaction, where a read costs one server a lookup.
func (s *session) ensureParent(key string) error {
	parent := s.l.cfg.root + "/" + key
	if ok, _, err := s.conn.Exists(parent); err != nil {
		return fmt.Errorf("exists %s: %w", parent, err)
	} else if ok {
		s.l.parents.set(key, true)
		return nil
	}
	_, err := s.conn.CreateContainer(parent, nil, zk.FlagContainer, s.l.acl)
	if errors.Is(err, zk.ErrNoNode) {
		if err = s.ensureRoot(); err != nil {
			return err
		}
		_, err = s.conn.CreateContainer(parent, nil, zk.FlagContainer, s.l.acl)
	}
	if err == nil || errors.Is(err, zk.ErrNodeExists) {
		s.l.parents.set(key, true)
		return nil
	}
	return fmt.Errorf("create container %s: %w", parent, err)
}

// recoverCreate looks for the node of a create whose response was lost,
// by the uuid in its name. It returns (nil, nil) when the create did not
// happen.
//
// The listing follows a sync: after a reconnection we may be on another
// server, one that has not applied the create yet. Once the session has
// moved, the leader refuses anything the old server still forwards, so
// after the sync the create either shows or never will.
//
// It goes on while the session may still hold the node: not once the
// servers could have expired it (expiresAfter) without a reconnection,
// whether or not our timer has given the session up yet.
func (s *session) recoverCreate(key, parent string, id uuid.UUID) (*node, error) {
	mark := nodePrefix(id)
	for ; ; time.Sleep(retryPause) { // a retry waits for the reconnection
		if s.isGone() {
			return nil, errSessionGone
		}
		if s.mayHaveExpired() {
			// errSessionGone must mean gone: were the session to resume
			// (its timer late, a handshake answered), the create, if
			// applied, would leave a node nobody owns first in the line.
			s.l.giveUp(s, lostTimeout, errors.New("a lost create's reply not recovered before the session could have expired"))
			return nil, errSessionGone
		}
		_, err := s.conn.Sync(parent)
		if cutOff(err) {
			continue
		}
		children, _, err := s.conn.Children(parent)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return nil, nil
		case cutOff(err):
			continue
		case err != nil:
			return nil, s.classify(err)
		}
		name := ""
		for _, c := range children {
			if strings.HasPrefix(c, mark) {
				name = c
			}
		}
		if name == "" {
			return nil, nil
		}
		ok, st, err := s.conn.Exists(parent + "/" + name)
		switch {
		case cutOff(err):
			continue
		case err != nil:
			return nil, s.classify(err)
		case !ok:
			return nil, errSessionGone // created, then deleted with a session
		}
		s.l.parents.set(key, true)
		s.l.log.Info("zookeeper: create response lost, node found by its uuid", "node", parent+"/"+name)
		// The create's own stat is lost: the listing decides the position.
		return newNode(key, parent, parent+"/"+name, id, &zk.Stat{Mzxid: st.Czxid})
	}
}

// newNode makes the node created at path; parent is the parent's stat
// from the SetData in the node's own transaction: its Mzxid is the node's
// czxid, and one child means ours alone.
func newNode(key, parent, path string, id uuid.UUID, st *zk.Stat) (*node, error) {
	name := path[strings.LastIndexByte(path, '/')+1:]
	seq, ok := parseSeq(name)
	if !ok || st == nil || st.Mzxid <= 0 {
		return nil, fmt.Errorf("unexpected node %q (parent stat %+v)", path, st)
	}
	return &node{key: key, parent: parent, name: name, seq: seq, id: id,
		token: lock.Token(st.Mzxid), first: st.NumChildren == 1}, nil
}

// ensureRoot creates the root path, tolerating a concurrent creator.
func (s *session) ensureRoot() error {
	path := ""
	for _, part := range strings.Split(s.l.cfg.root[1:], "/") {
		path += "/" + part
		if _, err := s.conn.Create(path, nil, 0, s.l.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", path, err)
		}
	}
	return nil
}

// wait returns once n is the lowest waiter of its key.
//
// A node that was its parent's only child when created is lowest at once:
// every other child comes from a later transaction and gets a higher
// sequence. So the uncontended path needs no listing.
//
// Otherwise each pass lists the key's children and watches only the closest
// node ahead, so a release wakes exactly the waiter behind it. A read on our
// own server sees every node with a lower sequence: those were created by
// earlier transactions, and the server had applied ours, hence them, before
// it answered us. The same argument spares the hand-off a listing: when the
// node we watch was the only one ahead, its deletion leaves none ahead (no
// later node can have a lower sequence), so we are lowest without asking.
// Any other event (a data change, a watch ended by a reconnection) lists
// again, as Curator always does.
func (s *session) wait(ctx context.Context, n *node, tryOnce bool) error {
	if n.first {
		s.l.m.queueDepth.Observe(0)
		return nil
	}
	first := true
	for {
		var children []string
		err := s.run(ctx, func() (err error) {
			children, _, err = s.conn.Children(n.parent)
			return err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return errSessionGone // our node and its parent are gone
		case s.retryRead(ctx, err):
			continue
		case err != nil:
			return s.classify(err)
		}
		pos := locate(children, n.name, n.seq)
		if !pos.found {
			// Only a lost session deletes our node (or an operator).
			return errSessionGone
		}
		if first {
			s.l.m.queueDepth.Observe(float64(pos.ahead))
			first = false
		}
		if pos.ahead == 0 {
			return nil
		}
		if tryOnce {
			return lock.ErrNotAcquired
		}
		var watch <-chan zk.Event
		err = s.run(ctx, func() (err error) {
			_, _, watch, err = s.conn.GetW(n.parent + "/" + pos.pred)
			return err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue // gone between the listing and the watch
		case s.retryRead(ctx, err):
			continue
		case err != nil:
			return s.classify(err)
		}
		s.l.m.waiting.Inc()
		select {
		case ev := <-watch:
			s.l.m.waiting.Dec()
			if ev.Type != zk.EventNotWatching { // not the session ending
				s.l.m.wakeups.Inc()
			}
			if ev.Type == zk.EventNodeDeleted && pos.ahead == 1 {
				return nil
			}
		case <-ctx.Done():
			s.l.m.waiting.Dec()
			return ctx.Err()
		case <-s.dead:
			s.l.m.waiting.Dec()
			return errSessionGone
		}
	}
}

// retryPause spaces retries of requests cut off by a disconnect; they wait
// in the client for the reconnection anyway.
const retryPause = 10 * time.Millisecond

// retryRead reports whether a read cut off by a disconnect is worth
// repeating, after a pause: the session, and our node in it, usually
// survive the reconnection to another server.
func (s *session) retryRead(ctx context.Context, err error) bool {
	if !cutOff(err) || s.isGone() {
		return false
	}
	select {
	case <-time.After(retryPause):
		return true
	case <-ctx.Done():
		return false
	case <-s.dead:
		return false
	}
}

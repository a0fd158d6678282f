// Package wake tells a Redis Locker that a key it waits for was just
// released, so its waiter tries again at once rather than at the end of its
// polling pause. Redis has no queue of waiters to hand a lock to: without a
// signal, a released key sits free until some waiter's pause happens to end
// (half the pause on average), while the instance that released it, whose
// next order needs no pause, tends to take it straight back. Both cost a hot
// key most of its throughput. Redisson solves it the same way: the unlock
// publishes, and waiters block on the message with their polling pause as a
// timeout.
//
// The release script publishes the lock's Redis key and the lease id on
// node.ReleasedChannel whenever a holder deletes its lock. A Hub subscribes to that channel on every node
// of its Locker and wakes the waiters of the key named. A signal is only a
// hint: the waiter still has to win an attempt, and a lost message (a node
// down, a lease that expired rather than being released) costs no more than
// the polling pause the waiter would have waited anyway.
package wake

import (
	"context"
	"errors"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock/redis/node"
)

// Hub relays release messages to waiters. It subscribes on first use, so New
// does not connect. It is safe for concurrent use.
type Hub struct {
	nodes []*node.Node

	mu      sync.Mutex
	subs    []*goredis.PubSub // nil until the first Watch
	closed  bool
	waiters map[string]*watch // by lock key
	done    sync.WaitGroup
}

// watch is the waiters of one key. Every node announces a release, so the
// same release arrives up to once per node: only its first message wakes.
type watch struct {
	chans map[chan struct{}]struct{}
	last  string // lease id of the last release relayed
}

// New returns a Hub over the nodes' release messages.
func New(nodes []*node.Node) *Hub {
	return &Hub{nodes: nodes, waiters: make(map[string]*watch)}
}

// Watch registers a waiter for key's releases until stop is called. The
// channel holds at most one signal: releases seen while one is pending are
// one reason to try again, not several.
func (h *Hub) Watch(key string) (woken <-chan struct{}, stop func()) {
	lockKey := node.LockKey(key)
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ch, func() {}
	}
	h.subscribe()
	w := h.waiters[lockKey]
	if w == nil {
		w = &watch{chans: make(map[chan struct{}]struct{})}
		h.waiters[lockKey] = w
	}
	w.chans[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(w.chans, ch)
		if len(w.chans) == 0 && h.waiters[lockKey] == w {
			delete(h.waiters, lockKey)
		}
	}
}

// subscribe starts one subscription per node, once; h.mu is held. A
// subscription that loses its connection reconnects by itself (go-redis),
// so a node that comes back resumes its signals.
func (h *Hub) subscribe() {
	if h.subs != nil {
		return
	}
	for _, n := range h.nodes {
		ps := n.Client().Subscribe(context.Background(), node.ReleasedChannel)
		h.subs = append(h.subs, ps)
		h.done.Add(1)
		go func() {
			defer h.done.Done()
			for m := range ps.Channel() {
				h.notify(m.Payload)
			}
		}()
	}
}

// notify wakes the waiters of the key a release message names, without
// blocking on any of them.
func (h *Hub) notify(msg string) {
	lockKey, id, ok := strings.Cut(msg, " ")
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.waiters[lockKey]
	if w == nil || w.last == id {
		return
	}
	w.last = id
	for ch := range w.chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Close ends the subscriptions and waits for their goroutines.
func (h *Hub) Close() error {
	h.mu.Lock()
	h.closed = true
	subs := h.subs
	h.mu.Unlock()
	var errs []error
	for _, ps := range subs {
		if err := ps.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	h.done.Wait()
	return errors.Join(errs...)
}

package lock

import (
	"errors"
	"fmt"
)

var (
	// ErrNotAcquired means the lock is held by someone else (TryOnce) or the
	// backend refused every attempt before the deadline.
	ErrNotAcquired = errors.New("lock: not acquired")
	// ErrUnavailable means the backend cannot grant locks right now: no quorum,
	// no session, no connection. Callers should retry later.
	ErrUnavailable = errors.New("lock: backend unavailable")
	// ErrLeaseLost means the lease ended without Release: TTL passed without
	// extension, session expired, or quorum lost.
	ErrLeaseLost = errors.New("lock: lease lost")
	// ErrReleased is a released lease's Err.
	ErrReleased = errors.New("lock: lease released")
	// ErrInvalidKey means the key is empty or not usable by the backend.
	ErrInvalidKey = errors.New("lock: invalid key")
	// ErrCleanupPending comes with the error of a call that could not undo,
	// within its bound, what it had done on the lock servers (a server slow
	// to answer the delete): the undo goes on in the background, and the
	// keys may look held until it lands (or their TTL or session ends).
	// Without it, a failed call leaves nothing held.
	ErrCleanupPending = errors.New("lock: clean-up still running in the background")
)

// NodeError is the failure of one node of a multi-node backend. Several are
// combined with errors.Join so a caller can see which nodes failed and why.
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %s: %v", e.Node, e.Err) }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

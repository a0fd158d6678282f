package zklock

import (
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// TestSessionCredentialsExpireTheSession checks that what SessionCredentials
// returns, from a Locker made without any test dialer, is enough for a
// second client to expire the session, and that it then names the new one.
func TestSessionCredentialsExpireTheSession(t *testing.T) {
	servers := sharedZK(t)
	l := mustLocker(t, servers)
	k := key(t)
	lease := mustAcquire(t, l, k) // a lease means the handshake is done

	id, passwd, ok := l.SessionCredentials()
	if !ok || id == 0 || len(passwd) == 0 {
		t.Fatalf("SessionCredentials() = %#x, %d bytes, %v; want a session", id, len(passwd), ok)
	}
	passwd[0] ^= 0xff // the caller's copy: must not reach the Locker's
	if _, again, _ := l.SessionCredentials(); again[0] == passwd[0] {
		t.Fatal("SessionCredentials returned the Locker's own password slice")
	}
	passwd[0] ^= 0xff

	expireSession(t, servers[0], id, passwd)
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5 s after the session was expired with its own credentials")
	}
	if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", lease.Err())
	}
	mustRelease(t, lease)

	// The Locker goes on in a new session, whose credentials it then reports.
	mustRelease(t, mustAcquire(t, l, k))
	next, _, ok := l.SessionCredentials()
	if !ok || next == id {
		t.Fatalf("after expiry: SessionCredentials() = %#x, %v; want a new session (old %#x)", next, ok, id)
	}
}

// TestSessionCredentialsAfterClose reports no session once the Locker is closed.
func TestSessionCredentialsAfterClose(t *testing.T) {
	l := mustLocker(t, sharedZK(t))
	mustRelease(t, mustAcquire(t, l, key(t)))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if id, _, ok := l.SessionCredentials(); ok {
		t.Fatalf("SessionCredentials() after Close = %#x, true", id)
	}
}

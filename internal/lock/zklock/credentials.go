package zklock

import "bytes"

// SessionCredentials returns the id and password of the session the Locker
// holds its nodes in, as the server handed them out in the handshake; ok is
// false before the first handshake, after Close, and while a lost session is
// being replaced.
//
// They exist for fault injection: a second client that presents them takes
// the session over and can close it, which expires the session exactly as a
// partition longer than the timeout would (see loadtest's zk-session-expiry
// scenario). Anyone holding them can end the Locker's session, so they are
// exposed only behind the service's --chaos switch. The tracking dialer that
// New always installs reads them from the connect response, because
// go-zookeeper keeps the password to itself.
func (l *Locker) SessionCredentials() (id int64, password []byte, ok bool) {
	l.mu.Lock()
	s := l.cur
	var sid int64
	if s != nil && !s.gone {
		sid = s.sid
	}
	l.mu.Unlock()
	if sid == 0 {
		return 0, nil, false
	}
	info := s.creds.Load()
	// A handshake that came back with another id means ours expired; its
	// password would not take over the session the nodes belong to.
	if info == nil || info.SessionID != sid {
		return 0, nil, false
	}
	return sid, bytes.Clone(info.Passwd), true
}

package chaos

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/stockguard/stockguard/loadtest/client"
)

// zkSession is the body of GET /debug/zk-session, which an instance serves
// only with --chaos and --lock=zookeeper.
type zkSession struct {
	SessionID    int64  `json:"session_id"`
	SessionIDHex string `json:"session_id_hex"`
	PasswordHex  string `json:"password_hex"`
}

// zkSessionOf asks an instance for the credentials of its ZooKeeper session.
func zkSessionOf(ctx context.Context, c *client.Client, base string) (int64, []byte, error) {
	var s zkSession
	if err := c.GetJSON(ctx, base+"/debug/zk-session", &s); err != nil {
		return 0, nil, fmt.Errorf("zk session of %s: %w", base, err)
	}
	pw, err := hex.DecodeString(s.PasswordHex)
	if err != nil || s.SessionID == 0 {
		return 0, nil, fmt.Errorf("zk session of %s: bad answer %+v", base, s)
	}
	return s.SessionID, pw, nil
}

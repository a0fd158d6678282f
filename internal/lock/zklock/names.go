package zklock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Waiter nodes are named like Curator's protected nodes,
// "_c_<lease uuid>-lock-<sequence>": the uuid lets a client whose create
// response was lost find its node again instead of leaking it, and it is the
// lease's ID, so an operator can tell whose node is whose.
const (
	protectedPrefix = "_c_"
	lockMarker      = "-lock-"
	// maxKeyLen keeps <root>/<key>/<node> far below any server limit.
	maxKeyLen = 200
)

func nodePrefix(id uuid.UUID) string {
	return protectedPrefix + id.String() + lockMarker
}

// checkName accepts what ZooKeeper accepts as one path element.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case name == "." || name == "..":
		return fmt.Errorf("name %q is reserved", name)
	case len(name) > maxKeyLen:
		return fmt.Errorf("name longer than %d bytes", maxKeyLen)
	case !utf8.ValidString(name):
		return errors.New("name is not valid UTF-8")
	}
	for _, r := range name {
		// The server rejects these code points (PathUtils.validatePath),
		// which checks Java's UTF-16 units: a code point past U+FFFF is a
		// surrogate pair there, in the range it refuses.
		if r == '/' || r < 0x20 || (r >= 0x7f && r <= 0x9f) ||
			(r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0 {
			return fmt.Errorf("name %q contains %U", name, r)
		}
	}
	return nil
}

// parseSeq reads the sequence number the server appended to a waiter node.
// The server formats its parent's cversion, a signed 32-bit int, with
// "%010d": after 2^31 creations under one parent the suffix turns negative
// ("-000000001", "-2147483648"). Read back as an unsigned 32-bit number, the
// order stays FIFO across that wrap; zk.Lock's signed parse would put the
// newest waiter first and let it take a held lock.
func parseSeq(name string) (uint64, bool) {
	i := strings.LastIndex(name, "lock-")
	if i < 0 {
		return 0, false
	}
	digits := name[i+len("lock-"):]
	if len(digits) < 10 {
		return 0, false
	}
	v, err := strconv.ParseInt(digits, 10, 32)
	if err != nil {
		return 0, false
	}
	return uint64(uint32(int32(v))), true
}

// position is where one waiter stands in its key's queue.
type position struct {
	found  bool   // the waiter's own node is listed
	ahead  int    // contenders with a lower sequence
	behind int    // contenders with a higher sequence
	pred   string // the closest contender ahead: the only node to watch
}

// locate finds own among the children of a key's parent. Children that do
// not end in a sequence are not contenders and are skipped.
func locate(children []string, own string, ownSeq uint64) position {
	var p position
	var predSeq uint64
	for _, name := range children {
		if name == own {
			p.found = true
			continue
		}
		seq, ok := parseSeq(name)
		if !ok {
			continue
		}
		if seq < ownSeq {
			p.ahead++
			if p.pred == "" || seq > predSeq {
				p.pred, predSeq = name, seq
			}
		} else {
			p.behind++
		}
	}
	return p
}

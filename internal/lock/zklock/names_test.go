package zklock

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/lock/zklock/zkwire"
)

func TestParseSeq(t *testing.T) {
	id := uuid.MustParse("6f1c2a9e-8a4b-4c1d-9e2f-0123456789ab")
	for _, tc := range []struct {
		name string
		want uint64
		ok   bool
	}{
		{nodePrefix(id) + "0000000000", 0, true},
		{nodePrefix(id) + "0000000042", 42, true},
		{nodePrefix(id) + "2147483647", 1<<31 - 1, true},
		// Past 2^31 the server's signed cversion prints negative; unsigned,
		// the order goes on: -2147483648 comes right after 2147483647.
		{nodePrefix(id) + "-2147483648", 1 << 31, true},
		{nodePrefix(id) + "-000000001", 1<<32 - 1, true},
		{"lock-0000000007", 7, true}, // zk.Lock's own nodes still count
		{nodePrefix(id) + "42", 0, false},
		{nodePrefix(id) + "00000000x1", 0, false},
		{"readme", 0, false},
	} {
		got, ok := parseSeq(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseSeq(%q) = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, good := range []string{"sku-1", "A.b:c_d", "x", strings.Repeat("k", maxKeyLen), "zookeeper", "é"} {
		if err := checkName(good); err != nil {
			t.Errorf("checkName(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "/", "a\x00b", "tab\t", "\u0085", "\uf000", "\ufffe",
		string([]byte{0xff}), strings.Repeat("k", maxKeyLen+1)} {
		if err := checkName(bad); err == nil {
			t.Errorf("checkName(%q) = nil, want an error", bad)
		}
	}
}

func TestCheckRoot(t *testing.T) {
	for _, good := range []string{"/stockguard/locks", "/a"} {
		if err := checkRoot(good); err != nil {
			t.Errorf("checkRoot(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", "/", "a/b", "/a/", "/a//b", "/a/../b"} {
		if err := checkRoot(bad); err == nil {
			t.Errorf("checkRoot(%q) = nil, want an error", bad)
		}
	}
}

func TestLocate(t *testing.T) {
	own := "_c_own-lock-0000000005"
	kids := []string{"_c_a-lock-0000000009", "_c_b-lock-0000000001", own, "_c_c-lock-0000000004",
		"_c_d-lock-0000000003", "stray"}
	got := locate(kids, own, 5)
	want := position{found: true, ahead: 3, behind: 1, pred: "_c_c-lock-0000000004"}
	if got != want {
		t.Fatalf("locate = %+v, want %+v", got, want)
	}
	if got := locate(kids[:2], own, 5); got.found {
		t.Fatalf("locate without own node = %+v", got)
	}
	if got := locate([]string{own}, own, 5); got != (position{found: true}) {
		t.Fatalf("locate alone = %+v", got)
	}
}

func TestHandshakeReader(t *testing.T) {
	passwd := []byte("0123456789abcdef")
	var body bytes.Buffer
	for _, v := range []any{int32(0), int32(4000), int64(0x1234), int32(len(passwd))} {
		_ = binary.Write(&body, binary.BigEndian, v)
	}
	body.Write(passwd)
	body.WriteByte(0) // read-only flag
	frame := binary.BigEndian.AppendUint32(nil, uint32(body.Len()))
	frame = append(frame, body.Bytes()...)
	frame = append(frame, 0xde, 0xad) // the next frame's first bytes

	// Fed one byte at a time, as a slow connection may deliver it.
	var h handshakeReader
	var info zkwire.ConnectResponse
	var parsed int
	for i := range frame {
		if got, ok := h.feed(frame[i : i+1]); ok {
			info, parsed = got, parsed+1
		}
	}
	if parsed != 1 {
		t.Fatalf("parsed %d times, want once", parsed)
	}
	if info.SessionID != 0x1234 || info.Timeout != 4*time.Second || !bytes.Equal(info.Passwd, passwd) {
		t.Fatalf("info = %+v", info)
	}
}

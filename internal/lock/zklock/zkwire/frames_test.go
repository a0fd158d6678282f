package zkwire

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestFramesRandomSplits feeds random frames, cut at random points, and
// checks every frame start is reported once, in order, with its size.
func TestFramesRandomSplits(t *testing.T) {
	for iter := 0; iter < 2000; iter++ {
		var stream []byte
		var sizes []int
		var starts [][]byte
		n := 1 + rand.IntN(8)
		for i := 0; i < n; i++ {
			size := rand.IntN(40)
			if i == 0 {
				size = rand.IntN(1500)
			}
			body := make([]byte, size)
			for j := range body {
				body[j] = byte(rand.IntN(256))
			}
			stream = binary.BigEndian.AppendUint32(stream, uint32(size))
			stream = append(stream, body...)
			sizes = append(sizes, size)
			want := min(size, headerSize)
			if i == 0 {
				want = min(size, maxHandshake)
			}
			starts = append(starts, body[:want])
		}
		var f Frames
		var got []Frame
		for p := stream; len(p) > 0; {
			k := 1 + rand.IntN(len(p))
			chunk := p[:k]
			p = p[k:]
			for q := chunk; len(q) > 0; {
				var fr Frame
				var ok bool
				q, fr, ok = f.Next(q)
				if ok {
					fr.Start = bytes.Clone(fr.Start)
					got = append(got, fr)
				}
			}
		}
		if len(got) != n {
			t.Fatalf("iter %d: %d frames, want %d (sizes %v)", iter, len(got), n, sizes)
		}
		for i, fr := range got {
			if fr.Index != i || fr.Size != sizes[i] || !bytes.Equal(fr.Start, starts[i]) {
				t.Fatalf("iter %d: frame %d = %+v, want size %d start %x", iter, i, fr, sizes[i], starts[i])
			}
		}
	}
}

package records

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs [][]byte
		size int
	}{
		{"empty", nil, 4},
		{"one", [][]byte{[]byte("abcd")}, 4},
		{"three", [][]byte{[]byte("abc"), []byte("def"), []byte("ghi")}, 3},
		{"zero-size records", [][]byte{{}, {}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Begin([]byte("prefix"), len(tc.recs), tc.size)
			for _, r := range tc.recs {
				b = append(b, r...)
			}
			if len(b) != len("prefix")+Size(len(tc.recs), tc.size) {
				t.Fatalf("batch of %d bytes, Size says %d", len(b)-len("prefix"), Size(len(tc.recs), tc.size))
			}
			got, err := Parse(b[len("prefix"):], tc.size, len(tc.recs))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.recs) {
				t.Fatalf("%d records, want %d", len(got), len(tc.recs))
			}
			for i := range got {
				if !bytes.Equal(got[i], tc.recs[i]) || cap(got[i]) != tc.size {
					t.Errorf("record %d = %q (cap %d), want %q", i, got[i], cap(got[i]), tc.recs[i])
				}
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	batch := Begin(nil, 2, 3)
	batch = append(batch, "abcdef"...)
	for _, tc := range []struct {
		name  string
		b     []byte
		limit int
		want  error
	}{
		{"no count", []byte{0, 0}, 8, ErrLength},
		{"short", batch[:len(batch)-1], 8, ErrLength},
		{"long", append(bytes.Clone(batch), 'x'), 8, ErrLength},
		{"above the limit", batch, 1, ErrCount},
		{"huge count", []byte{0xff, 0xff, 0xff, 0xff}, 1 << 40, ErrLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.b, 3, tc.limit); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := Split([]byte("abcde"), 2, 8); !errors.Is(err, ErrLength) {
		t.Errorf("Split of a partial record: %v, want %v", err, ErrLength)
	}
	if _, err := Split([]byte("abcdef"), 2, 2); !errors.Is(err, ErrCount) {
		t.Errorf("Split above the limit: %v, want %v", err, ErrCount)
	}
	if got, err := Split([]byte("abcdef"), 2, 3); err != nil || len(got) != 3 || string(got[2]) != "ef" || cap(got[0]) != 2 {
		t.Errorf("Split = %q, %v", got, err)
	}
}

// FuzzParse: any input either fails or yields at most limit records of exactly size bytes that
// are b after the count, in order.
func FuzzParse(f *testing.F) {
	f.Add(append(Begin(nil, 2, 3), "abcdef"...), 3, 4)
	f.Add([]byte{0, 0, 0, 1}, 0, 1)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1}, 1, 1<<20)
	f.Fuzz(func(t *testing.T, b []byte, size, limit int) {
		if size < 0 || size > 1<<16 {
			return
		}
		recs, err := Parse(b, size, limit)
		if err != nil {
			return
		}
		if len(recs) > max(limit, 0) {
			t.Fatalf("%d records above the limit %d", len(recs), limit)
		}
		var joined []byte
		for _, r := range recs {
			if len(r) != size || cap(r) != size {
				t.Fatalf("record of %d bytes (cap %d), want %d", len(r), cap(r), size)
			}
			joined = append(joined, r...)
		}
		if !bytes.Equal(joined, b[4:]) {
			t.Fatal("the records are not the batch after its count")
		}
	})
}

// FuzzSplit: any input either fails or is cut into whole records of size bytes.
func FuzzSplit(f *testing.F) {
	f.Add([]byte("abcdef"), 2, 3)
	f.Fuzz(func(t *testing.T, b []byte, size, limit int) {
		recs, err := Split(b, size, limit)
		if err != nil {
			return
		}
		var joined []byte
		for _, r := range recs {
			if len(r) != size {
				t.Fatalf("record of %d bytes, want %d", len(r), size)
			}
			joined = append(joined, r...)
		}
		if len(recs) > max(limit, 0) || !bytes.Equal(joined, b) {
			t.Fatalf("%d records (limit %d) do not make up the input", len(recs), limit)
		}
	})
}

package lois

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"testing"
)

// Benchmarks for docs/benchmarks.md (LOIS section), spec §6.5 and T21. Each role's transform
// is timed alone on one packet buffer whose 40- or 52-byte header is restored per iteration
// (the transforms move only the header, so the payload stays put); tables and pools are
// refilled with the timer stopped. Baselines encrypt the whole packet.

var benchSizes = []int{64, 128, 256, 512, 1024, 1500}

var (
	bCIP = [4]byte{203, 0, 113, 7}
	bDIP = [4]byte{198, 51, 100, 23}
)

const bNow = int64(1_800_000_000)

func benchPairs(n int, seed byte) []Pair {
	s := &Stream{Key: [32]byte{seed}, N: uint32(n + n/64 + 8)}
	return s.Pairs(nil, 1, 0)[:n]
}

// rawPacket writes an IPv4/TCP packet of total length size at buf[Headroom:].
func rawPacket(src, dst [4]byte, sport, dport uint16, size int) []byte {
	buf := make([]byte, Headroom+size)
	p := buf[Headroom:]
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[ipTotLen:], uint16(size))
	p[ipFlags] = 0x40
	p[ipTTL] = 64
	p[ipProto] = protoTCP
	copy(p[ipSrc:], src[:])
	copy(p[ipDst:], dst[:])
	binary.BigEndian.PutUint16(p[tcpSport:], sport)
	binary.BigEndian.PutUint16(p[tcpDport:], dport)
	binary.BigEndian.PutUint32(p[tcpSeq:], 0x01020304)
	binary.BigEndian.PutUint32(p[tcpAck:], 0x0a0b0c0d)
	p[tcpDoff] = 5 << 4
	p[tcpFlags] = 0x18
	for i := fixedHdr; i < size; i++ {
		p[i] = byte(i)
	}
	FixChecksums(p)
	return buf
}

func refill(p *Pool, pairs []Pair) {
	for _, pr := range pairs {
		p.push(pr)
	}
	p.epochs = []poolEpoch{{end: math.MaxUint64, stopAt: math.MaxInt64}}
}

// BenchmarkDIUpload is DI upload hide (hardened: includes IP ID/TTL normalisation).
func BenchmarkDIUpload(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			dt, _ := NewDVT(DVTConfig{TableCapacity: 1024})
			dev := NewDevice(Config{CIP: bCIP}, dt)
			pairs := benchPairs(1<<16, 1)
			pool := &Pool{}
			dev.Up.Set(80, pool)
			buf := rawPacket(bDIP, bCIP, 40000, 80, size)
			var hdr [fixedHdr]byte
			copy(hdr[:], buf[Headroom:])
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			cpu := startCPU()
			defer cpu.report(b)
			for range b.N {
				if pool.n == 0 {
					cpu.pause() // outside StopTimer, whose ReadMemStats is not the transform's cost
					b.StopTimer()
					refill(pool, pairs)
					b.StartTimer()
					cpu.resume()
				}
				copy(buf[Headroom:], hdr[:])
				if _, err := dev.HideUpload(buf, Headroom, bNow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// receiverBench times a receiving transform over a table of entries ids, consuming (delete on
// use) keys in random order and re-inserting them with the timer stopped.
type receiverBench struct {
	table *DVT
	pairs []Pair
	hdr   [fixedHdr + OptionLen]byte
	buf   []byte
}

// benchTables caches the receiver tables by size: building 10⁶ entries dominates setup, and
// the benchmark function runs once per b.N round.
var benchTables = map[int]*receiverBench{}

func newReceiverBench(b *testing.B, entries int, wire []byte) *receiverBench {
	if c := benchTables[entries]; c != nil {
		rb := &receiverBench{table: c.table, pairs: c.pairs, buf: wire}
		copy(rb.hdr[:], wire)
		return rb
	}
	rb := &receiverBench{buf: wire}
	rb.table, _ = NewDVT(DVTConfig{TableCapacity: entries, Key: [16]byte{1}})
	rb.pairs = benchPairs(entries, 2)
	for _, p := range rb.pairs {
		if err := rb.table.Insert(p.ID, &p.KS, 80, bNow+3600); err != nil {
			b.Fatal(err)
		}
	}
	mrand.New(mrand.NewPCG(1, 2)).Shuffle(len(rb.pairs), func(i, j int) { rb.pairs[i], rb.pairs[j] = rb.pairs[j], rb.pairs[i] })
	copy(rb.hdr[:], wire)
	benchTables[entries] = rb
	return rb
}

// wirePacket is a hidden upload (or download) packet of total length size+12 at buf[0:].
func wirePacket(size int, download bool) []byte {
	dt, _ := NewDVT(DVTConfig{TableCapacity: 64})
	cfg := Config{CIP: bCIP}
	p := Pair{ID: 1}
	if download {
		s := NewServer(cfg, dt, map[uint16]uint16{8080: 80})
		buf := rawPacket([4]byte{10, 0, 0, 1}, bDIP, 8080, 40000, size)
		pool := &Pool{}
		refill(pool, []Pair{p})
		n, err := s.HideDownload(buf, Headroom, pools80(pool), bNow)
		if err != nil {
			panic(err)
		}
		return buf[n:]
	}
	dev := NewDevice(cfg, dt)
	pool := &Pool{}
	refill(pool, []Pair{p})
	dev.Up.Set(80, pool)
	buf := rawPacket(bDIP, bCIP, 40000, 80, size)
	n, err := dev.HideUpload(buf, Headroom, bNow)
	if err != nil {
		panic(err)
	}
	return buf[n:]
}

func (rb *receiverBench) run(b *testing.B, size int, fn func(buf []byte) error) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	k := 0
	for range b.N {
		if k == len(rb.pairs) {
			cpu.pause()
			b.StopTimer()
			for _, p := range rb.pairs {
				rb.table.Insert(p.ID, &p.KS, 80, bNow+3600)
			}
			k = 0
			b.StartTimer()
			cpu.resume()
		}
		copy(rb.buf, rb.hdr[:])
		binary.BigEndian.PutUint64(rb.buf[tcpOptions+4:], rb.pairs[k].ID)
		k++
		if err := fn(rb.buf); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
	b.StopTimer()
	for _, p := range rb.pairs[:k] { // leave the cached table whole for the next round
		rb.table.Insert(p.ID, &p.KS, 80, bNow+3600)
	}
}

// BenchmarkCI is CI lookup + in-memory source decryption + Maglev + destination rewrite, at
// 10⁶ entries for each packet size and at 10³–10⁶ entries for 64-byte packets.
func BenchmarkCI(b *testing.B) {
	cases := []struct{ entries, size int }{{1e3, 64}, {1e4, 64}, {1e5, 64}}
	for _, s := range benchSizes {
		cases = append(cases, struct{ entries, size int }{1e6, s})
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("entries=%d/size=%d", c.entries, c.size), func(b *testing.B) {
			wire := wirePacket(c.size, false)
			rb := newReceiverBench(b, c.entries, wire)
			ci := NewCloud(Config{CIP: bCIP}, rb.table, [16]byte{7})
			mg, _ := NewMaglev([]Backend{{IP: [4]byte{10, 0, 0, 1}, Port: 8080}, {IP: [4]byte{10, 0, 0, 2}, Port: 8080}})
			ci.SetBackends(80, mg)
			rb.run(b, c.size, func(buf []byte) error { _, err := ci.Forward(buf); return err })
		})
	}
}

// BenchmarkCIBatch is BenchmarkCI through ForwardBatch, BatchSize packets per call (a CI
// that reads its wire with recvmmsg gets such bursts); ns/op is per packet.
func BenchmarkCIBatch(b *testing.B) {
	for _, entries := range []int{1e3, 1e4, 1e5, 1e6} {
		for _, size := range []int{64, 1500} {
			if entries != 1e6 && size != 64 {
				continue
			}
			b.Run(fmt.Sprintf("entries=%d/size=%d", entries, size), func(b *testing.B) {
				wire := wirePacket(size, false)
				rb := newReceiverBench(b, entries, wire)
				ci := NewCloud(Config{CIP: bCIP}, rb.table, [16]byte{7})
				mg, _ := NewMaglev([]Backend{{IP: [4]byte{10, 0, 0, 1}, Port: 8080}, {IP: [4]byte{10, 0, 0, 2}, Port: 8080}})
				ci.SetBackends(80, mg)
				pkts := make([][]byte, BatchSize)
				for i := range pkts {
					pkts[i] = append([]byte(nil), wire...)
				}
				var out [BatchSize]Backend
				var errs [BatchSize]error
				k := 0
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				cpu := startCPU()
				for i := 0; i < b.N; i += BatchSize {
					n := min(BatchSize, b.N-i)
					if k+n > len(rb.pairs) {
						cpu.pause()
						b.StopTimer()
						for _, p := range rb.pairs[:k] {
							rb.table.Insert(p.ID, &p.KS, 80, bNow+3600)
						}
						k = 0
						b.StartTimer()
						cpu.resume()
					}
					for j := range n {
						copy(pkts[j], rb.hdr[:])
						binary.BigEndian.PutUint64(pkts[j][tcpOptions+4:], rb.pairs[k].ID)
						k++
					}
					ci.ForwardBatch(pkts[:n], out[:n], errs[:n])
					for _, err := range errs[:n] {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				cpu.report(b)
				b.StopTimer()
				for _, p := range rb.pairs[:k] {
					rb.table.Insert(p.ID, &p.KS, 80, bNow+3600)
				}
			})
		}
	}
}

// BenchmarkSIUpload is SI upload recovery over a table of 10⁴ entries (its services' share).
func BenchmarkSIUpload(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			wire := wirePacket(size, false)
			binary.BigEndian.PutUint16(wire[tcpDport:], 8080) // as CI leaves it
			copy(wire[ipDst:], []byte{10, 0, 0, 1})
			buf := append([]byte(nil), wire...)
			rb := newReceiverBench(b, 1e4, buf)
			si := NewServer(Config{CIP: bCIP}, rb.table, map[uint16]uint16{8080: 80})
			rb.run(b, size, func(buf []byte) error { _, _, err := si.RecoverUpload(buf, 0); return ignorePad(err) })
		})
	}
}

// BenchmarkDIDownload is DI download recovery over a download table of 10⁴ entries.
func BenchmarkDIDownload(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			wire := wirePacket(size, true)
			buf := append([]byte(nil), wire...)
			rb := newReceiverBench(b, 1e4, buf)
			dev := NewDevice(Config{CIP: bCIP}, rb.table)
			rb.run(b, size, func(buf []byte) error { _, _, err := dev.RecoverDownload(buf, 0); return ignorePad(err) })
		})
	}
}

// BenchmarkSIDownload is SI download hide (reverse translation, hardening, option insert).
func BenchmarkSIDownload(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			dt, _ := NewDVT(DVTConfig{TableCapacity: 64})
			si := NewServer(Config{CIP: bCIP}, dt, map[uint16]uint16{8080: 80})
			pairs := benchPairs(1<<16, 3)
			pool := &Pool{}
			pools := pools80(pool)
			buf := rawPacket([4]byte{10, 0, 0, 1}, bDIP, 8080, 40000, size)
			var hdr [fixedHdr]byte
			copy(hdr[:], buf[Headroom:])
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			cpu := startCPU()
			defer cpu.report(b)
			for range b.N {
				if pool.n == 0 {
					cpu.pause() // outside StopTimer, whose ReadMemStats is not the transform's cost
					b.StopTimer()
					refill(pool, pairs)
					b.StartTimer()
					cpu.resume()
				}
				copy(buf[Headroom:], hdr[:])
				if _, err := si.HideDownload(buf, Headroom, pools, bNow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBaselineGCM encrypts and authenticates the whole packet with AES-128-GCM.
func BenchmarkBaselineGCM(b *testing.B) {
	blk, _ := aes.NewCipher(make([]byte, 16))
	aead, _ := cipher.NewGCM(blk)
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			pkt := make([]byte, size, size+aead.Overhead())
			nonce := make([]byte, aead.NonceSize())
			b.SetBytes(int64(size))
			b.ReportAllocs()
			cpu := startCPU()
			defer cpu.report(b)
			for b.Loop() {
				nonce[0]++
				aead.Seal(pkt[:0], nonce, pkt[:size], nil)
			}
		})
	}
}

// BenchmarkBaselineCBCHMAC is the paper's IPsec baseline (ESP with AES-128-CBC and
// HMAC-SHA1-96) over the whole packet: pad to the block, encrypt, MAC the ciphertext.
func BenchmarkBaselineCBCHMAC(b *testing.B) {
	blk, _ := aes.NewCipher(make([]byte, 16))
	mac := hmac.New(sha1.New, make([]byte, 20))
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			n := (size + 2 + 15) / 16 * 16
			pkt := make([]byte, n)
			iv := make([]byte, 16)
			enc := cipher.NewCBCEncrypter(blk, iv)
			setIV := enc.(interface{ SetIV([]byte) })
			var tag [sha1.Size]byte
			b.SetBytes(int64(size))
			b.ReportAllocs()
			cpu := startCPU()
			defer cpu.report(b)
			for b.Loop() {
				iv[0]++
				setIV.SetIV(iv)
				enc.CryptBlocks(pkt, pkt)
				mac.Reset()
				mac.Write(pkt)
				mac.Sum(tag[:0])
			}
		})
	}
}

// BenchmarkKeystreamInit is Fig. 10a: generating keystreams from a stream key and
// dedup-inserting them (DVT + DVF) at the registrar, per keystream, with 64- and 32-bit ids.
func BenchmarkKeystreamInit(b *testing.B) {
	for _, idBytes := range []int{8, 4} {
		for _, n := range []int{1e4, 1e5, 1e6} {
			b.Run(fmt.Sprintf("id=%dbit/n=%d", idBytes*8, n), func(b *testing.B) {
				key := [32]byte{byte(n)}
				cpu := startCPU()
				for b.Loop() {
					d, _ := NewDVT(DVTConfig{TableCapacity: n, Dedup: true, Key: [16]byte{1}})
					generate(&key, uint32(n), idBytes, func(_ uint32, id uint64, ks []byte) bool {
						d.InsertChecked(id, (*[16]byte)(ks), 80, 0)
						return true
					})
				}
				cpu.report(b)
				mops := float64(n) * float64(b.N) / b.Elapsed().Seconds() / 1e6
				b.ReportMetric(mops, "MOPS")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/keystream")
			})
		}
	}
}

// BenchmarkLookup is Fig. 10b: positive lookups in a one-table DVT of n entries, in insertion
// order (sequential) and in random order.
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1e3, 1e4, 1e5, 1e6} {
		pairs := benchPairs(n, 4)
		d, _ := NewDVT(DVTConfig{TableCapacity: n, Key: [16]byte{1}})
		for _, p := range pairs {
			d.Insert(p.ID, &p.KS, 80, 0)
		}
		ids := make([]uint64, n)
		for i, p := range pairs {
			ids[i] = p.ID
		}
		shuffled := append([]uint64(nil), ids...)
		mrand.New(mrand.NewPCG(3, 4)).Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for _, order := range []struct {
			name string
			ids  []uint64
		}{{"sequential", ids}, {"random", shuffled}} {
			b.Run(fmt.Sprintf("n=%d/%s", n, order.name), func(b *testing.B) {
				k := 0
				cpu := startCPU()
				defer cpu.report(b)
				for b.Loop() {
					if _, _, _, ok := d.Lookup(order.ids[k]); !ok {
						b.Fatal("miss")
					}
					k++
					if k == n {
						k = 0
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "MOPS")
			})
		}
	}
}

// BenchmarkDIMemory reports what a DI holds for 10⁴ keystreams split evenly between the
// directions (spec §5 memory model): 5000 upload pairs in its pool (24 B each) and a
// download DVT sized for 5000 entries (exact: 28 B per slot; 16-bit: 20 B), by count and by
// measured heap growth.
func BenchmarkDIMemory(b *testing.B) {
	for _, fp16 := range []bool{false, true} {
		b.Run(fmt.Sprintf("fp16=%v", fp16), func(b *testing.B) {
			var counted, heap float64
			for b.Loop() {
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				up := &Stream{Key: [32]byte{1}, N: 5000, Expiry: bNow}
				down := &Stream{Key: [32]byte{2}, N: 5000, Dir: Down, Expiry: bNow}
				pool := &Pool{}
				pool.Add(up, 1, 0, bNow)
				d, _ := NewDVT(DVTConfig{TableCapacity: 5000, Fingerprint16: fp16})
				// Without the registrar's dup list a 16-bit table refuses the odd pair that
				// shares a bucket pair and fingerprint; it would be on the list.
				down.Each(1, 0, func(_ uint32, p Pair) bool { d.Insert(p.ID, &p.KS, 80, bNow); return true })
				runtime.GC()
				runtime.ReadMemStats(&m1)
				counted = float64(pool.Bytes() + d.Stats().Bytes)
				heap = float64(m1.HeapAlloc - m0.HeapAlloc)
				runtime.KeepAlive(pool)
				runtime.KeepAlive(d)
			}
			b.ReportMetric(counted/1e6, "MB/1e4ks")
			b.ReportMetric(heap/1e6, "heapMB/1e4ks")
		})
	}
}

func pools80(p *Pool) *Pools {
	ps := &Pools{}
	ps.Set(80, p)
	return ps
}

// ignorePad: the bench packets decrypt under random keystreams, so some carry the pad
// marker; the transform has run in full either way.
func ignorePad(err error) error {
	if err == ErrPad {
		return nil
	}
	return err
}

package roles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
)

// clock is the unix second the transforms are given: read once per tick, not per packet.
type clock struct{ s atomic.Int64 }

func (c *clock) now() int64      { return c.s.Load() }
func (c *clock) set(t time.Time) { c.s.Store(t.Unix()) }

// run runs the role's packet loops and its maintenance tick until ctx ends or a loop fails,
// then closes the descriptors (which ends every pending read) and waits for the loops.
func run(ctx context.Context, log *slog.Logger, closers []io.Closer, tick func(time.Time), loops ...func() error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(loops))
	for _, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l(); err != nil && ctx.Err() == nil {
				errc <- err
				cancel()
			}
		}()
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case now := <-t.C:
			tick(now)
		}
	}
	for _, c := range closers {
		c.Close()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		log.Info("packet loops stopped")
		return nil
	}
}

// closed reports whether err comes from closing the descriptor at shutdown.
func closed(err error) bool {
	return errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed)
}

// receiver is the receiving half of the DI (downloads) and the SI (uploads): datagrams from
// the wire are recovered under the table's lock (unless plain), counted by result, and the
// recovered packet is written to the TUN. A replay of a recently consumed id is told apart
// from an unknown one (rejection).
type receiver struct {
	wire  *net.UDPConn
	tun   io.Writer
	plain bool
	ex    uint16
	table *lockedDVT
	c     counters
	seen  *recentIDs
	// batch > 1 reads the wire in bursts of up to batch datagrams (recvmmsg), recovered
	// under one hold of the table's lock.
	batch int
}

// run reads until the wire is closed (nil) or fails. recover returns the offset of the
// recovered packet in its buffer.
func (r receiver) run(recover func([]byte) (int, error)) error {
	if r.batch > 1 {
		b, err := newWireBatch(r.wire, r.batch, contract.MaxDatagram)
		if err == nil {
			return r.runBatch(b, recover)
		}
	}
	buf := make([]byte, contract.MaxDatagram)
	for {
		n, _, err := r.wire.ReadFromUDPAddrPort(buf)
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
		id, _ := lois.ParseID(buf[:n], r.ex)
		off := 0
		if !r.plain {
			r.table.mu.Lock()
			off, err = recover(buf[:n])
			r.table.mu.Unlock()
		}
		if err != nil {
			r.c.inc(rejection(err, id, r.seen))
			continue
		}
		r.seen.add(id)
		if _, err := r.tun.Write(buf[off:n]); err != nil {
			r.c.inc(contract.ResultIOError)
			continue
		}
		r.c.inc(contract.ResultOK)
	}
}

// runBatch is run over bursts: one recvmmsg, the burst's packets recovered in order under
// one hold of the table's lock, then written to the TUN one by one (a TUN write takes one
// packet) and counted as run counts them.
func (r receiver) runBatch(b *wireBatch, recover func([]byte) (int, error)) error {
	n := len(b.bufs)
	offs, ids, errs := make([]int, n), make([]uint64, n), make([]error, n)
	for {
		k, err := b.read()
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
		for i := range k {
			ids[i], _ = lois.ParseID(b.bufs[i][:b.size(i)], r.ex)
			offs[i], errs[i] = 0, nil
		}
		if !r.plain {
			r.table.mu.Lock()
			for i := range k {
				offs[i], errs[i] = recover(b.bufs[i][:b.size(i)])
			}
			r.table.mu.Unlock()
		}
		for i := range k {
			if errs[i] != nil {
				r.c.inc(rejection(errs[i], ids[i], r.seen))
				continue
			}
			r.seen.add(ids[i])
			if _, err := r.tun.Write(b.bufs[i][offs[i]:b.size(i)]); err != nil {
				r.c.inc(contract.ResultIOError)
				continue
			}
			r.c.inc(contract.ResultOK)
		}
	}
}

// lockedDVT guards a receiver's table: the packet loop takes entries, the tick collects
// expired ones (a DVT is not safe for concurrent use).
type lockedDVT struct {
	mu sync.Mutex
	t  *lois.DVT
}

func (l *lockedDVT) gc(now int64, m *Metrics, dir string) {
	l.mu.Lock()
	n := l.t.GC(now)
	st := l.t.Stats()
	l.mu.Unlock()
	m.GC.Add(float64(n))
	m.DVT.WithLabelValues(dir).Set(float64(st.Entries))
	m.DVTBytes.WithLabelValues(dir).Set(float64(st.Bytes))
}

// newTable returns a receiver's table sized for the streams of keys in direction dir.
func newTable(keys []*contract.Keys, dir string, grace int64) (*lois.DVT, error) {
	n := 0
	cfg := lois.DVTConfig{Grace: grace}
	for _, k := range keys {
		for _, s := range k.Streams {
			if s.Dir == dir {
				n += int(s.N)
			}
		}
	}
	cfg.TableCapacity = max(1024, n)
	return lois.NewDVT(cfg)
}

// install puts the streams of keys in direction dir into t.
func install(t *lois.DVT, keys []*contract.Keys, dir string, sids func(uint16) bool) (int, error) {
	n := 0
	for _, k := range keys {
		for i := range k.Streams {
			if k.Streams[i].Dir != dir || (sids != nil && !sids(k.Streams[i].SID)) {
				continue
			}
			s, err := k.Streams[i].Core()
			if err != nil {
				return n, err
			}
			err = t.Install(&s)
			clear(s.Key[:])
			if err != nil {
				return n, err
			}
			n += int(s.N) - len(s.Dup)
		}
	}
	return n, nil
}

// exID is the option ExID of cfg.
func exID(cfg lois.Config) uint16 {
	if cfg.ExID == 0 {
		return lois.DefaultExID
	}
	return cfg.ExID
}

// recordKey names a session record (its session) or an epoch record (session/epoch): a
// replica installs each once, however often it is delivered.
func recordKey(k *contract.Keys) string {
	if k.Ready {
		return k.Session + "/ready"
	}
	if !k.Grant || len(k.Streams) == 0 {
		return k.Session
	}
	return fmt.Sprintf("%s/%d", k.Session, k.Streams[0].Epoch)
}

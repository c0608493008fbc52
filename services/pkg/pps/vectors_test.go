package pps

import (
	"bytes"
	"crypto/ecdh"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// vectorDoc is the JSON printed by testdata/libsodium_vectors.py.
type vectorDoc struct {
	PyNaCl string `json:"pynacl"`
	PRG    []struct {
		Seed, Out hexBytes
		N         int
	}
	PRF []struct {
		Key, Out hexBytes
		Label    string
	}
	Ratchet []struct {
		K0    hexBytes   `json:"k0"`
		Seeds []hexBytes `json:"seeds"`
		Key6  hexBytes   `json:"key6"`
	}
	Labels []struct {
		Seed      hexBytes
		Values    []int32
		W0, W1    []hexBytes
		Published hexBytes
	}
	KX []struct {
		ClientSK hexBytes `json:"client_sk"`
		ServerSK hexBytes `json:"server_sk"`
		ClientPK hexBytes `json:"client_pk"`
		ServerPK hexBytes `json:"server_pk"`
		ClientRx hexBytes `json:"client_rx"`
		ClientTx hexBytes `json:"client_tx"`
		ServerRx hexBytes `json:"server_rx"`
		ServerTx hexBytes `json:"server_tx"`
		PubK0    hexBytes `json:"pub_k0"`
	}
	Unmask []struct {
		Seed, Masked, O hexBytes
		Bits            int
	}
	SealedKey []struct {
		Key    hexBytes `json:"key"`
		FnKey  hexBytes `json:"fn_key"`
		Round  uint64   `json:"round"`
		Epoch  uint64   `json:"epoch"`
		AD     hexBytes `json:"ad"`
		Sealed hexBytes `json:"sealed"`
	} `json:"sealed_key"`
}

type hexBytes []byte

func (h *hexBytes) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := hex.DecodeString(s)
	*h = v
	return err
}

func (h hexBytes) seed(t *testing.T) *Seed {
	t.Helper()
	if len(h) != SeedSize {
		t.Fatalf("vector seed has %d bytes", len(h))
	}
	var s Seed
	copy(s[:], h)
	return &s
}

// venvPython is the project's Python with PyNaCl: $OBSCURA_BIN/venv/bin/python (the Makefile
// exports OBSCURA_BIN), else bin/venv/bin/python at the repository root.
func venvPython(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("OBSCURA_BIN"); bin != "" {
		return filepath.Join(bin, "venv", "bin", "python")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return filepath.Join(dir, "bin", "venv", "bin", "python")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.work above %s and OBSCURA_BIN unset: cannot find bin/venv", dir)
		}
		dir = parent
	}
}

// libsodiumVectors runs testdata/libsodium_vectors.py under the venv's Python. A missing
// interpreter or PyNaCl fails the test (spec §10 #4 is not optional); only -short skips.
func libsodiumVectors(t *testing.T) *vectorDoc {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the libsodium vectors need bin/venv with PyNaCl")
	}
	py := venvPython(t)
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("libsodium vectors need %s with PyNaCl: run hack/tools.sh pynacl (or make tools): %v", py, err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "libsodium_vectors.py"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		t.Fatalf("PyNaCl is missing from %s: run hack/tools.sh pynacl (or make tools): %s", py, stderr.String())
	}
	if err != nil {
		t.Fatalf("run %s testdata/libsodium_vectors.py: %v\n%s", py, err, stderr.String())
	}
	var doc vectorDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("parse libsodium vectors: %v", err)
	}
	if len(doc.PRG) == 0 || len(doc.KX) == 0 {
		t.Fatalf("libsodium vectors are empty")
	}
	return &doc
}

func TestLibsodiumVectors(t *testing.T) {
	doc := libsodiumVectors(t)
	t.Logf("vectors from PyNaCl %s", doc.PyNaCl)

	t.Run("PRG is randombytes_buf_deterministic", func(t *testing.T) {
		for _, v := range doc.PRG {
			got := make([]byte, v.N)
			PRG(v.Seed.seed(t), got)
			if !bytes.Equal(got, v.Out) {
				t.Errorf("PRG(%x, %d) = %x, libsodium %x", v.Seed, v.N, got, v.Out)
			}
			for pos := 0; (pos+1)*LabelSize <= v.N; pos += 3 {
				if b := PRGBlock(v.Seed.seed(t), uint64(pos)); !bytes.Equal(b[:], v.Out[pos*LabelSize:(pos+1)*LabelSize]) {
					t.Errorf("PRGBlock(%x, %d) = %x, libsodium block %x", v.Seed, pos, b, v.Out[pos*LabelSize:(pos+1)*LabelSize])
				}
			}
		}
	})
	t.Run("PRF is keyed crypto_generichash", func(t *testing.T) {
		for _, v := range doc.PRF {
			if got := PRF(v.Key.seed(t), v.Label); !bytes.Equal(got[:], v.Out) {
				t.Errorf("PRF(%x, %q) = %x, libsodium %x", v.Key, v.Label, got, v.Out)
			}
		}
	})
	t.Run("ratchet seeds and keys", func(t *testing.T) {
		for _, v := range doc.Ratchet {
			r := NewRatchet(v.K0.seed(t), 0, RatchetOptions{})
			for i, want := range v.Seeds {
				s, err := r.AdvanceTo(uint64(i))
				if err != nil || !bytes.Equal(s[:], want) {
					t.Errorf("seed round %d = %x, %v; libsodium %x", i, s, err, want)
				}
			}
			r.Advance()
			if k, round := r.Export(); round != 6 || !bytes.Equal(k[:], v.Key6) {
				t.Errorf("K_6 = %x at round %d; libsodium %x", k, round, v.Key6)
			}
		}
	})
	t.Run("labels with the lsb forced", func(t *testing.T) {
		for _, v := range doc.Labels {
			pairs := DeriveLabels(v.Seed.seed(t), len(v.Values))
			for i, p := range pairs {
				if !bytes.Equal(p[0][:], v.W0[i]) || !bytes.Equal(p[1][:], v.W1[i]) {
					t.Errorf("labels %d of seed %x = (%x, %x), libsodium (%x, %x)", i, v.Seed, p[0], p[1], v.W0[i], v.W1[i])
				}
			}
			for k := range v.Values {
				vl := ValueLabels(v.Seed.seed(t), k)
				for j := range vl {
					if vl[j] != pairs[k*ValueBits+j] {
						t.Errorf("ValueLabels(%d)[%d] differs from DeriveLabels", k, j)
					}
				}
			}
			xs := make([]Fixed, len(v.Values))
			for i, x := range v.Values {
				xs[i] = Fixed(x)
			}
			if got := PublishLabels(v.Seed.seed(t), xs); !bytes.Equal(got, v.Published) {
				t.Errorf("PublishLabels(%v) differs from the libsodium publisher", v.Values)
			}
		}
	})
	t.Run("crypto_kx session keys and K_0", func(t *testing.T) {
		for _, v := range doc.KX {
			c, err := ecdh.X25519().NewPrivateKey(v.ClientSK)
			if err != nil {
				t.Fatal(err)
			}
			s, err := ecdh.X25519().NewPrivateKey(v.ServerSK)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(c.PublicKey().Bytes(), v.ClientPK) || !bytes.Equal(s.PublicKey().Bytes(), v.ServerPK) {
				t.Fatalf("X25519 public keys differ from crypto_scalarmult_base")
			}
			ck, err := ClientSessionKeys(c, v.ServerPK)
			if err != nil {
				t.Fatal(err)
			}
			sk, err := ServerSessionKeys(s, v.ClientPK)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ck.ServerToClient[:], v.ClientRx) || !bytes.Equal(ck.ClientToServer[:], v.ClientTx) {
				t.Errorf("client keys (rx %x, tx %x), libsodium (%x, %x)", ck.ServerToClient, ck.ClientToServer, v.ClientRx, v.ClientTx)
			}
			if !bytes.Equal(sk.ClientToServer[:], v.ServerRx) || !bytes.Equal(sk.ServerToClient[:], v.ServerTx) {
				t.Errorf("server keys (rx %x, tx %x), libsodium (%x, %x)", sk.ClientToServer, sk.ServerToClient, v.ServerRx, v.ServerTx)
			}
			if k0 := PublisherRatchetKey(&ck); !bytes.Equal(k0[:], v.PubK0) {
				t.Errorf("publisher K_0 = %x, libsodium %x", k0, v.PubK0)
			}
		}
	})
	t.Run("subscriber unmask", func(t *testing.T) {
		for _, v := range doc.Unmask {
			o, err := Unmask(v.Seed.seed(t), v.Masked, v.Bits)
			if err != nil || !bytes.Equal(o, v.O) {
				t.Errorf("Unmask(%d bits) = %x, %v; libsodium %x", v.Bits, o, err, v.O)
			}
		}
	})
	t.Run("sealed function key", func(t *testing.T) {
		for _, v := range doc.SealedKey {
			k := SessionKeys{ServerToClient: *v.Key.seed(t)}
			g, err := OpenGrant(&k, v.Sealed, v.AD)
			if err != nil {
				t.Fatalf("open libsodium-sealed grant: %v", err)
			}
			if !bytes.Equal(g.Key[:], v.FnKey) || g.Round != v.Round || g.Epoch != v.Epoch {
				t.Errorf("grant = (%x, %d, %d), libsodium sealed (%x, %d, %d)", g.Key, g.Round, g.Epoch, v.FnKey, v.Round, v.Epoch)
			}
			resealed, err := SealGrant(&k, &g, v.AD, bytes.NewReader(v.Sealed[:24]))
			if err != nil || !bytes.Equal(resealed, v.Sealed) {
				t.Errorf("SealGrant with libsodium's nonce differs: %v", err)
			}
		}
	})
}

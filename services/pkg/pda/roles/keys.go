package roles

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/obscura-iot/obscura/services/pkg/pda"
)

// ProxySecrets are the proxy domain's secrets (spec §3.9.1): s, a_PRX, K_dedup and K_mix.
// They are read once at start (from a file that Vault Agent or a Secret mounts) and held in
// memory; they are never logged.
type ProxySecrets struct {
	Keys *pda.ProxyKeys
	Mix  [32]byte // K_mix: participant pseudonyms and the mixer's permutation seed
}

// DBSecrets is the DB domain's secret a_DB.
type DBSecrets struct{ Key *pda.PrivateKey }

type proxyFile struct {
	Group  pda.GroupID `json:"group"`
	OPRF   string      `json:"oprf_s"`
	Oracle string      `json:"prx_sk"`
	Dedup  string      `json:"dedup_key"`
	Mix    string      `json:"mix_key"`
}

type dbFile struct {
	Group pda.GroupID `json:"group"`
	Key   string      `json:"db_sk"`
}

// GenerateProxySecrets draws fresh proxy secrets.
func GenerateProxySecrets(g *pda.Group) (*ProxySecrets, error) {
	k, err := pda.GenerateProxyKeys(g, nil)
	if err != nil {
		return nil, err
	}
	s := &ProxySecrets{Keys: k}
	if _, err := io.ReadFull(rand.Reader, s.Mix[:]); err != nil {
		return nil, err
	}
	return s, nil
}

// GenerateDBSecrets draws a fresh a_DB.
func GenerateDBSecrets(g *pda.Group) (*DBSecrets, error) {
	k, err := pda.GenerateKey(g, rand.Reader)
	if err != nil {
		return nil, err
	}
	return &DBSecrets{Key: k}, nil
}

// MarshalProxySecrets encodes secrets for a key file.
func MarshalProxySecrets(g *pda.Group, s *ProxySecrets) ([]byte, error) {
	sb, err := s.Keys.OPRF.MarshalBinary()
	if err != nil {
		return nil, err
	}
	ob, err := s.Keys.Oracle.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(proxyFile{Group: g.ID(), OPRF: hex.EncodeToString(sb), Oracle: hex.EncodeToString(ob),
		Dedup: hex.EncodeToString(s.Keys.Dedup[:]), Mix: hex.EncodeToString(s.Mix[:])}, "", "  ")
}

// MarshalDBSecrets encodes a_DB for a key file.
func MarshalDBSecrets(g *pda.Group, s *DBSecrets) ([]byte, error) {
	b, err := s.Key.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(dbFile{Group: g.ID(), Key: hex.EncodeToString(b)}, "", "  ")
}

// LoadProxySecrets reads a proxy key file.
func LoadProxySecrets(path string) (*ProxySecrets, *pda.Group, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read proxy keys: %w", err)
	}
	defer clear(b)
	s, g, err := ParseProxySecrets(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, g, nil
}

// ParseProxySecrets parses a proxy key bundle (the document pda keygen -role proxy writes)
// from wherever it was read: a file, or a Vault field. Errors never quote the bundle.
func ParseProxySecrets(b []byte) (*ProxySecrets, *pda.Group, error) {
	var f proxyFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("parse proxy keys: not a key bundle (%d bytes)", len(b))
	}
	g, err := pda.NewGroup(f.Group)
	if err != nil {
		return nil, nil, fmt.Errorf("proxy keys: %w", err)
	}
	sb, err1 := hex.DecodeString(f.OPRF)
	ob, err2 := hex.DecodeString(f.Oracle)
	db, err3 := hex.DecodeString(f.Dedup)
	mb, err4 := hex.DecodeString(f.Mix)
	defer clear(sb)
	defer clear(ob)
	defer clear(db)
	defer clear(mb)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(db) != pda.DedupKeySize || len(mb) != 32 {
		return nil, nil, errors.New("parse proxy keys: bad encoding")
	}
	s, err := g.DecodeNonZeroScalar(sb)
	if err != nil {
		return nil, nil, fmt.Errorf("proxy keys: oprf_s: %w", err)
	}
	o, err := pda.ParsePrivateKey(g, ob)
	if err != nil {
		return nil, nil, fmt.Errorf("proxy keys: prx_sk: %w", err)
	}
	out := &ProxySecrets{Keys: &pda.ProxyKeys{OPRF: s, Oracle: o}}
	copy(out.Keys.Dedup[:], db)
	copy(out.Mix[:], mb)
	return out, g, nil
}

// LoadDBSecrets reads a DB key file.
func LoadDBSecrets(path string) (*DBSecrets, *pda.Group, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read DB key: %w", err)
	}
	defer clear(b)
	s, g, err := ParseDBSecrets(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, g, nil
}

// ParseDBSecrets parses a DB key bundle (pda keygen -role db) from a file's or a Vault
// field's bytes. Errors never quote the bundle.
func ParseDBSecrets(b []byte) (*DBSecrets, *pda.Group, error) {
	var f dbFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("parse DB key: not a key bundle (%d bytes)", len(b))
	}
	g, err := pda.NewGroup(f.Group)
	if err != nil {
		return nil, nil, fmt.Errorf("DB key: %w", err)
	}
	kb, err := hex.DecodeString(f.Key)
	defer clear(kb)
	if err != nil {
		return nil, nil, errors.New("parse DB key: db_sk: bad encoding")
	}
	k, err := pda.ParsePrivateKey(g, kb)
	if err != nil {
		return nil, nil, fmt.Errorf("DB key: %w", err)
	}
	return &DBSecrets{Key: k}, g, nil
}

// Pseudonym is pid = HMAC(K_mix, "pid" || identity), the only form in which a participant
// appears in the proxy's Redis and on the pool stream (spec §3.9.2 step 5).
func (s *ProxySecrets) Pseudonym(identity string) string {
	m := hmac.New(sha256.New, s.Mix[:])
	m.Write([]byte("PDA-V1-pid"))
	m.Write([]byte(identity))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

func (s *ProxySecrets) mac(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, s.Mix[:])
	for _, p := range parts {
		var l [4]byte
		l[0], l[1], l[2], l[3] = byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
		m.Write(l[:])
		m.Write(p)
	}
	return m.Sum(nil)
}

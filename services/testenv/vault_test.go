package testenv

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestVault(t *testing.T) {
	t.Parallel()
	v := StartVault(t)
	if v.RootToken == "" || v.RootToken == "root" {
		t.Errorf("root token %q: want a random one", v.RootToken)
	}
	c := v.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	health, err := c.Sys().HealthWithContext(ctx)
	if err != nil || !health.Initialized || health.Sealed {
		t.Fatalf("health = %+v, %v", health, err)
	}
	// The dev server's KV v2 engine at secret/.
	if _, err := c.KVv2("secret").Put(ctx, "obscura/probe", map[string]any{"private_key": "x"}); err != nil {
		t.Fatalf("KV v2 put: %v", err)
	}
	s, err := c.KVv2("secret").Get(ctx, "obscura/probe")
	if err != nil || s.Data["private_key"] != "x" {
		t.Fatalf("KV v2 get = %+v, %v", s, err)
	}
	// Loopback only: the API and the cluster port (Port+1) are bound to 127.0.0.1.
	for _, p := range []int{v.Port, v.Port + 1} {
		if l, err := net.Listen("tcp", net.JoinHostPort(Host, strconv.Itoa(p))); err == nil {
			l.Close()
			t.Errorf("port %d on %s is not taken by vault", p, Host)
		}
	}
	// A wrong token is refused.
	c.SetToken("wrong")
	if _, err := c.KVv2("secret").Get(ctx, "obscura/probe"); err == nil {
		t.Error("read with a wrong token succeeded")
	}
}

package controller

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestGeneratedPasswordsHashCheaply: nats-server re-checks every connected client's password
// on each accounts reload, so the operator's generated passwords (256 random bits) are hashed
// at the minimum cost and a person's password at bcryptCost; a hash written at another cost
// is re-hashed rather than reused.
func TestGeneratedPasswordsHashCheaply(t *testing.T) {
	var c bcryptCache
	generated := string(newPassword())
	chosen := "operator-flag-password"
	for _, tc := range []struct {
		password string
		cost     int
	}{{generated, bcrypt.MinCost}, {chosen, bcryptCost}} {
		h, err := c.hash("u", tc.password)
		if err != nil {
			t.Fatal(err)
		}
		if got := hashCost(h); got != tc.cost {
			t.Errorf("password of %d characters hashed at cost %d, want %d", len(tc.password), got, tc.cost)
		}
	}
	old, err := bcrypt.GenerateFromPassword([]byte(generated), bcryptCost)
	if err != nil {
		t.Fatal(err)
	}
	var fresh bcryptCache
	fresh.seed(`{user: "u", password: "` + string(old) + `"}`)
	h, err := fresh.hash("u", generated)
	if err != nil {
		t.Fatal(err)
	}
	if hashCost(h) != bcrypt.MinCost || strings.EqualFold(h, string(old)) {
		t.Errorf("a cost-%d hash of a generated password was reused", bcryptCost)
	}
}

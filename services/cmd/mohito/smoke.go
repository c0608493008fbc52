package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// SmokeConfig configures `mohito smoke`.
type SmokeConfig struct {
	edge
	TokenFile string
	Timeout   time.Duration
	Rounds    int

	token string
}

// SmokeResult is the one-line JSON summary smoke prints.
type SmokeResult struct {
	OK         bool    `json:"ok"`
	Gateway    string  `json:"gateway"`
	FirstRound uint64  `json:"first_round"` // open when smoke connected
	LastRound  uint64  `json:"last_round"`
	Advanced   int     `json:"rounds_advanced"`
	Vendors    int     `json:"vendors,omitempty"`
	Seconds    float64 `json:"seconds"`
	Error      string  `json:"error,omitempty"`
}

func parseSmoke(args []string) (*SmokeConfig, error) {
	f := envflag.New("smoke", "MOHITO_")
	var c SmokeConfig
	c.edge.bind(f)
	f.String(&c.TokenFile, "token-file", "", `file holding one access token, or a tokens file {"<token>": "<user>"} (its first token; required)`)
	f.Duration(&c.Timeout, "timeout", time.Minute, "give up after this long")
	f.Int(&c.Rounds, "rounds", 2, "round ids that must advance past the one open at connect (2: a round opened after smoke connected, and the coordinator has moved past it)")
	if err := parseFlags(f, args); err != nil {
		return nil, err
	}
	errs := c.edge.validate()
	if c.Timeout <= 0 || c.Rounds < 1 {
		errs = append(errs, errors.New("--timeout > 0 and --rounds ≥ 1 are required"))
	}
	if c.TokenFile == "" {
		errs = append(errs, errors.New("--token-file is required"))
	} else if tok, err := tokenFrom(c.TokenFile); err != nil {
		errs = append(errs, err)
	} else {
		c.token = tok
	}
	return &c, joinConfig(errs)
}

// runSmoke is `mohito smoke` (the chart's helm test): it connects to the
// gateway through the edge with a user's token and waits until --rounds
// round ids have advanced past the round open at connect. The user API
// shows only the open round, so this proves that the edge, the token, the
// gateway's round state and the coordinator's schedule (which opens the next
// round only while the vendors' keys are announced) all work; it prints one
// line of JSON, exit 0, or 1 on timeout or a refused token.
func runSmoke(args []string, out io.Writer) error {
	c, err := parseSmoke(args)
	if err != nil {
		return err
	}
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, c.Timeout)
	defer cancelT()
	res, err := smoke(ctx, client.NewGatewayClient(conn, c.token), c.Rounds)
	res.Gateway = c.gateway
	b, _ := json.Marshal(res)
	fmt.Fprintf(out, "%s\n", b)
	return err
}

func smoke(ctx context.Context, gw *client.GatewayClient, advance int) (SmokeResult, error) {
	start := time.Now()
	var res SmokeResult
	var lastErr error
	connected := false
	for {
		ri, err := gw.RoundInfo(ctx)
		switch {
		case err == nil:
			if !connected {
				connected, res.FirstRound, res.Vendors = true, ri.T, ri.Params.Vendors
			}
			res.LastRound = ri.T
			res.Advanced = int(ri.T - res.FirstRound)
		case status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.PermissionDenied:
			res.Seconds, res.Error = time.Since(start).Seconds(), "token refused: "+status.Convert(err).Message()
			return res, errors.New(res.Error)
		default:
			lastErr = err
		}
		res.Seconds = time.Since(start).Seconds()
		if connected && res.Advanced >= advance {
			res.OK = true
			return res, nil
		}
		if !clock.Sleep(ctx, 100*time.Millisecond) {
			res.Error = fmt.Sprintf("timeout: round ids advanced %d of %d", res.Advanced, advance)
			if !connected && lastErr != nil {
				res.Error = "timeout: no open round: " + status.Convert(lastErr).Message()
			}
			return res, errors.New(res.Error)
		}
	}
}

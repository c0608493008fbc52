package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
)

// BenchDevicesSpec is what `mohito bench-devices` reads: the bench's devices, run in a
// process of their own so that the users' open-loop generator (in the bench process) and
// the devices' per-round work never share one Go scheduler — a round's M6 burst on every
// device delayed the users' Submits past their round's close and set off refusal storms.
type BenchDevicesSpec struct {
	NATSURL string              `json:"nats_url"`
	Params  mohito.Params       `json:"params"`
	Devices []BenchDeviceSecret `json:"devices"`
}

// BenchDeviceSecret is one device: its id, vendor and secret; its NATS user is
// contract.DeviceUser(Vendor, ID) with the bench's password.
type BenchDeviceSecret struct {
	ID     string `json:"id"`
	Vendor int    `json:"vendor"`
	Secret []byte `json:"secret"`
}

// RunBenchDevices is `mohito bench-devices <spec.json>`: it starts every device of the spec,
// writes "ready" to out, and when in reaches EOF (the bench closes its stdin) writes the
// payloads the devices executed, with how many times each, as one JSON object to out.
func RunBenchDevices(ctx context.Context, specPath string, in io.Reader, out io.Writer) error {
	b, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var spec BenchDevicesSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: %w", specPath, err)
	}
	var delivered sim.Deliveries
	for _, d := range spec.Devices {
		if len(d.Secret) != len(mohito.DeviceSecret{}) {
			return fmt.Errorf("device %s: secret of %d bytes", d.ID, len(d.Secret))
		}
		sec := mohito.DeviceSecret(d.Secret)
		user := contract.DeviceUser(d.Vendor, d.ID)
		nc, err := nats.Connect(spec.NATSURL, nats.UserInfo(user, benchPassword(user)))
		if err != nil {
			return fmt.Errorf("device %s: %w", d.ID, err)
		}
		defer nc.Close()
		if err := client.NewDevice(d.ID, &sec, spec.Params, client.NATSTransport{NC: nc}, delivered.Ack).Start(); err != nil {
			return fmt.Errorf("device %s: %w", d.ID, err)
		}
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, in); close(eof) }()
	select {
	case <-eof:
	case <-ctx.Done():
		return ctx.Err()
	}
	return json.NewEncoder(out).Encode(delivered.Counts())
}

// benchDevices is the running devices process of a step.
type benchDevices struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	done  chan struct{}
}

// startDevices writes the spec and starts `<binary> bench-devices` on it, returning once
// every device is subscribed.
func (e *benchEnv) startDevices(ctx context.Context, spec BenchDevicesSpec) (*benchDevices, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	path := e.write("bench-devices.json", b)
	log, err := os.Create(filepath.Join(e.dir, "bench-devices.log"))
	if err != nil {
		return nil, err
	}
	d := &benchDevices{cmd: e.command("bench-devices", e.o.Binary, "bench-devices", path), done: make(chan struct{})}
	d.cmd.Stderr = log
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		log.Close()
		return nil, err
	}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		log.Close()
		return nil, err
	}
	d.out = bufio.NewReader(stdout)
	if err := d.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start bench-devices: %w", err)
	}
	go func() { <-d.done; log.Close() }()
	ready := make(chan error, 1)
	go func() {
		line, err := d.out.ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("bench-devices said %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		d.kill()
		b, _ := os.ReadFile(log.Name())
		return nil, fmt.Errorf("bench-devices did not start: %v\n%s", err, b[max(0, len(b)-2000):])
	}
	return d, nil
}

// cpu is the devices process's CPU-seconds so far.
func (d *benchDevices) cpu() float64 {
	c, _ := procCPU(d.cmd.Process.Pid)
	return c
}

// finish closes the devices' stdin and reads what they executed.
func (d *benchDevices) finish() (map[string]int, error) {
	_ = d.stdin.Close()
	delivered := map[string]int{}
	err := json.NewDecoder(d.out).Decode(&delivered)
	werr := d.cmd.Wait()
	close(d.done)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("bench-devices result: %w", err), werr)
	}
	return delivered, nil
}

// kill ends the devices process (on a step that failed before finish).
func (d *benchDevices) kill() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
	close(d.done)
}

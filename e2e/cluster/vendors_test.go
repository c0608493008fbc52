package cluster

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/obscura-iot/obscura/services/testenv"
)

// secondVendor joins the series for the load phases (addSecondVendor): an encoder partition owns
// whole vendors, so with one vendor the encoders have nothing to scale out to.
const secondVendor = "bolt"

// vendorNames are the series' vendors by index (the provisioned files' vendor numbers).
var vendorNames = []string{vendorName, secondVendor}

// secondVendorObjects are the Vendor and Shuffler of the second vendor, as the samples shape
// them: its key ring and device registry are the Secrets provision created.
var secondVendorObjects = fmt.Sprintf(`apiVersion: %[1]s
kind: Vendor
metadata:
  name: %[2]s
  labels:
    mohito.obscura.dev/series: %[3]s
spec:
  index: 1
  displayName: Bolt Door Locks
  devices: %[4]d
  capacity:
    base: 32
    jitter: 8
    paddedEntries: 288
    responsePaddedEntries: 1024
  keys:
    secretRef:
      name: %[2]s-vendor-key
      epochs: true
  agent:
    replicas: 1
    devices:
      name: %[2]s-devices
---
apiVersion: %[1]s
kind: Shuffler
metadata:
  name: %[2]s-shuffler
  labels:
    mohito.obscura.dev/series: %[3]s
spec:
  vendorRef:
    name: %[2]s
  replicas: 1
  fakePool:
    size: 4096
    refillBelow: 1024
`, mohitoAPI, secondVendor, roundName, devicesPerVendor)

// seriesObjects names the Round and every vendor's Vendor and Shuffler, for kubectl delete.
func seriesObjects() []string {
	out := []string{"rounds.mohito.obscura.dev/" + roundName}
	for _, v := range vendorNames {
		out = append(out, "shufflers.mohito.obscura.dev/"+v+"-shuffler", "vendors.mohito.obscura.dev/"+v)
	}
	return out
}

// vendorDevices writes the driver's devices file of vendors 0 to last (provision's
// devices.json lists every vendor's devices) and returns its path.
func (e *env) vendorDevices(last int) string {
	var devs []map[string]any
	if err := json.Unmarshal(e.readProvision("devices.json"), &devs); err != nil {
		e.t.Fatal(err)
	}
	var keep []map[string]any
	for _, d := range devs {
		if v, _ := d["vendor"].(float64); int(v) <= last {
			keep = append(keep, d)
		}
	}
	b, _ := json.Marshal(keep)
	return e.writeFile(fmt.Sprintf("devices-vendors-0-%d.json", last), b)
}

// addSecondVendor applies the second Vendor and its Shuffler, waits until both are Ready, and
// points the drives at both vendors' devices.
func (e *env) addSecondVendor() {
	e.run("kubectl", "apply", "-n", e.ns, "-f", e.writeFile("second-vendor.yaml", []byte(secondVendorObjects)))
	testenv.Eventually(e.t, 4*time.Minute, "the second Vendor and its Shuffler Ready", func() error {
		if err := e.allReady([2]string{"Vendor", secondVendor}, [2]string{"Shuffler", secondVendor + "-shuffler"}); err != nil {
			return err
		}
		if n := e.counter("vendors"); n != 2 {
			return fmt.Errorf("Round %s counts %d vendors", roundName, n)
		}
		return nil
	})
	e.devices = e.vendorDevices(1)
	e.creds = e.deviceCredentials()
	e.t.Logf("drives use %s (both vendors' devices)", filepath.Base(e.devices))
}

package mohito_test

// The operator and the services agree on the deployment document without either importing
// the other's internals in production code (DESIGN.md); this test imports both to prove it.

import (
	"testing"
	"time"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
)

// TestOperatorDeploymentIsAcceptedByTheServices renders the samples' deployment the way the
// Round controller does and parses it with the services' strict loader.
func TestOperatorDeploymentIsAcceptedByTheServices(t *testing.T) {
	var rd mohitov1.Round
	var v mohitov1.Vendor
	specstest.ReadSample(t, "mohito_v1alpha1_round.yaml", &rd)
	specstest.ReadSample(t, "mohito_v1alpha1_vendor.yaml", &v)
	rd.Namespace, v.Namespace = "home", "home"
	// The defaults the API server fills in for fields the samples leave out.
	rd.Spec.Mode, rd.Spec.Suite = mohitov1.ProtocolHardened, "X25519"
	globex := v.DeepCopy()
	globex.Name, globex.Spec.Index, globex.Spec.Devices = "globex", 1, 40

	// The vendor of the sample has no Shuffler in the rotation; globex's Shufflers weigh 7.
	doc, err := mohito.Deployment(&rd, []mohitov1.Vendor{v, *globex}, map[string]int64{"globex": 7})
	if err != nil {
		t.Fatal(err)
	}
	cm, _, err := mohito.DeploymentConfigMap(&rd, doc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := roles.ParseDeployment([]byte(cm.Data[contract.DeploymentKey]))
	if err != nil {
		t.Fatalf("the services refuse the operator's deployment: %v\n%s", err, cm.Data[contract.DeploymentKey])
	}
	if d.Series != mohito.SeriesName(&rd) || d.Params.Vendors != 2 || d.Encoders != int(rd.Spec.Encoders.Partitions) ||
		d.Round != 2*time.Second || d.Capacity[0] != int(v.Spec.Capacity.PaddedEntries) || d.Weights[0] != 0 || d.Weights[1] != 7 {
		t.Errorf("services read a different deployment: %+v", d)
	}
}

// TestKeyRotationContract: the operator's view of key rotation is the services' — the epoch
// file names it mounts.
func TestKeyRotationContract(t *testing.T) {
	if n, ok := keys.ParseEpochFileName("epoch-12.key"); !ok || n != 12 || keys.EpochFileName(12) != "epoch-12.key" {
		t.Error("epoch file names disagree")
	}
	for _, name := range []string{specs.KeyFile, "epoch-01.key", "epoch-1", "..data"} {
		if _, ok := keys.ParseEpochFileName(name); ok {
			t.Errorf("%q taken for an epoch file", name)
		}
	}
}

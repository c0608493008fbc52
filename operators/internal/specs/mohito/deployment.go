package mohito

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// Fixed service parameters the CRs do not expose.
const (
	// OutBatch is the records per shuffled-stream message (spec §4.5 stage A).
	OutBatch = 256
	// ResponseQuantum is the coarse step of public response capacities (spec G6).
	ResponseQuantum = 256
)

// Deployment renders the deployment document of a Round over its selected vendors. Vendors must
// be the Round's selection; their indices must be 0..n−1 (the Round reconciler checks that
// first and reports it). Weights are the vendors' weights in the shuffler rotation by name (the
// sum of their Shufflers' effective weights; a vendor absent from the map has none and never
// shuffles); nil leaves the services to weigh by devices.
func Deployment(rd *mohitov1.Round, vendors []mohitov1.Vendor, weights map[string]int64) (contract.DeploymentFile, error) {
	vs := append([]mohitov1.Vendor(nil), vendors...)
	sort.Slice(vs, func(i, j int) bool { return vs[i].Spec.Index < vs[j].Spec.Index })
	doc := contract.DeploymentFile{
		Series:           SeriesName(rd),
		Mode:             string(rd.Spec.Mode),
		Suite:            rd.Spec.Suite,
		CommandsPerUser:  int(rd.Spec.CommandsPerUser),
		Delta:            uint64(rd.Spec.Delta),
		CommandSize:      int(rd.Spec.CommandSize),
		ResponseSize:     int(rd.Spec.ResponseSize),
		Period:           rd.Spec.Period.Duration.String(),
		ShufflerTimeout:  rd.Spec.ShufflerPolicy.ResponseTimeout.Duration.String(),
		ResponseDeadline: ResponseDeadline(rd).String(),
		Encoders:         int(rd.Spec.Encoders.Partitions),
		OutBatch:         OutBatch,
		ResponseQuantum:  ResponseQuantum,
		CapacityDraw:     string(rd.Spec.Capacity.Draw),
		CapacityClasses:  CapacityClasses(rd),
	}
	for i, v := range vs {
		if v.Spec.Index != int32(i) {
			return contract.DeploymentFile{}, fmt.Errorf("vendor indices must be 0..%d without gaps; vendor %s has index %d where %d was expected",
				len(vs)-1, v.Name, v.Spec.Index, i)
		}
		dv := contract.DeploymentVendor{
			Index: int(v.Spec.Index), Name: v.Name, Devices: int(v.Spec.Devices),
			Base: uint64(v.Spec.Capacity.Base), Jitter: uint64(v.Spec.Capacity.Jitter),
			PaddedEntries: int(v.Spec.Capacity.PaddedEntries), ResponsePaddedEntries: int(v.Spec.Capacity.ResponsePaddedEntries),
		}
		if weights != nil {
			w := int(weights[v.Name])
			dv.ShufflerWeight = &w
		}
		doc.Vendors = append(doc.Vendors, dv)
	}
	return doc, nil
}

// CapacityClasses is the Round's capacity-class policy as the coordinator reads it (nil without
// spec.capacity.classes).
func CapacityClasses(rd *mohitov1.Round) *contract.CapacityClasses {
	c := rd.Spec.Capacity.Classes
	if c == nil {
		return nil
	}
	out := &contract.CapacityClasses{Hold: c.Hold.Duration.String(),
		BurstRate: float64(c.BurstPercent) / 100, LowerFakeRatio: float64(c.LowerFakePercent) / 100}
	for _, p := range c.Percent {
		out.Percent = append(out.Percent, int(p))
	}
	return out
}

// ResponseDeadline is the Round's response deadline: one period after S_v went out (spec O12).
func ResponseDeadline(rd *mohitov1.Round) time.Duration { return rd.Spec.Period.Duration }

// DeploymentConfigMap is the ConfigMap holding the deployment JSON, and the hash of its
// contents that pod templates carry so a parameter change rolls the pods.
func DeploymentConfigMap(rd *mohitov1.Round, doc contract.DeploymentFile) (*corev1.ConfigMap, string, error) {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, "", fmt.Errorf("encode deployment of round %s: %w", rd.Name, err)
	}
	data := string(b) + "\n"
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: DeploymentConfigName(rd), Namespace: rd.Namespace, Labels: roundLabels(rd, "config")},
		Data:       map[string]string{contract.DeploymentKey: data},
	}, ConfigHash(data), nil
}

// ConfigHash is the hash the pod templates of every role but the encoders carry for a
// deployment document's contents; vendor roles compute it from the series' ConfigMap as the
// integrator's roles do from the document. It leaves out the encoder count, which only the
// encoders read, so an encoder rescale (by hand or by the autoscaler) rolls the encoders alone.
func ConfigHash(deploymentJSON string) string {
	var doc map[string]any
	if err := json.Unmarshal([]byte(deploymentJSON), &doc); err == nil {
		delete(doc, "encoders")
		if b, err := json.Marshal(doc); err == nil {
			return shortHash(string(b))
		}
	}
	return shortHash(deploymentJSON)
}

// EncoderConfigHash is the encoders' hash: of the whole document.
func EncoderConfigHash(deploymentJSON string) string { return shortHash(deploymentJSON) }

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// SeriesName names a Round series to the services (status keys in KV): namespace and name
// joined by "_" (which neither contains), so equally named Rounds of two namespaces never share
// figures. The services accept at most 63 characters; longer pairs keep a prefix and a hash.
func SeriesName(rd *mohitov1.Round) string {
	s := rd.Namespace + "_" + rd.Name
	if len(s) <= 63 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:46] + "_" + hex.EncodeToString(sum[:8])
}

// DeploymentConfigName is the name of a Round's deployment ConfigMap.
func DeploymentConfigName(rd *mohitov1.Round) string { return rd.Name + "-deployment" }

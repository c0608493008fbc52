package specs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
)

// Fixed service parameters the CRs do not expose.
const (
	// OutBatch is the records per shuffled-stream message (spec §4.5 stage A).
	OutBatch = 256
	// ResponseQuantum is the coarse step of public response capacities (spec G6).
	ResponseQuantum = 256
)

// DeploymentDoc is the deployment JSON every Mohito role reads (docs/services.md). Field names
// are the contract with services/pkg/rounds.ParseDeployment, which rejects unknown fields.
type DeploymentDoc struct {
	Series           string      `json:"series"`
	Mode             string      `json:"mode"`
	Suite            string      `json:"suite"`
	CommandsPerUser  int32       `json:"commandsPerUser"`
	Delta            int32       `json:"delta"`
	CommandSize      int32       `json:"commandSize"`
	ResponseSize     int32       `json:"responseSize"`
	Period           string      `json:"period"`
	ShufflerTimeout  string      `json:"shufflerTimeout"`
	ResponseDeadline string      `json:"responseDeadline"`
	AsyncWindow      int32       `json:"asyncWindow"`
	Encoders         int32       `json:"encoders"`
	OutBatch         int32       `json:"outBatch"`
	ResponseQuantum  int32       `json:"responseQuantum"`
	CapacityDraw     string      `json:"capacityDraw"`
	Vendors          []VendorDoc `json:"vendors"`
}

// VendorDoc is one vendor's public figures in the deployment JSON.
type VendorDoc struct {
	Index                 int32  `json:"index"`
	Name                  string `json:"name"`
	Devices               int64  `json:"devices"`
	Base                  int32  `json:"base"`
	Jitter                int32  `json:"jitter"`
	PaddedEntries         int32  `json:"paddedEntries"`
	ResponsePaddedEntries int32  `json:"responsePaddedEntries"`
}

// Deployment renders the deployment document of a Round over its selected vendors. Vendors must
// be the Round's selection; their indices must be 0..n−1 (the Round reconciler checks that
// first and reports it).
func Deployment(rd *mohitov1.Round, vendors []mohitov1.Vendor) (DeploymentDoc, error) {
	vs := append([]mohitov1.Vendor(nil), vendors...)
	sort.Slice(vs, func(i, j int) bool { return vs[i].Spec.Index < vs[j].Spec.Index })
	doc := DeploymentDoc{
		Series:           SeriesName(rd),
		Mode:             string(rd.Spec.Mode),
		Suite:            rd.Spec.Suite,
		CommandsPerUser:  rd.Spec.CommandsPerUser,
		Delta:            rd.Spec.Delta,
		CommandSize:      rd.Spec.CommandSize,
		ResponseSize:     rd.Spec.ResponseSize,
		Period:           rd.Spec.Period.Duration.String(),
		ShufflerTimeout:  rd.Spec.ShufflerPolicy.ResponseTimeout.Duration.String(),
		ResponseDeadline: rd.Spec.Period.Duration.String(), // spec O12: one period after S_v
		AsyncWindow:      rd.Spec.AsyncWindow,
		Encoders:         rd.Spec.Encoders.Partitions,
		OutBatch:         OutBatch,
		ResponseQuantum:  ResponseQuantum,
		CapacityDraw:     string(rd.Spec.Capacity.Draw),
	}
	for i, v := range vs {
		if v.Spec.Index != int32(i) {
			return DeploymentDoc{}, fmt.Errorf("vendor indices must be 0..%d without gaps; vendor %s has index %d where %d was expected",
				len(vs)-1, v.Name, v.Spec.Index, i)
		}
		doc.Vendors = append(doc.Vendors, VendorDoc{
			Index: v.Spec.Index, Name: v.Name, Devices: v.Spec.Devices,
			Base: v.Spec.Capacity.Base, Jitter: v.Spec.Capacity.Jitter,
			PaddedEntries: v.Spec.Capacity.PaddedEntries, ResponsePaddedEntries: v.Spec.Capacity.ResponsePaddedEntries,
		})
	}
	return doc, nil
}

// DeploymentConfigMap is the ConfigMap holding the deployment JSON, and the hash of its
// contents that pod templates carry so a parameter change rolls the pods.
func DeploymentConfigMap(rd *mohitov1.Round, doc DeploymentDoc) (*corev1.ConfigMap, string, error) {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, "", fmt.Errorf("encode deployment of round %s: %w", rd.Name, err)
	}
	data := string(b) + "\n"
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: DeploymentConfigName(rd), Namespace: rd.Namespace, Labels: roundLabels(rd, "config")},
		Data:       map[string]string{DeploymentKey: data},
	}, ConfigHash(data), nil
}

// ConfigHash is the hash pod templates carry for a deployment document's contents; vendor
// roles compute it from the series' ConfigMap as the integrator's roles do from the document.
func ConfigHash(deploymentJSON string) string {
	sum := sha256.Sum256([]byte(deploymentJSON))
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

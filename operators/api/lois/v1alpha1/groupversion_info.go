// Package v1alpha1 holds the lois.obscura.dev/v1alpha1 API: the HeaderGateway resource that
// runs one LOIS cloud (shared/specs/lois.md §3.9, §10): the cloud interfaces (CI) devices send
// their hidden packets to on one unified port, the server interfaces (SI) in front of each
// service, and the registrar's settings for device sessions.
//
// +kubebuilder:object:generate=true
// +groupName=lois.obscura.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "lois.obscura.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	//lint:ignore SA1019 kubebuilder's API layout: the kinds register themselves in init through this builder
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Package v1alpha1 holds the pps.obscura.dev/v1alpha1 API: the SecurePipeline resource that
// runs one secure publish–process–subscribe function (shared/specs/publish-process-subscribe.md
// §5.3–5.4): a broker in the resource's namespace evaluates a garbled circuit over its
// publishers' values, a garbler in its own trust domain garbles it, subscribers unmask the result.
//
// +kubebuilder:object:generate=true
// +groupName=pps.obscura.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "pps.obscura.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	//lint:ignore SA1019 kubebuilder's API layout: the kinds register themselves in init through this builder
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Package v1alpha1 holds the pda.obscura.dev/v1alpha1 API: the AggregationJob resource that
// describes one private threshold aggregation (shared/specs/pda.md §4.2).
//
// +kubebuilder:object:generate=true
// +groupName=pda.obscura.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "pda.obscura.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	//lint:ignore SA1019 kubebuilder's API layout: the kinds register themselves in init through this builder
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

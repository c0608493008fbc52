// Package v1alpha1 holds the mohito.obscura.dev/v1alpha1 API: the Vendor, Shuffler and Round
// resources that describe a Mohito deployment (shared/specs/mohito.md §10).
//
// +kubebuilder:object:generate=true
// +groupName=mohito.obscura.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "mohito.obscura.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	//lint:ignore SA1019 kubebuilder's API layout: the kinds register themselves in init through this builder
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Package v1alpha1 holds the sddr.obscura.dev/v1alpha1 API (shared/specs/sddr.md): the
// EncounterMailbox resource that runs the untrusted rendezvous mailbox devices that met leave
// each other sealed messages in, and the EncounterSimulation resource that runs the city-scale
// simulator as an Indexed Job across pods.
//
// +kubebuilder:object:generate=true
// +groupName=sddr.obscura.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "sddr.obscura.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	//lint:ignore SA1019 kubebuilder's API layout: the kinds register themselves in init through this builder
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

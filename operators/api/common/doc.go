// Package common holds the API types and condition vocabulary shared by every Obscura API group:
// key references (Vault or Secret) and the Ready/Progressing/Degraded conditions.
//
// +kubebuilder:object:generate=true
package common

// Package scheme builds the runtime.Scheme holding every kind the operator reads or writes.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	loisv1 "github.com/obscura-iot/obscura/operators/api/lois/v1alpha1"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
	ppsv1 "github.com/obscura-iot/obscura/operators/api/pps/v1alpha1"
	sddrv1 "github.com/obscura-iot/obscura/operators/api/sddr/v1alpha1"
)

// New returns a scheme with the built-in kinds and the mohito, pda, pps, lois and sddr API groups.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(mohitov1.AddToScheme(s))
	utilruntime.Must(pdav1.AddToScheme(s))
	utilruntime.Must(ppsv1.AddToScheme(s))
	utilruntime.Must(loisv1.AddToScheme(s))
	utilruntime.Must(sddrv1.AddToScheme(s))
	return s
}

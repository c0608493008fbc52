package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/obscura-iot/obscura/operators/internal/autoscale"
)

// applyScale makes one autoscaling decision for a stage (decrypt workers, encoder partitions,
// database shards) and carries it out: apply writes the new count (an error leaves it as it
// was), *last gets the time of the change, and an Event on obj (action names the stage's verb)
// and a log line carry the decision's figures. obs.LastChange is taken from *last.
func applyScale(ctx context.Context, rec events.EventRecorder, obj runtime.Object, action string,
	obs autoscale.Observation, last **metav1.Time, apply func(n int32) error) {
	log := logf.FromContext(ctx)
	if *last != nil {
		obs.LastChange = (*last).Time
	}
	d := autoscale.Decide(obs, autoscale.DefaultPolicy)
	if !d.Changed(obs.Current) {
		return
	}
	if err := apply(d.Replicas); err != nil {
		log.Error(err, "scale "+obs.Unit)
		return
	}
	*last = &metav1.Time{Time: obs.Now}
	rec.Eventf(obj, nil, corev1.EventTypeNormal, string(d.Reason), action, "%s", d.Message)
	log.Info("scaled "+obs.Unit, "from", obs.Current, "to", d.Replicas, "reason", d.Reason, "lag", obs.Lag)
}

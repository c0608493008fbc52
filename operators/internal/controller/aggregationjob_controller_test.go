package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/operators/api/common"
	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
)

func aggregationJob(ns, proxyNS, dbNS string) *pdav1.AggregationJob {
	secret := func(name string) common.KeyReference {
		return common.KeyReference{SecretRef: &common.SecretKeyReference{Name: name}}
	}
	return &pdav1.AggregationJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "attackers"},
		Spec: pdav1.AggregationJobSpec{
			Key:       pdav1.KeySpec{Type: pdav1.KeyIP},
			Threshold: 2,
			Window:    pdav1.Window{Duration: &metav1.Duration{Duration: time.Hour}},
			Participants: []pdav1.Participant{
				{Name: "acme", Identity: "CN=acme"},
				{Name: "globex", Identity: "CN=globex"},
				{Name: "initech", Identity: "CN=initech"},
			},
			Proxy:      pdav1.TrustDomain{Namespace: proxyNS, Keys: secret("proxy-keys"), PublicKey: "e2f2ae0a6abc4e71"},
			Database:   pdav1.TrustDomain{Namespace: dbNS, Keys: secret("db-keys"), PublicKey: "8c4b5f3e6f9f5b8f"},
			Shards:     1,
			ResultSink: pdav1.ResultSink{NATSSubject: "pda.v1.results.attackers"},
		},
	}
}

func TestAggregationJobTrustDomains(t *testing.T) {
	ns := namespace(t)
	proxyNS, dbNS := ns+"-proxy", ns+"-db"
	job := aggregationJob(ns, proxyNS, dbNS)
	create(t, job)
	t.Cleanup(func() { deleteJob(t, job) })
	conds := func() []metav1.Condition { return job.Status.Conditions }
	waitReady(t, job, conds, metav1.ConditionFalse, ReasonNamespaceNotFound)
	waitEvent(t, job, "Warning", ReasonNamespaceNotFound)
	if job.Status.Phase != pdav1.PhasePending {
		t.Errorf("phase = %q, want Pending", job.Status.Phase)
	}
	if job.Status.WindowStart == nil || job.Status.WindowEnd == nil ||
		job.Status.WindowEnd.Sub(job.Status.WindowStart.Time) != time.Hour {
		t.Errorf("window not resolved to one hour from creation: %v .. %v", job.Status.WindowStart, job.Status.WindowEnd)
	}

	for _, n := range []string{proxyNS, dbNS} {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	waitReady(t, job, conds, metav1.ConditionFalse, common.ReasonKeySecretNotFound)
	if c := readyCondition(job.Status.Conditions); c == nil || !contains(c.Message, "proxy") {
		t.Errorf("the message should say which trust domain lacks its key: %+v", c)
	}
	keySecret(t, proxyNS, "proxy-keys", 32)
	waitReady(t, job, conds, metav1.ConditionFalse, common.ReasonKeySecretNotFound)
	keySecret(t, dbNS, "db-keys", 32)
	// Valid: the workloads roll out in both trust domains, then the job is Ready.
	waitRollingOut(t, job, conds)
	markAvailable(t, proxyNS)
	markAvailable(t, dbNS)
	waitReady(t, job, conds, metav1.ConditionTrue, common.ReasonReconciled)

	// One party under two names would count twice towards τ.
	job.Spec.Participants[2].Identity = "CN=acme"
	update(t, job)
	waitReady(t, job, conds, metav1.ConditionFalse, ReasonDuplicateParticipantIdentity)
	job.Spec.Participants[2].Identity = "CN=initech"

	job.Spec.Database.Namespace = proxyNS
	update(t, job)
	waitReady(t, job, conds, metav1.ConditionFalse, ReasonSharedTrustDomain)
}

package controller

import (
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/obscura-iot/obscura/operators/internal/specs"
)

// Reasons the accounts reconciler records on the accounts Secret.
const (
	// ReasonAccountsRendered: the accounts changed and were written (the reloader makes the
	// server read them).
	ReasonAccountsRendered = "AccountsRendered"
	// ReasonCredentialsRejected: some credentials were left out (duplicate or invalid user,
	// unknown account); the message lists them.
	ReasonCredentialsRejected = "CredentialsRejected"
)

// bcryptCost makes every guess at a stolen hash cost about 100 ms. It guards passwords a
// person chose (the operator's own users, from flags). nats-server compares the password of
// every connected client again on each accounts reload, one bcrypt at a time: at cost 11 and
// ~55 clients that stalled the server for 5–30 s per reload, long enough to fail its probes
// (the cluster e2e with a SecurePipeline's device users). So a password of at least
// generatedPasswordLen characters — what the operator generates, 256 random bits in hex,
// where no guessing can succeed whatever the cost — is hashed at bcrypt.MinCost.
const (
	bcryptCost           = 11
	generatedPasswordLen = 64
)

// costFor is the bcrypt cost of a password.
func costFor(password string) int {
	if len(password) >= generatedPasswordLen {
		return bcrypt.MinCost
	}
	return bcryptCost
}

var (
	natsAccountUsers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "obscura_nats_account_users",
		Help: "Users per account in the rendered NATS accounts configuration.",
	}, []string{"account"})
	natsAccountsRejected = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "obscura_nats_accounts_rejected_credentials",
		Help: "Credentials left out of the rendered NATS accounts (duplicate or invalid users).",
	})
	natsAccountsWrites = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "obscura_nats_accounts_writes_total",
		Help: "Times the NATS accounts Secret was created or changed.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(natsAccountUsers, natsAccountsRejected, natsAccountsWrites)
}

// NATSAccountsReconciler renders the NATS server's accounts from every credentials Secret the
// operator generated (label specs.LabelNATSCredentials, in any namespace) and the operator's
// own users, and writes them to one Secret the server mounts. It runs whether NATS is up or
// not: the server waits for this file to start.
type NATSAccountsReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Secret is where the accounts go, in the operator's namespace.
	Secret client.ObjectKey
	// Operator are the operator's own users (its flags), rendered before every Secret's.
	Operator []specs.NATSUser
	// Owner, when set, is the operator's Deployment (in the Secret's namespace): the Secret gets
	// an owner reference to it, so uninstalling the operator also removes the accounts.
	Owner string

	hashes   bcryptCache
	mu       sync.Mutex
	problems string // last reported, so an unchanged rejection is not recorded again
}

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile renders the accounts and writes them when they changed.
func (r *NATSAccountsReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var cur corev1.Secret
	exists := true
	if err := r.Get(ctx, r.Secret, &cur); apierrors.IsNotFound(err) {
		exists = false
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("get accounts Secret %s: %w", r.Secret, err)
	}
	if exists {
		// The hashes already written are reused when they still match: a restarted operator
		// renders the same bytes, so the server is not reloaded for nothing.
		r.hashes.seed(string(cur.Data[specs.NATSAccountsKey]))
	}
	var list corev1.SecretList
	if err := r.List(ctx, &list, client.HasLabels{specs.LabelNATSCredentials}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list NATS credentials Secrets: %w", err)
	}
	r.hashes.begin()
	res := specs.NATSAccounts(r.Operator, list.Items, r.hashes.hash)
	r.hashes.end()
	want := specs.NATSAccountsSecret(r.Secret.Namespace, r.Secret.Name, res.Config)
	hash := want.Annotations[specs.AnnotationNATSAccountsHash]

	natsAccountUsers.Reset()
	users := 0
	for a, n := range res.Users {
		natsAccountUsers.WithLabelValues(a).Set(float64(n))
		users += n
	}
	natsAccountsRejected.Set(float64(len(res.Problems)))
	if p := strings.Join(res.Problems, "; "); r.setProblems(p) && p != "" {
		log.Info("NATS credentials left out of the accounts", "problems", res.Problems)
		if exists {
			// An Event's message is at most 1,024 characters; the full list is in the log.
			r.Recorder.Eventf(&cur, nil, corev1.EventTypeWarning, ReasonCredentialsRejected, "Render", "%d left out: %s", len(res.Problems), truncate(p, 900))
		}
	}

	owned, err := r.ownedBy(ctx, &cur, want)
	if err != nil {
		return ctrl.Result{}, err
	}
	if exists && owned && cur.Annotations[specs.AnnotationNATSAccountsHash] == hash && string(cur.Data[specs.NATSAccountsKey]) == res.Config {
		return ctrl.Result{}, nil
	}
	if !exists {
		if err := r.Create(ctx, want); err != nil {
			return ctrl.Result{}, fmt.Errorf("create accounts Secret %s: %w", r.Secret, err)
		}
		cur = *want
	} else {
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[specs.AnnotationNATSAccountsHash] = hash
		cur.Data = want.Data
		for k, v := range want.Labels {
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			cur.Labels[k] = v
		}
		if err := r.Update(ctx, &cur); err != nil {
			return ctrl.Result{}, fmt.Errorf("update accounts Secret %s: %w", r.Secret, err)
		}
	}
	natsAccountsWrites.Inc()
	log.Info("NATS accounts rendered", "secret", r.Secret.String(), "hash", hash, "accounts", len(res.Users), "users", users, "leftOut", len(res.Problems))
	r.Recorder.Eventf(&cur, nil, corev1.EventTypeNormal, ReasonAccountsRendered, "Render",
		"%d users in %d accounts, %d left out; hash %.12s", users, len(res.Users), len(res.Problems), hash)
	return ctrl.Result{}, nil
}

// ownedBy adds the owner reference to the operator's Deployment to cur and want; owned reports
// whether cur already had it (or no owner is configured).
func (r *NATSAccountsReconciler) ownedBy(ctx context.Context, cur, want *corev1.Secret) (owned bool, err error) {
	if r.Owner == "" {
		return true, nil
	}
	var d appsv1.Deployment
	if err := r.Get(ctx, client.ObjectKey{Namespace: r.Secret.Namespace, Name: r.Owner}, &d); err != nil {
		return false, fmt.Errorf("get the operator's Deployment %s/%s (owner of the accounts Secret): %w", r.Secret.Namespace, r.Owner, err)
	}
	ref := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID}
	for _, o := range cur.OwnerReferences {
		if o.UID == d.UID {
			owned = true
		}
	}
	if !owned {
		cur.OwnerReferences = append(cur.OwnerReferences, ref)
	}
	want.OwnerReferences = []metav1.OwnerReference{ref}
	return owned, nil
}

func (r *NATSAccountsReconciler) setProblems(p string) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed, r.problems = p != r.problems, p
	return changed
}

// SetupWithManager renders once at start and again whenever a credentials Secret or the
// accounts Secret itself changes; every event maps to the one request.
func (r *NATSAccountsReconciler) SetupWithManager(mgr ctrl.Manager) error {
	req := reconcile.Request{NamespacedName: r.Secret}
	relevant := func(o client.Object) bool {
		_, creds := o.GetLabels()[specs.LabelNATSCredentials]
		return creds || client.ObjectKeyFromObject(o) == r.Secret
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nats-accounts").
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			q.Add(req)
			return nil
		})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if !relevant(o) {
				return nil
			}
			return []reconcile.Request{req}
		})).
		Complete(r)
}

// bcryptCache keeps one bcrypt hash per (user, password): bcrypt salts every hash, so hashing
// again on each render would change the Secret, and reload the server, for nothing. Keys are
// SHA-256 digests, so the cache holds no password.
type bcryptCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]string
	// prev are the hashes of the last written configuration by user, tried before hashing anew.
	prev map[string]string
	// used are the entries of the current render; end drops the others (removed users).
	used map[[sha256.Size]byte]bool
}

func (c *bcryptCache) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used = map[[sha256.Size]byte]bool{}
}

func (c *bcryptCache) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if !c.used[k] {
			delete(c.m, k)
		}
	}
}

func cacheKey(user, password string) [sha256.Size]byte {
	return sha256.Sum256([]byte(user + "\x00" + password))
}

var renderedUser = regexp.MustCompile(`\{user: "([^"\\]+)", password: "(\$2[aby]\$[^"\\]+)"`)

// seed remembers the hashes of a configuration the operator wrote before.
func (c *bcryptCache) seed(config string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev = map[string]string{}
	for _, m := range renderedUser.FindAllStringSubmatch(config, -1) {
		c.prev[m[1]] = m[2]
	}
}

func (c *bcryptCache) hash(user, password string) (string, error) {
	k := cacheKey(user, password)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used != nil {
		c.used[k] = true
	}
	if h, ok := c.m[k]; ok {
		return h, nil
	}
	if c.m == nil {
		c.m = map[[sha256.Size]byte]string{}
	}
	if h, ok := c.prev[user]; ok && hashCost(h) == costFor(password) && bcrypt.CompareHashAndPassword([]byte(h), []byte(password)) == nil {
		c.m[k] = h
		return h, nil
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), costFor(password))
	if err != nil {
		return "", err
	}
	c.m[k] = string(h)
	return string(h), nil
}

// hashCost is the cost of a bcrypt hash (-1 if it is not one).
func hashCost(h string) int {
	c, err := bcrypt.Cost([]byte(h))
	if err != nil {
		return -1
	}
	return c
}

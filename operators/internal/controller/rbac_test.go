package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/obscura-iot/obscura/services/testenv"
)

// operatorServiceAccount is who the suite's manager acts as: the chart's operator, bound to the
// ClusterRole that `make generate` writes from the reconcilers' RBAC markers (the chart ships
// that file as is). Every test of this package then fails where a reconciler needs a verb its
// markers do not grant — as the encoder autoscaler's patch of the Round did in a cluster
// ("cannot patch resource rounds") while every test here, run as the admin, passed.
var operatorServiceAccount = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: testAccountsSecret.Namespace, Name: "obscura-operator"}

// asOperator installs config/rbac/role.yaml and binds it to operatorServiceAccount, and returns
// admin's config impersonating that account (kube-apiserver authorizes with RBAC under envtest).
func asOperator(ctx context.Context, admin *rest.Config) (*rest.Config, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		return nil, err
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		return nil, fmt.Errorf("config/rbac/role.yaml: %w", err)
	}
	role.Name = "obscura-test-manager-role"
	if err := k8s.Create(ctx, &role); err != nil {
		return nil, err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{operatorServiceAccount},
	}
	if err := k8s.Create(ctx, binding); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", operatorServiceAccount.Namespace, operatorServiceAccount.Name)}
	return cfg, nil
}

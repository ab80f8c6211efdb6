package admissionpolicies

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

func TestServiceAccount(t *testing.T) {
	got, err := ServiceAccount("system:serviceaccount:openshift-operators:nmstate-ippool-pool-controller")
	want := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "openshift-operators", Name: "nmstate-ippool-pool-controller"}
	if err != nil || got != want {
		t.Fatalf("ServiceAccount = %+v, %v; want %+v", got, err, want)
	}
	for _, user := range []string{"kubernetes-admin", "system:serviceaccount:ns", "system:serviceaccount::name",
		"system:serviceaccount:ns:", "system:node:w1", "system:serviceaccount:a:b:c"} {
		if _, err := ServiceAccount(user); err == nil || !strings.Contains(err.Error(), user) {
			t.Errorf("ServiceAccount(%q) = %v, want an error that names the user", user, err)
		}
	}
}

package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func object(kind, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"name": name}}}
	for k, v := range fields {
		u.Object[k] = v
	}
	return u
}

func deployment(extra ...map[string]any) *unstructured.Unstructured {
	return object("Deployment", "pc", map[string]any{"apiVersion": "apps/v1", "spec": map[string]any{
		"selector": map[string]any{},
		"template": map[string]any{"spec": map[string]any{
			"serviceAccountName": "pc",
			"containers": []any{map[string]any{"name": "c", "image": "i",
				"args":         []any{"--webhook-cert-dir=/certs", "--mode=companion"},
				"ports":        []any{map[string]any{"name": "webhook", "containerPort": int64(9443)}},
				"volumeMounts": []any{map[string]any{"name": "cert", "mountPath": "/certs"}, map[string]any{"name": "tmp", "mountPath": "/tmp"}}}},
			"volumes": []any{map[string]any{"name": "cert", "secret": map[string]any{"secretName": "s"}}, map[string]any{"name": "tmp", "emptyDir": map[string]any{}}},
		}}}})
}

// A kind the bundle has no place for fails the generation, as does a
// binding of anyone but the pool controller: neither is dropped silently.
func TestClassifyRefusesWhatHasNoPlace(t *testing.T) {
	for name, objs := range map[string][]*unstructured.Unstructured{
		"an unknown kind":   {deployment(), object("MutatingWebhookConfiguration", "m", nil)},
		"no Deployment":     {object("Service", "s", nil)},
		"two Deployments":   {deployment(), deployment()},
		"a foreign binding": {deployment(), object("ClusterRole", "r", map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1"}), object("ClusterRoleBinding", "b", map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "roleRef": map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}, "subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "other", "namespace": "ns"}}})},
	} {
		c, err := classify(objs)
		if err == nil {
			_, _, _, err = c.permissions()
		}
		if err == nil {
			t.Errorf("%s: generated", name)
		}
	}
}

// The pool controller of the bundle reads the certificate where OLM
// mounts it, mounts nothing of cert-manager's, and requires the admission
// policies; its other volumes stay.
func TestOLMDeployment(t *testing.T) {
	c, err := classify([]*unstructured.Unstructured{deployment()})
	if err != nil {
		t.Fatal(err)
	}
	d := c.deployment
	if err := olmDeployment(d); err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	args := strings.Join(pod.Containers[0].Args, " ")
	if args != "--webhook-cert-dir="+olmCertDir+" --mode=companion --require-admission-policies" {
		t.Errorf("args %s", args)
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].Name != "tmp" || len(pod.Containers[0].VolumeMounts) != 1 || pod.Containers[0].VolumeMounts[0].Name != "tmp" {
		t.Errorf("volumes %+v, mounts %+v: want only tmp", pod.Volumes, pod.Containers[0].VolumeMounts)
	}
}

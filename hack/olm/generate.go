package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/lib/version"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// olmCertDir is where OLM mounts the certificate of the webhooks it
// serves for a CSV (tls.crt, tls.key).
const olmCertDir = "/tmp/k8s-webhook-server/serving-certs"

// identityRole is the ClusterRole the bundle ships that the identity
// bindings of deploy/olm/admission bind.
const identityRole = "nmstate-ippool-allocation-writer"

// bundleLabels are the bundle's annotations (metadata/annotations.yaml)
// and its image's labels (bundle.Dockerfile).
func bundleLabels(pkg, channel string) [][2]string {
	return [][2]string{
		{"operators.operatorframework.io.bundle.mediatype.v1", "registry+v1"},
		{"operators.operatorframework.io.bundle.manifests.v1", "manifests/"},
		{"operators.operatorframework.io.bundle.metadata.v1", "metadata/"},
		{"operators.operatorframework.io.bundle.package.v1", pkg},
		{"operators.operatorframework.io.bundle.channels.v1", channel},
		{"operators.operatorframework.io.bundle.channel.default.v1", channel},
	}
}

type generateOptions struct {
	kustomize, repo, out  string
	version, pkg, channel string
}

func generate(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o generateOptions
	fs.StringVar(&o.kustomize, "kustomize", "kustomize", "the kustomize binary")
	fs.StringVar(&o.repo, "repo", "../..", "the repository's root")
	fs.StringVar(&o.out, "out", "", "the bundle's directory (default: deploy/olm/bundle of the repository)")
	fs.StringVar(&o.version, "version", "0.1.0", "the operator's version (semver)")
	fs.StringVar(&o.pkg, "package", "nmstate-ippool", "the OLM package")
	fs.StringVar(&o.channel, "channel", "candidate", "the bundle's channel, and the package's default")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.out == "" {
		o.out = filepath.Join(o.repo, "deploy", "olm", "bundle")
	}
	return o.run()
}

func (o generateOptions) run() error {
	v, err := semver.Parse(o.version)
	if err != nil {
		return fmt.Errorf("-version %q: %w", o.version, err)
	}
	install, err := o.build("deploy/companion")
	if err != nil {
		return err
	}
	samples, err := o.build("deploy/samples/companion")
	if err != nil {
		return err
	}
	var csv operatorsv1alpha1.ClusterServiceVersion
	if err := readStrict(filepath.Join(o.repo, "deploy/olm/csv.yaml"), &csv); err != nil {
		return err
	}
	var checker rbacv1.ClusterRole
	if err := readStrict(filepath.Join(o.repo, "deploy/olm/checker_role.yaml"), &checker); err != nil {
		return err
	}
	b := &bundle{csv: &csv}
	if err := b.add(install, checker.Rules); err != nil {
		return err
	}
	csv.Name = fmt.Sprintf("%s.v%s", o.pkg, v)
	csv.Spec.Version = version.OperatorVersion{Version: v}
	if err := b.examples(samples); err != nil {
		return err
	}
	return b.write(o.out, bundleLabels(o.pkg, o.channel))
}

// build runs kustomize build on a directory of the repository.
func (o generateOptions) build(dir string) ([]*unstructured.Unstructured, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(o.kustomize, "build", filepath.Join(o.repo, dir))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w: %s", dir, err, stderr.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	var out []*unstructured.Unstructured
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, &obj)
		}
	}
}

func readStrict(path string, into any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// bundle is the bundle being made: the CSV and the files beside it.
type bundle struct {
	csv   *operatorsv1alpha1.ClusterServiceVersion
	crds  []*apiextensionsv1.CustomResourceDefinition
	files []*unstructured.Unstructured // other objects, in manifests/
}

// companion is deploy/companion's objects, by the place each takes in the
// bundle.
type companion struct {
	deployment   *appsv1.Deployment
	webhooks     *admissionregistrationv1.ValidatingWebhookConfiguration
	clusterRoles map[string]*rbacv1.ClusterRole
	roles        map[string]*rbacv1.Role
	crbs         []*rbacv1.ClusterRoleBinding
	rbs          []*rbacv1.RoleBinding
	services     []*unstructured.Unstructured
	crds         []*apiextensionsv1.CustomResourceDefinition
}

// dropped are the kinds the bundle leaves out, and why.
var dropped = map[string]string{
	"Namespace":                        "OLM installs into the namespace of the admin's OperatorGroup",
	"Certificate":                      "OLM makes and rotates the webhook's certificate",
	"Issuer":                           "OLM makes and rotates the webhook's certificate",
	"ValidatingAdmissionPolicy":        "a bundle has no place for it: the admin applies deploy/olm/admission, which the pool controller requires (--require-admission-policies)",
	"ValidatingAdmissionPolicyBinding": "a bundle has no place for it: the admin applies deploy/olm/admission, which the pool controller requires (--require-admission-policies)",
	"ServiceAccount":                   "OLM creates the service accounts the CSV's permissions name",
	"NetworkPolicy":                    "not an object every OLM installs from a bundle: docs/olm.md says how to add deploy/network-policy",
}

// classify sorts the objects of deploy/companion. Every kind has its
// place; an unknown one is an error, a decision to make here.
func classify(objs []*unstructured.Unstructured) (*companion, error) {
	c := &companion{clusterRoles: map[string]*rbacv1.ClusterRole{}, roles: map[string]*rbacv1.Role{}}
	for _, obj := range objs {
		if _, ok := dropped[obj.GetKind()]; ok {
			continue
		}
		var err error
		switch obj.GetKind() {
		case "CustomResourceDefinition":
			c.crds = append(c.crds, &apiextensionsv1.CustomResourceDefinition{})
			err = convert(obj, c.crds[len(c.crds)-1])
		case "Deployment":
			if c.deployment != nil {
				return nil, fmt.Errorf("a second Deployment, %s: the CSV holds one", obj.GetName())
			}
			c.deployment = &appsv1.Deployment{}
			err = convert(obj, c.deployment)
		case "ValidatingWebhookConfiguration":
			c.webhooks = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			err = convert(obj, c.webhooks)
		case "ClusterRole":
			r := &rbacv1.ClusterRole{}
			err = convert(obj, r)
			c.clusterRoles[r.Name] = r
		case "Role":
			r := &rbacv1.Role{}
			err = convert(obj, r)
			c.roles[r.Name] = r
		case "ClusterRoleBinding":
			c.crbs = append(c.crbs, &rbacv1.ClusterRoleBinding{})
			err = convert(obj, c.crbs[len(c.crbs)-1])
		case "RoleBinding":
			c.rbs = append(c.rbs, &rbacv1.RoleBinding{})
			err = convert(obj, c.rbs[len(c.rbs)-1])
		case "Service":
			c.services = append(c.services, obj)
		default:
			return nil, fmt.Errorf("%s %s: hack/olm has no place for this kind in the bundle", obj.GetKind(), obj.GetName())
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	if c.deployment == nil {
		return nil, errors.New("deploy/companion has no Deployment")
	}
	return c, nil
}

// permissions returns the rules of the roles bound to the pool
// controller's service account (OLM makes the roles and binds them), and
// the ClusterRoles bound so.
func (c *companion) permissions() (cluster, namespaced []rbacv1.PolicyRule, bound map[string]bool, err error) {
	sa := c.deployment.Spec.Template.Spec.ServiceAccountName
	onlySA := func(subjects []rbacv1.Subject) bool {
		return len(subjects) == 1 && subjects[0].Kind == rbacv1.ServiceAccountKind && subjects[0].Name == sa
	}
	bound = map[string]bool{}
	for _, crb := range c.crbs {
		r, ok := c.clusterRoles[crb.RoleRef.Name]
		if !onlySA(crb.Subjects) || !ok {
			return nil, nil, nil, fmt.Errorf("ClusterRoleBinding %s: the bundle holds only ClusterRoles of deploy/companion bound to %s", crb.Name, sa)
		}
		if !bound[r.Name] {
			cluster = append(cluster, r.Rules...)
			bound[r.Name] = true
		}
	}
	for _, rb := range c.rbs {
		r, ok := c.roles[rb.RoleRef.Name]
		if rb.RoleRef.Kind != "Role" || !ok || !onlySA(rb.Subjects) {
			return nil, nil, nil, fmt.Errorf("RoleBinding %s: the bundle holds only Roles of deploy/companion bound to %s", rb.Name, sa)
		}
		namespaced = append(namespaced, r.Rules...)
	}
	return cluster, namespaced, bound, nil
}

// add turns the objects of deploy/companion into the CSV's install
// strategy, its webhooks and CRDs, and the files beside it.
func (b *bundle) add(objs []*unstructured.Unstructured, checkerRules []rbacv1.PolicyRule) error {
	c, err := classify(objs)
	if err != nil {
		return err
	}
	b.crds = c.crds
	clusterRules, rules, bound, err := c.permissions()
	if err != nil {
		return err
	}
	if _, ok := c.clusterRoles[identityRole]; !ok {
		return fmt.Errorf("deploy/companion has no ClusterRole %s, which the identity bindings bind", identityRole)
	}
	// A ClusterRole not bound to the pool controller is for others to
	// bind (metrics); the identity role is shipped too: the identity
	// bindings of deploy/olm/admission bind it.
	for _, name := range sortedKeys(c.clusterRoles) {
		if !bound[name] || name == identityRole {
			if err := b.file(c.clusterRoles[name]); err != nil {
				return err
			}
		}
	}
	if err := b.webhooksAndServices(c); err != nil {
		return err
	}
	d := c.deployment
	if err := olmDeployment(d); err != nil {
		return err
	}
	sa := d.Spec.Template.Spec.ServiceAccountName
	b.csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{
		StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
		StrategySpec: operatorsv1alpha1.StrategyDetailsDeployment{
			DeploymentSpecs: []operatorsv1alpha1.StrategyDeploymentSpec{{Name: d.Name, Label: d.Labels, Spec: d.Spec}},
			Permissions:     []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: sa, Rules: rules}},
			// The checker's rules on top of the pool controller's.
			ClusterPermissions: []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: sa,
				Rules: append(slices.Clone(checkerRules), clusterRules...)}},
		},
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		b.csv.Spec.RelatedImages = append(b.csv.Spec.RelatedImages, operatorsv1alpha1.RelatedImage{Name: c.Name, Image: c.Image})
		if b.csv.Annotations["containerImage"] == "" {
			b.csv.Annotations["containerImage"] = c.Image
		}
	}
	return b.ownCRDs()
}

// webhooksAndServices writes the webhook configuration as the CSV's
// webhooks, and every Service but the webhook's (OLM serves the webhooks
// through a Service of its own) beside it.
func (b *bundle) webhooksAndServices(c *companion) error {
	webhookService := map[string]bool{}
	if c.webhooks != nil {
		defs, err := webhookDefinitions(c.webhooks, c.deployment)
		if err != nil {
			return err
		}
		b.csv.Spec.WebhookDefinitions = defs
		for _, w := range c.webhooks.Webhooks {
			webhookService[w.ClientConfig.Service.Name] = true
		}
	}
	for _, s := range c.services {
		if !webhookService[s.GetName()] {
			if err := b.file(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// olmDeployment adapts the pool controller's Deployment to OLM: the
// webhook's certificate is the one OLM mounts, and the pool controller is
// ready only once the admin installed the admission policies the bundle
// cannot carry (deploy/olm/admission).
func olmDeployment(d *appsv1.Deployment) error {
	pod := &d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return fmt.Errorf("the Deployment %s has %d containers; hack/olm adapts one", d.Name, len(pod.Containers))
	}
	c := &pod.Containers[0]
	certDir := ""
	for i, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--webhook-cert-dir="); ok {
			certDir = v
			c.Args[i] = "--webhook-cert-dir=" + olmCertDir
		}
	}
	if certDir == "" {
		return fmt.Errorf("the Deployment %s has no --webhook-cert-dir to point at OLM's certificate", d.Name)
	}
	c.Args = append(c.Args, "--require-admission-policies")
	var certVolume string
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		if m.MountPath == certDir {
			certVolume = m.Name
			return true
		}
		return false
	})
	pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == certVolume })
	if len(pod.Volumes) == 0 {
		pod.Volumes = nil
	}
	if len(c.VolumeMounts) == 0 {
		c.VolumeMounts = nil
	}
	return nil
}

// webhookDefinitions turns the webhook configuration into the CSV's
// webhooks, which OLM serves with a certificate and a Service of its own
// and restricts to the OperatorGroup's namespaces (none of these is
// namespaced). OLM's definitions carry no matchConditions: every
// request of a webhook's rules reaches the pool controller, which
// decides alike (it checks what changed itself).
func webhookDefinitions(w *admissionregistrationv1.ValidatingWebhookConfiguration, d *appsv1.Deployment) ([]operatorsv1alpha1.WebhookDescription, error) {
	var port int32
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == "webhook" {
			port = p.ContainerPort
		}
	}
	if port == 0 {
		return nil, fmt.Errorf("the Deployment %s has no container port named webhook", d.Name)
	}
	var out []operatorsv1alpha1.WebhookDescription
	for _, h := range w.Webhooks {
		if h.ClientConfig.Service == nil || h.ClientConfig.Service.Path == nil {
			return nil, fmt.Errorf("webhook %s is not served by a Service path of the pool controller", h.Name)
		}
		target := intstr.FromInt32(port)
		out = append(out, operatorsv1alpha1.WebhookDescription{
			GenerateName:            h.Name,
			Type:                    operatorsv1alpha1.ValidatingAdmissionWebhook,
			DeploymentName:          d.Name,
			ContainerPort:           443,
			TargetPort:              &target,
			Rules:                   h.Rules,
			FailurePolicy:           h.FailurePolicy,
			MatchPolicy:             h.MatchPolicy,
			ObjectSelector:          h.ObjectSelector,
			SideEffects:             h.SideEffects,
			TimeoutSeconds:          h.TimeoutSeconds,
			AdmissionReviewVersions: h.AdmissionReviewVersions,
			WebhookPath:             h.ClientConfig.Service.Path,
		})
	}
	return out, nil
}

// ownCRDs completes the CSV's owned CRDs (named, with display names and
// descriptions, in deploy/olm/csv.yaml) with their kinds and served
// storage versions, and requires that the two lists name the same CRDs.
func (b *bundle) ownCRDs() error {
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range b.crds {
		byName[crd.Name] = crd
	}
	owned := b.csv.Spec.CustomResourceDefinitions.Owned
	if len(owned) != len(byName) {
		return fmt.Errorf("deploy/olm/csv.yaml describes %d CRDs, deploy/companion installs %d: describe each", len(owned), len(byName))
	}
	for i := range owned {
		crd, ok := byName[owned[i].Name]
		if !ok {
			return fmt.Errorf("deploy/olm/csv.yaml describes CRD %s, which deploy/companion does not install", owned[i].Name)
		}
		owned[i].Kind = crd.Spec.Names.Kind
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				owned[i].Version = v.Name
			}
		}
	}
	return nil
}

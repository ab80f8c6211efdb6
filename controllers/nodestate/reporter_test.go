package nodestate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/nodestate"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var (
	env *envtest.Env
	k   client.Client
)

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, func(s *envtest.Suite) { env, k = s.Env, s.Client }))
}

// network is a node's network as the reporter reads it.
type network struct {
	mu    sync.Mutex
	state string
	err   error
	reads int
}

func (n *network) Show(context.Context) ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reads++
	return []byte(n.state), n.err
}

func (n *network) set(state string, err error) {
	n.mu.Lock()
	n.state, n.err = state, err
	n.mu.Unlock()
}

func (n *network) readCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reads
}

func nns(name string) func() (*nncev1beta1.NodeNetworkState, error) {
	return func() (*nncev1beta1.NodeNetworkState, error) {
		var s nncev1beta1.NodeNetworkState
		err := k.Get(context.Background(), types.NamespacedName{Name: name}, &s)
		return &s, err
	}
}

// startReporter runs a reporter for node until stop is called.
func startReporter(t *testing.T, node string, net *network, refresh time.Duration) (*nodestate.Refreshes, func()) {
	t.Helper()
	mgr, err := env.NewManager()
	Expect(err).NotTo(HaveOccurred())
	r := nodestate.New(mgr, node, net)
	r.Refresh = refresh
	refreshes := nodestate.NewRefreshes()
	Expect(r.SetupWithManager(mgr, refreshes, nodestate.SetupOptions{SkipNameValidation: true})).To(Succeed())
	run := envtest.RunManager(mgr)
	stopped := false
	stop := func() {
		if !stopped {
			Expect(run()).To(Succeed())
			stopped = true
		}
	}
	t.Cleanup(stop)
	return refreshes, stop
}

// TestReporter: the NNS is created owned by the node, written when the
// state changes and not otherwise however often it is read, at once on a
// nudge, and Failing with the error when the state cannot be read.
func TestReporter(t *testing.T) {
	RegisterTestingT(t)
	SetDefaultEventuallyTimeout(30 * time.Second)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nns01"}}
	Expect(k.Create(context.Background(), node)).To(Succeed())
	net := &network{state: `{"interfaces":[{"name":"eth1","state":"up"}]}`}
	_, stop := startReporter(t, "nns01", net, 100*time.Millisecond)
	Eventually(func(g Gomega) {
		s, err := nns("nns01")()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(s.Status.CurrentState.Raw)).To(ContainSubstring("eth1"))
		g.Expect(s.OwnerReferences).To(ConsistOf(HaveField("UID", node.UID)))
		g.Expect(s.Status.Conditions.Find(shared.NodeNetworkStateConditionAvailable).Status).To(Equal(corev1.ConditionTrue))
	}).Should(Succeed())
	first, _ := nns("nns01")()
	reads := net.readCount()
	Consistently(func() string { s, _ := nns("nns01")(); return s.ResourceVersion }, time.Second).Should(Equal(first.ResourceVersion),
		"an unchanged state is not written again")
	Expect(net.readCount()).To(BeNumerically(">", reads+3), "the state is read every refresh period")
	stop()

	// With an hour between refreshes, only a nudge explains an update.
	refreshes, _ := startReporter(t, "nns01", net, time.Hour)
	Eventually(net.readCount).Should(BeNumerically(">", reads+4), "the new reporter reads the state once")
	net.set(`{"interfaces":[{"name":"eth1","state":"up","ipv4":{"address":[{"ip":"10.0.0.1","prefix-length":24}]}}]}`, nil)
	refreshes.Refresh("nns01")
	Eventually(func() string { s, _ := nns("nns01")(); return string(s.Status.CurrentState.Raw) }, 5*time.Second).Should(ContainSubstring("10.0.0.1"))

	net.set("", errors.New("NetworkManager is not running"))
	refreshes.Refresh("nns01")
	Eventually(func() string {
		s, _ := nns("nns01")()
		if c := s.Status.Conditions.Find(shared.NodeNetworkStateConditionFailing); c != nil && c.Status == corev1.ConditionTrue {
			return c.Message
		}
		return ""
	}, 5*time.Second).Should(Equal("reading the node's network state failed: NetworkManager is not running"))
	s, _ := nns("nns01")()
	Expect(string(s.Status.CurrentState.Raw)).To(ContainSubstring("10.0.0.1"), "the last state is kept")
}

// TestRefreshRequestAnswered: a request for the state (the refresh label,
// as the pool controller sets it when it waits for evidence) is answered
// with a publication even when nothing changed, each stamped later than
// the one before on the node's clock, however quick they come; Settle runs
// first, under the network lock.
func TestRefreshRequestAnswered(t *testing.T) {
	RegisterTestingT(t)
	SetDefaultEventuallyTimeout(30 * time.Second)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nns02"}}
	Expect(k.Create(context.Background(), node)).To(Succeed())
	net := &network{state: `{"interfaces":[{"name":"eth1","state":"up"}]}`}
	mgr, err := env.NewManager()
	Expect(err).NotTo(HaveOccurred())
	r := nodestate.New(mgr, "nns02", net)
	r.Refresh, r.NetworkLock = time.Hour, &sync.Mutex{}
	var settled atomic.Int32
	r.Settle = func(context.Context, bool) error {
		if r.NetworkLock.(*sync.Mutex).TryLock() {
			return errors.New("settled without the network lock")
		}
		settled.Add(1)
		return nil
	}
	Expect(r.SetupWithManager(mgr, nodestate.NewRefreshes(), nodestate.SetupOptions{SkipNameValidation: true})).To(Succeed())
	stop := envtest.RunManager(mgr)
	t.Cleanup(func() { Expect(stop()).To(Succeed()) })
	Eventually(func() (*nncev1beta1.NodeNetworkState, error) { return nns("nns02")() }).Should(
		HaveField("Status.LastSuccessfulUpdateTime.Time", Not(BeZero())))
	Expect(settled.Load()).To(BeEquivalentTo(1), "the first publication settles first")
	prev, _ := nns("nns02")()
	for i := 1; i <= 3; i++ {
		s, _ := nns("nns02")()
		s.Labels = map[string]string{"nmstate.io/force-nns-refresh": fmt.Sprint(i)}
		Expect(k.Update(context.Background(), s)).To(Succeed())
		Eventually(func() time.Time { s, _ := nns("nns02")(); return s.Status.LastSuccessfulUpdateTime.Time }).Should(
			BeTemporally(">", prev.Status.LastSuccessfulUpdateTime.Time), "request %d answered with a later state", i)
		prev, _ = nns("nns02")()
		Expect(settled.Load()).To(BeEquivalentTo(i + 1))
	}
}

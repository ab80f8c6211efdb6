// Package eventnote keeps the notes of Events within what the API server
// accepts. An events.k8s.io/v1 Event's note holds at most 1024 bytes; the
// API server refuses a longer one, and the broadcaster drops that Event
// without retrying, so the Warning an admin most needs (a long list of
// addresses still carried, say) would never be seen. Every recorder of the
// project goes through Recorder, which cuts a note to fit and says so.
package eventnote

import (
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// MaxNote is the longest note the API server accepts, in bytes.
const MaxNote = 1024

// cut ends a note that was cut to fit.
const cut = " … (cut to fit an Event; the object's conditions and the controller's log hold the whole text)"

// Recorder is an events.EventRecorder whose notes always fit.
type Recorder struct {
	events.EventRecorder
}

// New wraps r.
func New(r events.EventRecorder) events.EventRecorder { return Recorder{EventRecorder: r} }

// Eventf records an Event whose note is note formatted with args, cut to
// MaxNote bytes when longer.
func (r Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", Fit(fmt.Sprintf(note, args...)))
}

// Fit returns s when it holds at most MaxNote bytes, else its longest
// prefix that ends on a whole character and leaves room for the marker
// that says it was cut.
func Fit(s string) string {
	if len(s) <= MaxNote {
		return s
	}
	n := MaxNote - len(cut)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + cut
}

// Node is the Node named node, as the related object of an Event about
// one node on an object many nodes share (a pool, a pooled policy):
// events.k8s.io's recorder folds Events of the same objects, reason and
// action into one series that keeps the first one's note, so each
// node's Event must name its node to be kept.
func Node(node string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
}

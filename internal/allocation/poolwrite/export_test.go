package poolwrite

import "k8s.io/apimachinery/pkg/types"

// TogetherForming says how many callers of w.Together wait in the forming
// group of the pool incarnation uid.
func TogetherForming(w *Writer, uid types.UID) int { return forming(&w.together, string(uid)) }

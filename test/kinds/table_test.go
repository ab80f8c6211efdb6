package kinds_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// columns maps each kind to its column in docs/protocol.md's table "Every
// kind of holder" (after the way's).
var columns = map[string]int{"served": 1, "self-allocated": 1, "pooled": 2, "claim": 3}

// TestTableSaysWhatRuns keeps docs/protocol.md's table "Every kind of
// holder" true: a cell names TestEveryKind/<way> exactly where that way
// runs against the column's kinds.
func TestTableSaysWhatRuns(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Every kind of holder\n")
	if !ok {
		t.Fatal(`docs/protocol.md has no section "Every kind of holder"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows [][]string
	for line := range strings.SplitSeq(section, "\n") {
		if cells := strings.Split(strings.Trim(line, "|"), " | "); strings.HasPrefix(line, "| ") && len(cells) == 4 {
			rows = append(rows, cells)
		}
	}
	for _, wy := range ways {
		named := "`TestEveryKind/" + wy.name + "`"
		for _, kd := range kinds {
			runs := wy.na[kd.name] == ""
			cells := 0
			for _, row := range rows {
				if strings.Contains(row[columns[kd.name]], named) {
					cells++
				}
			}
			switch {
			case runs && cells != 1:
				t.Errorf("%s runs against %s: its column names it in %d rows, want 1", wy.name, kd.name, cells)
			case !runs && cells != 0:
				t.Errorf("%s does not run against %s (%s), but its column names it", wy.name, kd.name, wy.na[kd.name])
			}
		}
	}
}

// Package cli holds what the project's command-line tools share: flag
// parsing that lets flags and arguments mix, as kubectl does.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
)

// ErrUsage marks a command line that cannot be understood; tools exit 2.
var ErrUsage = errors.New("usage")

// Parse parses args with fs, allowing flags before, between and after the
// positional arguments, and returns the positional arguments. It fails
// with an error wrapping ErrUsage unless there are between least and most
// of them (most < 0: no limit). flag.ErrHelp is returned as is.
func Parse(fs *flag.FlagSet, args []string, least, most int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %w", ErrUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) < least || (most >= 0 && len(pos) > most) {
		want := fmt.Sprintf("%d to %d", least, most)
		switch {
		case most < 0:
			want = fmt.Sprintf("at least %d", least)
		case least == most:
			want = strconv.Itoa(least)
		}
		return nil, fmt.Errorf("%w: %s takes %s argument(s), got %d %q", ErrUsage, fs.Name(), want, len(pos), pos)
	}
	return pos, nil
}

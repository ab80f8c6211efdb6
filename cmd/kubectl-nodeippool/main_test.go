package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestExplain(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{
			name: "seed pool with three allocations",
			args: []string{"explain", "--cidr", "10.10.11.0/24", "--start", "10.10.11.4", "--end", "10.10.11.10",
				"--exclude", "10.10.11.5,10.10.11.7", "--allocate", "3"},
			stdout: []string{"size:          5 assignable of 7 offsets", "allocated:     3, free 2",
				"10.10.11.4 (offset 0), 10.10.11.6 (offset 2), 10.10.11.8 (offset 4)",
				"1       10.10.11.5   excluded", "5       10.10.11.9   free"},
		},
		{
			name:   "limit",
			args:   []string{"explain", "--cidr", "2001:db8::/64", "--limit", "2"},
			stdout: []string{"assignable of 18446744073709551615 offsets", "0       2001:db8::1  free", "... 18446744073709551613 more offsets"},
		},
		{name: "exhausted", args: []string{"explain", "--cidr", "10.0.0.0/30", "--allocate", "3"}, code: 1, stderr: "allocation 3: range is full"},
		{name: "invalid range", args: []string{"explain", "--cidr", "10.0.0.1/24"}, code: 1, stderr: "write 10.0.0.0/24"},
		{name: "bad snapshot", args: []string{"explain", "--cidr", "10.0.0.0/24", "--allocated", "xyz"}, code: 1, stderr: "--allocated: invalid snapshot"},
		{name: "missing cidr", args: []string{"explain"}, code: 2, stderr: "--cidr is required"},
		{name: "no subcommand", args: nil, code: 2, stderr: "Usage:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(tt.args, &out, &errOut); code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tt.code, errOut.String())
			}
			for _, want := range tt.stdout {
				if !strings.Contains(out.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, out.String())
				}
			}
			if !strings.Contains(errOut.String(), tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, errOut.String())
			}
		})
	}
}

package envtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ProcStat reads a process's name, parent and CPU time (user and system)
// from /proc/<pid>/stat; pid may be "self".
func ProcStat(pid string) (name, parent string, cpu time.Duration, ok bool) {
	raw, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "", "", 0, false
	}
	s := string(raw)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < 0 {
		return "", "", 0, false
	}
	fields := strings.Fields(s[closing+2:])
	// fields[1] is the parent, fields[11] and [12] user and system time.
	if len(fields) < 13 {
		return "", "", 0, false
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return s[open+1 : closing], fields[1], time.Duration(utime+stime) * time.Second / 100, true // USER_HZ
}

// ProcRSS returns a process's resident memory in bytes (VmRSS of
// /proc/<pid>/status), or 0 when it cannot be read.
func ProcRSS(pid string) uint64 { return procStatus(pid, "VmRSS:") }

// ProcRSSAnon returns the anonymous part of a process's resident memory
// in bytes (RssAnon: its heap and stacks, not the pages of its binary,
// which every process of that binary shares), or 0.
func ProcRSSAnon(pid string) uint64 { return procStatus(pid, "RssAnon:") }

// procStatus returns the size in bytes of the field of /proc/<pid>/status,
// given in kB, or 0 when it cannot be read.
func procStatus(pid, field string) uint64 {
	raw, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

#!/usr/bin/env bash
# failure-digest.sh LOG prints, from the output of a failed `go test` run,
# why tests failed: each failing test, the assertion lines under it (with
# a few lines of their message), panics, timeouts and the end-to-end
# suite's own digest. .ci/run prints it last, where a CI log cut to its end
# still shows it; the log lines of the processes under test are left out.
set -euo pipefail
log=${1:?usage: failure-digest.sh LOG}
echo
echo "=== why the tests failed (a digest of $log)"
awk '
	/"level":/ { next }
	/^Why the specs failed:/ { spec = 1; print; next }
	spec && /^(ok|FAIL|---|PASS|=== )/ { spec = 0 }
	spec { print; next }
	/^[[:space:]]*[A-Za-z0-9_]+_test\.go:[0-9]+:/ { print; more = 6; next }
	/^(panic:|fatal error:|panic: test timed out)/ { print; more = 12; next }
	/^[[:space:]]*--- FAIL/ || /^FAIL/ { print; more = 0; next }
	more > 0 { print; more--; next }
' "$log"

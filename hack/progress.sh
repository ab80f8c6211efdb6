#!/usr/bin/env bash
# progress.sh WHAT COMMAND... runs COMMAND and, while it runs, prints a line
# every 20 seconds saying that WHAT is still going, so that a long build is
# not minutes of silence. It exits with COMMAND's status.
set -uo pipefail
what=$1
shift
start=$SECONDS
"$@" &
pid=$!
trap 'kill "$pid" 2>/dev/null; exit 130' INT TERM
next=20
while kill -0 "$pid" 2>/dev/null; do
	sleep 1
	if ((SECONDS - start >= next)) && kill -0 "$pid" 2>/dev/null; then
		printf '  ... still %s (%ds)\n' "$what" $((SECONDS - start))
		next=$((next + 20))
	fi
done
wait "$pid"
status=$?
((status == 0)) && printf '  done %s in %ds\n' "$what" $((SECONDS - start))
exit "$status"

#!/usr/bin/env bash
# verify.sh fails when `make manifests generate` or gofmt would change a file.
# It compares the tree before and after regenerating, so it works on a dirty
# working copy as well as in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

tree_hash() { find api deploy -type f -print0 | sort -z | xargs -0 sha256sum; }

unformatted=$(gofmt -s -l $(git ls-files --cached --others --exclude-standard '*.go'))
if [[ -n "$unformatted" ]]; then
	echo "gofmt would change these files; run 'make fmt':" >&2
	echo "$unformatted" >&2
	exit 1
fi

before=$(tree_hash)
make --no-print-directory manifests generate >/dev/null
after=$(tree_hash)
if [[ "$before" != "$after" ]]; then
	echo "generated files were stale; 'make manifests generate' changed:" >&2
	diff <(echo "$before") <(echo "$after") >&2 || true
	exit 1
fi
echo "verify: generated files and formatting are up to date"

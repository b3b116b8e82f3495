#!/bin/sh
# crashing: writes the first solution file, then exits 3 (the run fails; nothing is published).
set -eu
. "$(dirname "$0")/lib.sh"
first=$(sol_files | head -n 1)
[ -z "$first" ] || put "$first"
echo "crashing on purpose after a partial edit" >&2
exit 3

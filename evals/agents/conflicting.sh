#!/bin/sh
# conflicting: applies the solution in the sandbox, but meanwhile "the user" rewrites every file
# it touches in the real checkout (every line prefixed), so every accept must conflict.
set -eu
. "$(dirname "$0")/lib.sh"
: "${HUNKGATE_EVAL_CHECKOUT:?not set}"
{ sol_files; sol_deletes; } | while IFS= read -r f; do
    c=$HUNKGATE_EVAL_CHECKOUT/$f
    if [ -f "$c" ]; then
        sed 's/^/user: /' "$c" >"$c.tmp" && mv "$c.tmp" "$c"
    else
        mkdir -p "$(dirname "$c")"
        printf "the user's own file\n" >"$c"
    fi
done
apply_solution

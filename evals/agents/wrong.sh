#!/bin/sh
# wrong: touches exactly the files the solution touches, but with a plausible wrong edit: a
# stray line appended to each (files it should create get that line alone; files it should
# delete are edited instead).
set -eu
. "$(dirname "$0")/lib.sh"
{ sol_files; sol_deletes; } | while IFS= read -r f; do
    mkdir -p "$(dirname "$f")"
    printf 'TODO: handled elsewhere\n' >>"$f"
done

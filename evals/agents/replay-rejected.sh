#!/bin/sh
# replay-rejected: on a replay task (hunkgate-evals replay), proposes exactly what the user
# rejected (the task's rejected/ and rejected.delete) and nothing they kept.
set -eu
. "$(dirname "$0")/lib.sh"
sol=$HUNKGATE_EVAL_TASK/rejected
apply_solution

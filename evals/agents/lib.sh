# Shared by the reference agents; sourced, not run. The runner (hunkgate-evals run) gives every
# agent, through the hub's --agent-env:
#   HUNKGATE_EVAL_TASK      the task directory (task.toml, repo/, solution/, …)
#   HUNKGATE_EVAL_CHECKOUT  the user's checkout the hub applies accepted hunks to
#   HUNKGATE_EVAL_RUN_FILE  a file holding the 1-based number of this run within the task
# The agent's working directory is the hub's sandbox; HUNKGATE_URL and HUNKGATE_AGENT_TOKEN are
# the hub's agent API.
: "${HUNKGATE_EVAL_TASK:?not set: run the reference agents through hunkgate-evals run}"
T=$HUNKGATE_EVAL_TASK
run=$(cat "${HUNKGATE_EVAL_RUN_FILE:-/nonexistent}" 2>/dev/null || echo 1)
# solution-run<N>/ (and .delete, .feedback beside it) for run N when present, else solution/.
sol=$T/solution
if [ -d "$T/solution-run$run" ] || [ -f "$T/solution-run$run.delete" ]; then
    sol=$T/solution-run$run
fi

# The solution's files to write, relative, sorted, one a line.
sol_files() {
    [ -d "$sol" ] || return 0
    (cd "$sol" && find . -type f | sed 's|^\./||' | LC_ALL=C sort)
}

# The solution's files to delete, one a line.
sol_deletes() {
    [ -f "$sol.delete" ] || return 0
    grep -v '^$' "$sol.delete" || true
}

# The newest review comment on this session's suggestions (from GET /agent/feedback).
feedback_comment() {
    curl -fsS -H "Authorization: Bearer $HUNKGATE_AGENT_TOKEN" "$HUNKGATE_URL/agent/feedback" |
        tr ',{}' '\n\n\n' | sed -n 's/^"comment":"\([^"]*\)".*$/\1/p' | tail -n 1
}

# put REL: write the solution's version of REL into the working directory. With a
# <solution>.feedback marker, @COMMENT@ becomes the reviewer's latest comment.
put() {
    mkdir -p "$(dirname "$1")"
    if [ -f "$sol.feedback" ]; then
        c=$(feedback_comment)
        [ -n "$c" ] || { echo "no review comment to follow" >&2; exit 4; }
        sed "s|@COMMENT@|$c|g" "$sol/$1" >"$1"
    else
        cp "$sol/$1" "$1"
    fi
}

apply_solution() {
    sol_files | while IFS= read -r f; do put "$f"; done
    sol_deletes | while IFS= read -r f; do rm -f "$f"; done
}

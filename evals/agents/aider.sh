#!/bin/sh
# aider (PyPI aider-chat) as a hunkgate command agent, against an OpenAI-compatible model server
# on this machine, with nothing else on the network: no update check, no analytics, no model
# database download, no commits (the hub turns what aider leaves in the sandbox into hunks).
#
#   hunkgate serve --agent 'sh /path/to/hunkgate/evals/agents/aider.sh http://127.0.0.1:8088/v1 local {prompt}'
#
# $1: the server's base URL; $2: the model name it serves; $3: the prompt. `aider` must be on the
# agent's PATH. tests/tests/real_agents.rs runs exactly this script through a real hub, and
# `hunkgate-evals run --agent` scores it.
set -eu
[ $# -eq 3 ] || { echo "usage: aider.sh BASE_URL MODEL PROMPT" >&2; exit 2; }
url=$1 model=$2 prompt=$3
command -v aider >/dev/null 2>&1 || { echo "aider.sh: aider is not on PATH (pip install aider-chat)" >&2; exit 127; }

# aider's history files and the model's metadata live outside the sandbox, so that only the
# agent's edits become hunks.
work=$(mktemp -d "${TMPDIR:-/tmp}/hunkgate-aider.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Without metadata for the model, aider and litellm fetch their model databases from the web.
printf '{"openai/%s": {"max_input_tokens": 8192, "max_output_tokens": 2048, "input_cost_per_token": 0, "output_cost_per_token": 0, "litellm_provider": "openai", "mode": "chat"}}\n' \
    "$model" >"$work/models.json"
export LITELLM_LOCAL_MODEL_COST_MAP=True
# A bounded answer: a small model can otherwise ramble until its context is full.
printf -- '- name: openai/%s\n  extra_params:\n    max_tokens: 512\n' "$model" >"$work/settings.yml"

aider --yes-always --no-auto-commits --no-dirty-commits --edit-format whole \
    --model "openai/$model" --openai-api-base "$url" --openai-api-key x \
    --model-metadata-file "$work/models.json" --model-settings-file "$work/settings.yml" \
    --no-show-model-warnings \
    --no-check-update --no-analytics --no-show-release-notes --no-gitignore \
    --no-detect-urls --no-fancy-input --no-pretty --map-tokens 0 \
    --input-history-file "$work/input.history" --chat-history-file "$work/chat.history.md" \
    --message "$prompt"

#!/bin/sh
# opencode (npm opencode-ai) as a hunkgate ACP agent (`opencode acp`, the Agent Client
# Protocol on its stdio), against an OpenAI-compatible model server on this machine (it must
# stream tool calls: llama.cpp's `llama-server --jinja` does), and nothing else on the network:
# no update check, no model list download, no default plugins, no plugin package install, no
# LSP downloads, no sharing. `hunkgate mcp` needs no configuration here: the hub offers it in
# ACP's `session/new`.
#
#   hunkgate serve --acp 'sh /path/to/hunkgate/evals/agents/opencode-acp.sh http://127.0.0.1:8080/v1 local'
#
# $1: the server's base URL; $2: the model name it serves. `opencode` must be on the agent's
# PATH. tests/tests/real_agents.rs runs exactly this script through a real hub.
set -eu
[ $# -eq 2 ] || { echo "usage: opencode-acp.sh BASE_URL MODEL" >&2; exit 2; }
url=$1 model=$2
case "$url$model" in *[\"\\]*) echo "opencode-acp.sh: no quotes or backslashes in URL or model" >&2; exit 2 ;; esac
command -v opencode >/dev/null 2>&1 || { echo "opencode-acp.sh: opencode is not on PATH (npm install -g opencode-ai)" >&2; exit 127; }

# The whole configuration, inline: nothing is written into the sandbox. Every permission is
# "allow" in opencode itself: the hub's sandbox is the boundary, and the hub's own policy
# (`[acp] ask`) decides what is put to the reviewer.
OPENCODE_CONFIG_CONTENT=$(cat <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "snapshot": false,
  "provider": {
    "hunkgate-local": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "local model server",
      "options": {"baseURL": "$url", "apiKey": "x"},
      "models": {"$model": {"name": "$model", "tool_call": true, "limit": {"context": 8192, "output": 256}}}
    }
  },
  "model": "hunkgate-local/$model",
  "small_model": "hunkgate-local/$model"
}
JSON
)
export OPENCODE_CONFIG_CONTENT
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1 \
    OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_CLAUDE_CODE=1 \
    OPENCODE_DISABLE_EXTERNAL_SKILLS=1
export npm_config_offline=true

exec opencode acp --pure

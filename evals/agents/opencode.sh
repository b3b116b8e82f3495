#!/bin/sh
# opencode (npm opencode-ai) as a hunkgate command agent, against an OpenAI-compatible model
# server on this machine (it must stream tool calls: llama.cpp's `llama-server --jinja` does,
# llama-cpp-python's server does not), with `hunkgate mcp` registered as an MCP server, and
# nothing else on the network: no update check, no model list download, no default plugins, no
# plugin package install, no LSP downloads, no sharing.
#
#   hunkgate serve --agent 'sh /path/to/hunkgate/evals/agents/opencode.sh http://127.0.0.1:8080/v1 local {prompt}'
#
# $1: the server's base URL; $2: the model name it serves; $3: the prompt. `opencode` must be on
# the agent's PATH, and `hunkgate` too for the MCP server (without it opencode runs without).
# tests/tests/real_agents.rs runs exactly this script through a real hub, and
# `hunkgate-evals run --agent` scores it.
set -eu
[ $# -eq 3 ] || { echo "usage: opencode.sh BASE_URL MODEL PROMPT" >&2; exit 2; }
url=$1 model=$2 prompt=$3
case "$url$model" in *[\"\\]*) echo "opencode.sh: no quotes or backslashes in URL or model" >&2; exit 2 ;; esac
command -v opencode >/dev/null 2>&1 || { echo "opencode.sh: opencode is not on PATH (npm install -g opencode-ai)" >&2; exit 127; }

mcp='"enabled": false, "command": ["hunkgate", "mcp"]'
if command -v hunkgate >/dev/null 2>&1; then
    mcp='"enabled": true, "command": ["hunkgate", "mcp"]'
else
    echo "opencode.sh: hunkgate is not on PATH; running without its MCP server" >&2
fi

# The whole configuration, inline: nothing is written into the sandbox.
OPENCODE_CONFIG_CONTENT=$(cat <<EOF
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
  "small_model": "hunkgate-local/$model",
  "mcp": {"hunkgate": {"type": "local", $mcp}}
}
EOF
)
export OPENCODE_CONFIG_CONTENT
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1 \
    OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_CLAUDE_CODE=1 \
    OPENCODE_DISABLE_EXTERNAL_SKILLS=1
# opencode installs its plugin package into each configuration directory with its own copy of
# npm, in the background; offline, that finds nothing and fails harmlessly (a warning in its log).
export npm_config_offline=true

# --auto: approve what the configuration does not deny (the hub's sandbox is the boundary);
# --title: no extra model call to name the session.
exec opencode run --pure --auto --title hunkgate --model "hunkgate-local/$model" "$prompt"

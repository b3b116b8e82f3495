#!/usr/bin/env python3
"""A real MCP client -- the official Python SDK (`mcp`, pinned in scripts/install-test-deps) --
driving `hunkgate mcp` over stdio, for tests/tests/mcp.rs. It prints nothing on stdout; results
go to the JSON files named on the command line.

    mcp_client.py probe HUNKGATE_BIN OUT.json
        initialize, tools/list and one list_suggestions call.

    mcp_client.py agent HUNKGATE_BIN OUT_DIR
        What an agent in a hunkgate run does: read the feedback, publish, look at the suggestion
        every way there is, make a few bad calls; write OUT_DIR/published.json. Then poll
        get_feedback until the reviewer has decided a hunk and write OUT_DIR/final.json.

`hunkgate mcp` gets this process's whole environment (HUNKGATE_URL and HUNKGATE_AGENT_TOKEN when
it runs inside an agent run).
"""

import asyncio
import json
import os
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError

# How long the agent waits for the reviewer's decision (the Rust test decides within seconds).
DECISION_TIMEOUT_S = 300


def server(bin_path):
    # Without `env` the SDK hands the server only a few variables (PATH, HOME, ...); the agent
    # token must reach it, as it must with any MCP client.
    return StdioServerParameters(command=bin_path, args=["mcp"], env=dict(os.environ))


def dump(model):
    return model.model_dump(mode="json", exclude_none=True)


def tool_result(r):
    return {
        "isError": bool(r.isError),
        "text": "\n".join(c.text for c in r.content if c.type == "text"),
        "structured": r.structuredContent,
    }


async def call(session, name, args):
    return tool_result(await session.call_tool(name, args))


async def call_expecting_error(session, name, args):
    """A call the server must refuse with a JSON-RPC error (the SDK raises McpError)."""
    try:
        r = await session.call_tool(name, args)
    except McpError as e:
        return {"code": e.error.code, "message": e.error.message}
    return {"unexpected_result": tool_result(r)}


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


async def probe(bin_path, out_path):
    res = {}
    async with stdio_client(server(bin_path)) as (read, write):
        async with ClientSession(read, write) as s:
            res["initialize"] = dump(await s.initialize())
            res["tools"] = [t.name for t in (await s.list_tools()).tools]
            res["list"] = await call(s, "list_suggestions", {})
    write_json(out_path, res)


async def agent(bin_path, out_dir):
    res = {}
    async with stdio_client(server(bin_path)) as (read, write):
        async with ClientSession(read, write) as s:
            res["initialize"] = dump(await s.initialize())
            res["tools"] = [dump(t) for t in (await s.list_tools()).tools]
            res["feedback_before"] = await call(s, "get_feedback", {})
            res["status_before"] = await call(s, "suggestion_status", {})
            res["publish"] = await call(
                s,
                "publish_suggestion",
                {
                    "description": "Spell out five\n\nDigits read badly here.",
                    "hunk_descriptions": [
                        {"file": "notes.txt", "line": 5, "description": "five, as asked"}
                    ],
                },
            )
            sid = res["publish"]["structured"]["suggestion_id"]
            res["list"] = await call(s, "list_suggestions", {})
            res["status"] = await call(s, "suggestion_status", {"suggestion_id": sid[:8]})
            res["status_newest"] = await call(s, "suggestion_status", {})
            res["feedback"] = await call(s, "get_feedback", {"suggestion_id": sid})
            res["no_such_suggestion"] = await call(
                s, "get_feedback", {"suggestion_id": "ffffffff"}
            )
            # Bad arguments are tool results from MCP 2025-11-25 on (SEP-1303).
            res["wrong_type"] = await call(s, "publish_suggestion", {"description": 5})
            res["unknown_field"] = await call(s, "get_feedback", {"suggestion": sid})
            res["unknown_tool"] = await call_expecting_error(s, "delete_everything", {})
            write_json(os.path.join(out_dir, "published.json"), res)

            # The reviewer decides over REST meanwhile; poll as an agent waiting for it would.
            deadline = time.monotonic() + DECISION_TIMEOUT_S
            while True:
                fb = await call(s, "get_feedback", {"suggestion_id": sid})
                hunks = fb["structured"]["feedback"][0]["hunks"]
                if any(h["state"] != "pending" for h in hunks):
                    break
                if time.monotonic() > deadline:
                    sys.exit(f"no decision on {sid} within {DECISION_TIMEOUT_S} s")
                await asyncio.sleep(0.1)
            final = {
                "feedback": fb,
                "status": await call(s, "suggestion_status", {"suggestion_id": sid}),
            }
            write_json(os.path.join(out_dir, "final.json"), final)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("probe", "agent"):
        sys.exit(__doc__)
    scenario, bin_path, out = sys.argv[1:]
    asyncio.run((probe if scenario == "probe" else agent)(bin_path, out))


if __name__ == "__main__":
    main()

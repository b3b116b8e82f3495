"""A scripted ACP agent for tests/tests/acp.rs, built on the official Python SDK
(`agent-client-protocol`, pinned in scripts/install-test-deps): the hub speaks to it as to any
ACP agent. `python acp_agent.py SCENARIO` — what it does in its one turn:

- edit: a plan, a thought, message chunks, an edit tool call that writes hello.txt itself (in
  its cwd, the sandbox), a shell-made file, and it asks the client for fs/read_text_file and
  terminal/create (the hub serves neither: the errors it got go to refused.txt); the prompt it
  got goes to prompt.txt; then end_turn.
- permission: asks permission for an `execute` tool call; the option it was given goes to
  permission.txt; end_turn.
- hang: the prompt never ends; a session/cancel is said on stderr and ignored.
- polite: the prompt ends with stopReason `cancelled` when session/cancel comes.
- crash: a message chunk, then it exits with status 3 mid-turn.
- garbage: lines that are not JSON-RPC on stdout, then as `edit`.
- huge: one 100 MiB line on stdout.
- flood: 20000 session/update notifications, then as `edit`.
- mute: never answers initialize.
- probe: as `edit`, and who it runs as (uid) and its environment's names go to probe.txt.
- edit-then-polite: its process's first prompt as `edit`, every later one as `polite`.

The process lives on between turns (the hub keeps it for its session's next run): each turn that
edits writes turn.txt, `pid P turn N session S` — its pid, how many prompts this process has
had, and the ACP session it was prompted in (`s-<random>`, made by `session/new`). It offers
`session/load` (a second argument `noload` says it does not): a loaded session replays one
message of its earlier conversation and is then prompted as its own.

Its pid and what it was asked are said on stderr (the hub's run log).
"""

import asyncio
import os
import sys
import uuid

import acp
from acp import schema

SCENARIO = sys.argv[1] if len(sys.argv) > 1 else "edit"
LOAD = "noload" not in sys.argv[2:]


def log(*args):
    print("acp_agent:", *args, file=sys.stderr, flush=True)


class Scripted:
    def __init__(self):
        self.conn = None
        self.cwd = "."
        self.cancelled = asyncio.Event()
        self.turns = 0

    def on_connect(self, conn):
        self.conn = conn

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kw):
        # As /proc has it: the machine's pid when /proc is the machine's, though the agent
        # runs in a PID namespace of its own.
        log("pid", os.readlink("/proc/self"))
        log("initialize", protocol_version, client_info.name if client_info else None)
        if SCENARIO == "mute":
            await asyncio.Event().wait()
        return schema.InitializeResponse(
            protocol_version=1,
            agent_capabilities=schema.AgentCapabilities(load_session=LOAD),
            agent_info=schema.Implementation(name="scripted-acp-agent", version="0.1"),
        )

    async def new_session(self, cwd, mcp_servers=None, **kw):
        self.cwd = cwd
        names = [getattr(m, "name", "?") for m in (mcp_servers or [])]
        log("new_session", cwd, "mcp:", ",".join(names))
        return schema.NewSessionResponse(session_id=f"s-{uuid.uuid4().hex[:12]}")

    async def load_session(self, cwd, session_id, mcp_servers=None, **kw):
        self.cwd = cwd
        names = [getattr(m, "name", "?") for m in (mcp_servers or [])]
        log("load_session", session_id, cwd, "mcp:", ",".join(names))
        # The conversation replayed, as ACP asks of a loaded session.
        await self.update(session_id, acp.update_agent_message_text("replayed: an earlier answer"))
        return schema.LoadSessionResponse()

    async def cancel(self, session_id, **kw):
        log("got session/cancel")
        self.cancelled.set()

    async def update(self, sid, u):
        await self.conn.session_update(session_id=sid, update=u)

    async def prompt(self, session_id, prompt, **kw):
        text = "".join(getattr(b, "text", "") for b in prompt)
        sid = session_id
        self.turns += 1
        self.cancelled.clear()
        log("prompt", sid, "turn", self.turns)
        if SCENARIO == "hang":
            await asyncio.Event().wait()
        if SCENARIO == "polite" or (SCENARIO == "edit-then-polite" and self.turns > 1):
            await self.cancelled.wait()
            return schema.PromptResponse(stop_reason="cancelled")
        if SCENARIO == "crash":
            await self.update(sid, acp.update_agent_message_text("about to crash"))
            await asyncio.sleep(0.2)
            os._exit(3)
        if SCENARIO == "huge":
            # Blocking, all of it (the SDK's transport made stdout non-blocking).
            os.set_blocking(1, True)
            line = memoryview(b"x" * (100 * 1024 * 1024) + b"\n")
            while line:
                line = line[os.write(1, line):]
            await asyncio.Event().wait()
        if SCENARIO == "permission":
            return await self.ask(sid)
        if SCENARIO == "garbage":
            for line in [b"hello from a print()\n", b"{not json\n", b"[1,2,3]\n", b'{"id":1}\n']:
                os.write(1, line)
        if SCENARIO == "probe":
            with open(os.path.join(self.cwd, "probe.txt"), "w") as f:
                f.write(f"uid {os.getuid()}\n")
                f.write("env " + " ".join(sorted(os.environ)) + "\n")
        if SCENARIO == "flood":
            for i in range(20000):
                await self.update(sid, acp.update_agent_thought_text(f"thinking {i}"))
        return await self.edit(sid, text)

    async def edit(self, sid, text):
        await self.update(sid, acp.update_plan([
            acp.plan_entry("read the task", status="completed"),
            acp.plan_entry("write hello.txt"),
        ]))
        await self.update(sid, acp.update_agent_thought_text("pondering"))
        await self.update(sid, acp.update_agent_message_text("Writing "))
        await self.update(sid, acp.update_agent_message_text("hello.txt now"))
        await self.update(sid, acp.start_tool_call(
            "call-1", "Write hello.txt", kind="edit", status="in_progress",
            locations=[schema.ToolCallLocation(path=os.path.join(self.cwd, "hello.txt"))]))
        with open(os.path.join(self.cwd, "hello.txt"), "w") as f:
            f.write("hello from the ACP agent\n")
        await self.update(sid, acp.update_tool_call("call-1", status="completed"))
        # A shell-made edit: what counts is the sandbox, however it was written.
        os.system("echo made by a shell > shell.txt")
        refused = []
        for call in (
            lambda: self.conn.read_text_file(session_id=sid, path=os.path.join(self.cwd, "hello.txt")),
            lambda: self.conn.create_terminal(session_id=sid, command="ls"),
        ):
            try:
                await call()
                refused.append("served!")
            except acp.RequestError as e:
                refused.append(f"{e.code}")
        with open(os.path.join(self.cwd, "refused.txt"), "w") as f:
            f.write(" ".join(refused) + "\n")
        with open(os.path.join(self.cwd, "prompt.txt"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(self.cwd, "turn.txt"), "w") as f:
            f.write(f"pid {os.readlink('/proc/self')} turn {self.turns} session {sid}\n")
        return schema.PromptResponse(stop_reason="end_turn")

    async def ask(self, sid):
        options = [
            schema.PermissionOption(option_id="allow-once", name="Allow", kind="allow_once"),
            schema.PermissionOption(option_id="reject-once", name="Reject", kind="reject_once"),
        ]
        call = schema.ToolCallUpdate(tool_call_id="call-9", title="make clean", kind="execute",
                                     raw_input={"command": "make clean"})
        resp = await self.conn.request_permission(session_id=sid, tool_call=call, options=options)
        outcome = resp.outcome
        chosen = getattr(outcome, "option_id", None) or getattr(outcome, "outcome", "?")
        log("permission answered:", chosen)
        with open(os.path.join(self.cwd, "permission.txt"), "w") as f:
            f.write(f"{chosen}\n")
        return schema.PromptResponse(stop_reason="end_turn")


async def main():
    await acp.run_agent(Scripted())


if __name__ == "__main__":
    asyncio.run(main())

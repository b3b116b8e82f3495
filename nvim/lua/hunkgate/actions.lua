--- Every user action, once: its name, what it does and where it is reachable. The
--- `<Plug>(hunkgate-…)` mappings (plugin/hunkgate.lua), the `:Hunkgate` subcommands
--- (commands.lua), the Lua API (init.lua) and the review window's keys (review.lua) are all
--- generated from `M.list`, so they cannot drift apart.
---
--- Loaded at startup by plugin/hunkgate.lua: nothing is required at the top level; the
--- handlers load what they need when called.
local M = {}

local function hub()
  return require('hunkgate.hub')
end

local function review()
  return require('hunkgate.review')
end

local function notify(msg, level)
  require('hunkgate.notify').send(msg, level)
end

---@class hunkgate.Action
---@field name string the `:Hunkgate` subcommand; the <Plug> name is the same with `-` for `_`
---@field desc string one line, shown as the mapping's description
---@field api string the function on require('hunkgate') that runs it
---@field fn fun(...) the API function (shared by actions that differ only in `bind`)
---@field bind? any[] arguments fixed by the mapping and subcommand (`next` → nav_hunk('next'))
---@field arg? 'optional' the subcommand's text goes to `fn` as its first argument (nil when empty)
---@field range? boolean the subcommand takes a range; `fn` gets the selection as second argument
---@field complete? fun(arglead: string): string[] completion of the subcommand's argument
---@field key? string the `keymaps` option mapping it in the review window (`keymaps.inline` too)
---@field hint? string its label in the review window's footer
---@field visual? boolean also a Visual-mode <Plug> mapping (through the subcommand, with a range)

-- Connection, runs and questions.

local function connect()
  hub().connect({ report = true })
end

local function disconnect()
  hub().disconnect()
end

--- Start the hub of the current repository (unless one runs already) and connect to it.
local function serve()
  local h = hub()
  local root = require('hunkgate.config').repo_root(h.current_key())
  if not root then
    return notify('hunkgate: not in a git repository: nothing to serve', vim.log.levels.ERROR)
  end
  local cfg = require('hunkgate.config').get()
  require('hunkgate.discovery').resolve(cfg, root, function(found)
    if found then
      notify(('hunkgate: a hub already runs for %s at %s (pid %s)'):format(root, found.url, found.pid or '?'))
      return h.when_ready(function() end)
    end
    notify(('hunkgate: starting the hub for %s'):format(root))
    require('hunkgate.serve').start(root, {}, function(err, pid)
      if err then
        return notify('hunkgate: ' .. err, vim.log.levels.ERROR)
      end
      notify(('hunkgate: the hub for %s runs (pid %s)'):format(root, pid or '?'))
      h.when_ready(function() end)
    end)
  end)
end

---@param id? string
local function open_review(id)
  -- Connected: at once. Otherwise once the hub is found, or started (server.auto_start).
  if hub().synced() or review().has_own_source() then
    return review().open(id)
  end
  hub().when_ready(function(err)
    if err then
      return notify('hunkgate: ' .. err, vim.log.levels.ERROR)
    end
    review().open(id)
  end)
end

local function list()
  local suggestions = hub().store:list()
  if #suggestions == 0 then
    return notify('hunkgate: no open suggestions')
  end
  vim.ui.select(suggestions, {
    prompt = 'hunkgate suggestions',
    format_item = function(s)
      local visible = require('hunkgate.visible')
      return ('%s  %s (%d/%d reviewed)'):format(
        visible.line(s.id:sub(1, 8)),
        visible.line(s.description),
        s.reviewed_count,
        s.hunk_count
      )
    end,
  }, function(s)
    if s then
      open_review(s.id)
    end
  end)
end

---@param prompt? string
---@param selection? hunkgate.Selection code to attach as context
local function run(prompt, selection)
  if not prompt or vim.trim(prompt) == '' then
    return vim.ui.input({ prompt = 'hunkgate run: ' }, function(input)
      if input and vim.trim(input) ~= '' then
        run(input, selection)
      end
    end)
  end
  local text = require('hunkgate.prompt').with_context(prompt, selection)
  hub().request({ type = 'run', prompt = text }, function(resp)
    if resp.success then
      local id = resp.data and resp.data.run_id or '?'
      notify(('hunkgate: run %s started'):format(id:sub(1, 8)))
    else
      notify('hunkgate: run failed: ' .. (resp.error or ''), vim.log.levels.ERROR)
    end
  end, { start = true })
end

--- Queued or running: a run that can still be cancelled.
local function active(r)
  return r.status == 'queued' or r.status == 'working'
end

--- Stop a run of the current repository: `id` (or a unique prefix of it), else the one that is
--- queued or running, or the one picked among several.
---@param id? string
local function cancel(id)
  id = id and vim.trim(id) or ''
  hub().fetch_runs(hub().current(), function(err, runs)
    if err then
      return notify('hunkgate: cancel: ' .. err, vim.log.levels.ERROR)
    end
    local line = require('hunkgate.visible').line
    local function send(r)
      hub().request({ type = 'cancel', runId = r.run_id }, function(resp)
        if resp.success then
          notify(('hunkgate: run %s cancelled'):format(r.run_id:sub(1, 8)))
        else
          notify('hunkgate: cancel failed: ' .. (resp.error or ''), vim.log.levels.ERROR)
        end
      end)
    end
    local candidates = {}
    for _, r in ipairs(runs or {}) do
      if id ~= '' and vim.startswith(r.run_id, id) or id == '' and active(r) then
        candidates[#candidates + 1] = r
      end
    end
    if #candidates == 0 then
      return notify(id ~= '' and ('hunkgate: no run %s'):format(line(id)) or 'hunkgate: no run is queued or running')
    end
    if #candidates == 1 then
      return send(candidates[1])
    end
    if id ~= '' then
      return notify(('hunkgate: %s names %d runs: give more of the id'):format(line(id), #candidates))
    end
    vim.ui.select(candidates, {
      prompt = 'cancel which run?',
      format_item = function(r)
        return ('%s  %s  %s'):format(r.run_id:sub(1, 8), r.status, line(r.prompt or ''))
      end,
    }, function(r)
      if r then
        send(r)
      end
    end)
  end)
end

--- The question to answer: the oldest one waiting, when several runs ask.
---@return hunkgate.Question?
local function waiting_question()
  local q = hub().store:pending_questions()[1]
  if not q then
    notify('hunkgate: no question is waiting for an answer')
  end
  return q
end

---@param text? string
local function answer(text)
  local clarify = require('hunkgate.clarify')
  local q = waiting_question()
  if not q then
    return
  end
  local a = clarify.answer_of(text)
  if a then
    clarify.send(q, a)
  else
    clarify.ask(q)
  end
end

local function skip()
  local q = waiting_question()
  if q then
    require('hunkgate.clarify').send(q, nil)
  end
end

local function status()
  local h = hub()
  local c = h.client
  local lines = {
    ('hunkgate: %s%s (%s)'):format(h.state, c and c.endpoint and (' to ' .. c.endpoint.url) or '', h.root()),
  }
  if c and c.last_error and h.state ~= 'synced' then
    lines[#lines + 1] = 'last error: ' .. c.last_error
  end
  -- One line per item: a newline in agent text must not pass for a line of its own.
  local line = require('hunkgate.visible').line
  for _, s in ipairs(h.store:list()) do
    lines[#lines + 1] = ('  %s  %s  %d/%d reviewed'):format(
      line(s.id:sub(1, 8)),
      line(s.description),
      s.reviewed_count,
      s.hunk_count
    )
  end
  local st = h.store.last_status
  if st then
    lines[#lines + 1] = ('agent: [%s] %s'):format(line(st.status), line(st.message))
  end
  local tool = h.store.last_tool
  if tool then
    lines[#lines + 1] =
      ('last tool call: %s %s: %s'):format(tool.ok and '✓' or '✗', line(tool.name), line(tool.summary))
  end
  for _, q in ipairs(h.store:pending_questions()) do
    lines[#lines + 1] = ('question (run %s): %s'):format(line(q.run_id:sub(1, 8)), line(q.question))
  end
  -- Messages the command line showed cut to one line, in full.
  local cut = require('hunkgate.notify').cut
  if #cut > 0 then
    lines[#lines + 1] = 'recent messages:'
    for _, m in ipairs(cut) do
      lines[#lines + 1] = '  ' .. m:gsub('\n', '\n  ')
    end
  end
  require('hunkgate.notify').show('hunkgate status', table.concat(lines, '\n'))
end

---@param arglead string
---@return string[]
local function suggestion_ids(arglead)
  local out = {}
  for _, s in ipairs(hub().store:list()) do
    if vim.startswith(s.id, arglead) then
      out[#out + 1] = s.id
    end
  end
  return out
end

-- The review (review.lua does the work).

---@param method string
local function on_review(method)
  return function(...)
    return review()[method](...)
  end
end

local nav_hunk = on_review('nav_hunk')

--- In this order: the review window's footer lists its keys in table order.
---@type hunkgate.Action[]
M.list = {
  { name = 'connect', api = 'connect', fn = connect, desc = 'connect to the hub and report the outcome' },
  { name = 'disconnect', api = 'disconnect', fn = disconnect, desc = 'disconnect from the hub' },
  { name = 'serve', api = 'serve', fn = serve, desc = 'start the hub for the current repository' },
  {
    name = 'review',
    api = 'review',
    fn = open_review,
    arg = 'optional',
    complete = suggestion_ids,
    desc = 'open or resume the review',
  },
  { name = 'list', api = 'list', fn = list, desc = 'pick a suggestion to review' },
  { name = 'status', api = 'status', fn = status, desc = 'show the connection and pending work' },
  {
    name = 'run',
    api = 'run',
    fn = run,
    arg = 'optional',
    range = true,
    visual = true,
    desc = 'start an agent run',
  },
  { name = 'cancel', api = 'cancel', fn = cancel, arg = 'optional', desc = 'stop a queued or running run' },
  { name = 'answer', api = 'answer', fn = answer, arg = 'optional', desc = "answer the agent's question" },
  { name = 'skip', api = 'skip', fn = skip, desc = "skip the agent's question" },
  {
    name = 'accept',
    api = 'accept_hunk',
    fn = on_review('accept_hunk'),
    lines = on_review('accept_lines'),
    key = 'accept',
    hint = 'accept',
    desc = 'accept the current hunk (in Visual mode: the selected lines of it)',
  },
  {
    name = 'reject',
    api = 'reject_hunk',
    fn = on_review('reject_hunk'),
    lines = on_review('reject_lines'),
    arg = 'optional',
    key = 'reject',
    hint = 'reject',
    desc = 'reject the current hunk, with a comment for the agent (in Visual mode: the selected lines of it)',
  },
  {
    name = 'modify',
    api = 'modify_hunk',
    fn = on_review('modify_hunk'),
    key = 'modify',
    hint = 'modify',
    desc = 'edit the current hunk, then :w accepts that version',
  },
  {
    name = 'next',
    api = 'nav_hunk',
    fn = nav_hunk,
    bind = { 'next' },
    key = 'next_hunk',
    hint = 'next',
    desc = 'next hunk',
  },
  {
    name = 'prev',
    api = 'nav_hunk',
    fn = nav_hunk,
    bind = { 'prev' },
    key = 'prev_hunk',
    hint = 'prev',
    desc = 'previous hunk',
  },
  {
    name = 'accept_all',
    api = 'accept_all',
    fn = on_review('accept_all'),
    key = 'accept_all',
    hint = 'accept all',
    desc = 'accept every hunk still to decide',
  },
  {
    name = 'reject_all',
    api = 'reject_all',
    fn = on_review('reject_all'),
    key = 'reject_all',
    hint = 'reject all',
    desc = 'reject every hunk still to decide',
  },
  {
    name = 'complete',
    api = 'complete',
    fn = on_review('complete'),
    key = 'complete',
    hint = 'complete',
    desc = 'finish the review (undecided hunks count as rejected)',
  },
  {
    name = 'close',
    api = 'close',
    fn = on_review('close'),
    key = 'close',
    hint = 'close',
    desc = 'close the review window',
  },
  {
    name = 'discard',
    api = 'discard',
    fn = on_review('discard'),
    key = 'discard',
    hint = 'discard',
    desc = 'discard the suggestion',
  },
  {
    name = 'undo',
    api = 'undo',
    fn = on_review('undo'),
    key = 'undo',
    hint = 'undo',
    desc = "undo the current hunk's decision, or the last one",
  },
  {
    name = 'jump',
    api = 'jump_to_hunk',
    fn = on_review('jump_to_hunk'),
    key = 'jump',
    hint = 'go to file',
    desc = 'go to the current hunk in its file (the review resumes there)',
  },
  {
    name = 'help',
    api = 'review_help',
    fn = on_review('help'),
    key = 'help',
    hint = 'help',
    desc = 'show every review key',
  },
  {
    name = 'preview',
    api = 'preview_hunk',
    fn = on_review('preview_hunk'),
    desc = 'show the current hunk',
  },
}

---@type table<string, hunkgate.Action>
M.by_name = {}
for _, a in ipairs(M.list) do
  M.by_name[a.name] = a
end

local unpack = unpack or table.unpack ---@diagnostic disable-line: deprecated

--- The action's <Plug> name: `accept_all` → `accept-all`.
---@param a hunkgate.Action
---@return string
function M.plug_name(a)
  return (a.name:gsub('_', '-'))
end

--- Run the action as a mapping does: with its bound arguments only.
---@param a hunkgate.Action
function M.invoke(a)
  return a.fn(unpack(a.bind or {}))
end

--- Run the action as `:Hunkgate {name} {args}` does.
---@param a hunkgate.Action
---@param args string the subcommand's text after its name, trimmed
---@param opts table nvim_create_user_command callback opts
---@param selection? fun(opts: table): hunkgate.Selection?
function M.run_subcommand(a, args, opts, selection)
  if a.bind then
    return M.invoke(a)
  end
  local text = nil
  if a.arg and args ~= '' then
    text = args
  end
  if a.range then
    return a.fn(text, selection and selection(opts) or nil)
  end
  return a.fn(text)
end

--- The Lua API: one function per distinct `api` name.
---@return table<string, function>
function M.api()
  local out = {}
  for _, a in ipairs(M.list) do
    out[a.api] = a.fn
  end
  return out
end

--- Define `<Plug>(hunkgate-…)` for every action.
function M.define_plugs()
  for _, a in ipairs(M.list) do
    local lhs = '<Plug>(hunkgate-' .. M.plug_name(a) .. ')'
    vim.keymap.set('n', lhs, function()
      M.invoke(a)
    end, { silent = true, desc = 'hunkgate: ' .. a.desc })
    if a.visual then
      -- In Visual mode the selection goes along as context.
      vim.keymap.set('x', lhs, ':Hunkgate ' .. a.name .. '<CR>', { silent = true, desc = 'hunkgate: ' .. a.desc })
    end
  end
end

--- The review window's maps for a style: {lhs or false, fn, hint, key name, description} per
--- keyed action.
---@param keys table `keymaps` (floating) or `keymaps.inline`
---@param wrap? fun(a: hunkgate.Action): fun() how a key runs the action (default: `invoke`)
---@return {[1]: string|false, [2]: fun(), [3]: string, [4]: string, [5]: string}[]
function M.review_maps(keys, wrap)
  local out = {}
  for _, a in ipairs(M.list) do
    if a.key then
      local fn = wrap and wrap(a) or function()
        M.invoke(a)
      end
      out[#out + 1] = { keys[a.key], fn, a.hint or a.name, a.key, a.desc, a.lines }
    end
  end
  return out
end

return M

--- The plugin's connections to hubs, one per repository with a buffer open, and what each has
--- learnt from its hub: events turn into store updates, notifications, buffer reloads and
--- statusline refreshes.
---
--- Each buffer belongs to the repository around its file (else the cwd's); the "current"
--- connection is its repository's and follows `BufEnter` and `DirChanged`. `M.store`,
--- `M.client` and `M.state` are the current connection's, so the statusline, the commands and
--- the review speak for the repository being edited. Events of the other hubs still update their
--- stores and are announced, naming their repository.
local buffers = require('hunkgate.buffers')
local config = require('hunkgate.config')
local nav = require('hunkgate.nav')
local notify = require('hunkgate.notify')
local store_mod = require('hunkgate.store')

local M = {}

---@class hunkgate.Conn
---@field root string the repository (the cwd when there is none): the registry's key
---@field store hunkgate.Store
---@field client hunkgate.Client?
---@field state string
---@field report_next boolean set by an explicit :Hunkgate connect: its outcome is reported once
---@field last_refusal string?
---@field waiters fun(err: string?)[] told when the connection is synced (or gave up)

---@type table<string, hunkgate.Conn>
M.conns = {}
---@type string? the current connection's key
M.current_root = nil
-- The current connection's, or an empty store when there is none.
M.store = store_mod.new()
---@type hunkgate.Client?
M.client = nil
M.state = 'disconnected' ---@type string
M.listeners = {} ---@type fun(change: hunkgate.Change)[]
-- :Hunkgate disconnect: no connection is made until :Hunkgate connect (or a command needing one).
M.paused = false

--- The repository a buffer belongs to: around its file, else the cwd's. Nil for special
--- buffers (the review window, :checkhealth, terminals): they do not move the current hub.
---@param buf integer
---@return string?
function M.root_of_buf(buf)
  if not vim.api.nvim_buf_is_valid(buf) or vim.bo[buf].buftype ~= '' then
    return nil
  end
  local name = vim.api.nvim_buf_get_name(buf)
  if name == '' then
    return M.cwd_root()
  end
  if name:match('^%a[%w+.-]*://') then
    -- health://, fugitive://, oil://: not a file (its buftype may not be set yet on BufEnter).
    return nil
  end
  return config.repo_root(vim.fs.dirname(name)) or M.cwd_root()
end

--- The repository around the cwd, else the cwd itself.
---@return string
function M.cwd_root()
  local cwd = vim.fn.getcwd()
  return config.repo_root(cwd) or vim.uv.fs_realpath(cwd) or cwd
end

--- The key of the repository being edited: the current buffer's; in a special buffer, the
--- one current before it (else the cwd's).
---@return string
function M.current_key()
  return M.root_of_buf(vim.api.nvim_get_current_buf()) or M.current_root or M.cwd_root()
end

---@return hunkgate.Conn?
function M.current()
  return M.current_root and M.conns[M.current_root] or nil
end

local function name_of(root)
  return vim.fs.basename(root)
end

--- The checkout the current hub writes to.
---@param conn? hunkgate.Conn
---@return string
function M.root(conn)
  conn = conn or M.current()
  local ep = conn and conn.client and conn.client.endpoint
  return (ep and ep.repo) or (conn and conn.root) or M.current_root or M.current_key()
end

---@param file string path relative to the repository
---@param conn? hunkgate.Conn
---@return string
function M.abs(file, conn)
  return M.root(conn) .. '/' .. file
end

---@param fn fun(change: hunkgate.Change)
function M.subscribe(fn)
  table.insert(M.listeners, fn)
end

-- Changes that leave every suggestion's hunks and diagnostics as they were.
local agent_news = { status = true, tool = true, question = true, answered = true }

local function changed(change)
  for _, fn in ipairs(M.listeners) do
    fn(change)
  end
  if not agent_news[change.kind] then
    require('hunkgate.checks').refresh(change.root and M.conns[change.root] or nil)
  end
  vim.api.nvim_exec_autocmds('User', { pattern = 'HunkgateUpdate', modeline = false, data = change })
  vim.cmd('redrawstatus')
end

--- Point `M.store`, `M.client` and `M.state` at the current connection.
local function show_current()
  local c = M.current()
  if c then
    M.store, M.client, M.state = c.store, c.client, c.state
  else
    M.store, M.client, M.state = store_mod.new(), nil, 'disconnected'
  end
end

--- Bring buffers of `file` up to date with the disk, and say so when one could not be.
local function reload(file, conn)
  local path = M.abs(file, conn)
  local _, skipped = buffers.reload(path)
  if #skipped > 0 then
    notify.send(
      ('hunkgate: %s changed on disk, but its buffer has unsaved changes and was not reloaded'):format(file),
      vim.log.levels.WARN
    )
  end
end

--- Apply a store change's consequences (reloads) and tell the listeners.
---@param change hunkgate.Change
---@param conn? hunkgate.Conn the connection it came from (default: the current one)
function M.settle(change, conn)
  if change.kind == 'ignored' then
    return
  end
  conn = conn or M.current()
  if change.file_changed and change.file then
    reload(change.file, conn)
  end
  change.root = conn and conn.root
  changed(change)
end

--- Notify, naming the repository when it is not the current one.
local function tell(conn, msg, level)
  if conn.root ~= M.current_root then
    msg = ('[%s] %s'):format(name_of(conn.root), msg)
  end
  notify.send(msg, level)
end

---@param conn hunkgate.Conn
---@param ev table
local function on_event(conn, ev)
  local cfg = config.get()
  local st = conn.store
  local change = st:apply(ev)
  -- A waiting run's "Question: ..." line is announced with the question itself.
  local asking = ev.status == 'waiting_for_user' and change.run_id and st.questions[change.run_id]
  if ev.type == 'suggestion.ready' and change.new and cfg.notifications.on_ready then
    tell(conn, notify.ready_text(ev.suggestion))
  elseif ev.type == 'suggestion.error' and cfg.notifications.on_error then
    tell(conn, notify.error_text(ev), vim.log.levels.ERROR)
  elseif ev.type == 'suggestion.status' and cfg.notifications.on_status and not asking then
    tell(conn, 'hunkgate: ' .. (ev.message or ev.status or ''))
  end
  M.settle(change, conn)
  if change.kind == 'question' and change.new then
    M.announce(conn, st.questions[change.run_id])
  end
end

--- A new question: asked here when it is the current repository's; otherwise only announced
--- (answering goes to the current hub, so it waits until the user is in that repository).
---@param conn hunkgate.Conn
---@param q hunkgate.Question?
function M.announce(conn, q)
  local clarify = require('hunkgate.clarify')
  if conn.root == M.current_root then
    clarify.announce(q)
  elseif q then
    tell(conn, clarify.asked_text(q), vim.log.levels.WARN)
  end
end

--- The run list of `conn`'s hub (`GET /runs`), for `cb(err, runs)`; `err` when there is none
--- to be had (not connected, an older hub without /runs, a hiccup).
---@param conn hunkgate.Conn
---@param cb fun(err: string?, runs: {run_id: string, status: string, prompt?: string}[]?)
function M.fetch_runs(conn, cb)
  local client = conn and conn.client
  local ep = client and client.endpoint
  if not ep then
    return cb('not connected to a hub (:Hunkgate connect, :Hunkgate serve)')
  end
  require('hunkgate.http').request('GET', ep.url .. '/runs', {
    headers = { Authorization = 'Bearer ' .. ep.token },
    timeout = config.get().server.request_timeout,
  }, function(err, reply)
    if conn.client ~= client then
      return cb('the connection changed meanwhile')
    end
    local ok, body = false, nil
    if not err and reply and reply.status == 200 then
      ok, body = pcall(vim.json.decode, reply.body, { luanil = { object = true, array = true } })
    end
    if not ok or type(body) ~= 'table' or type(body.runs) ~= 'table' then
      return cb(err or ('the hub answered GET /runs with %s'):format(reply and reply.status or '?'))
    end
    cb(nil, body.runs)
  end)
end

--- After a resync: the questions runs wait on, from the run list (events do not say which
--- questions were asked or answered while away). A failed fetch keeps what is known.
local function resync_questions(conn)
  local since = conn.store.known
  M.fetch_runs(conn, function(err, runs)
    if err then
      return -- an older hub without /runs, or a hiccup: the next resync tries again
    end
    local new = conn.store:replace_questions(runs, since)
    M.settle({ kind = 'question' }, conn)
    for _, q in ipairs(new) do
      M.announce(conn, q)
    end
  end)
end

--- After a resync: announce suggestions that appeared while away and reload files whose
--- hunks were decided meanwhile (by another client, or before a hub restart).
---@param conn hunkgate.Conn
---@param list hunkgate.Suggestion[]
local function on_snapshot(conn, list)
  local cfg = config.get()
  local st = conn.store
  local before = {}
  for id, s in pairs(st.suggestions) do
    before[id] = {}
    for _, h in ipairs(s.hunks) do
      before[id][h.id] = h
    end
  end
  local new_ids = st:replace(list)
  local files = {}
  for id, old in pairs(before) do
    local s = st:get(id)
    for hid, h in pairs(old) do
      local now = s and s.hunks[nav.index_of(s.hunks, hid) or 0]
      local now_applied = now and nav.is_applied(now.state) or false
      if nav.is_applied(h.state) ~= now_applied or (not s and nav.is_applied(h.state)) then
        files[h.file] = true
      end
    end
  end
  for _, id in ipairs(new_ids) do
    local s = st:get(id)
    if s and cfg.notifications.on_ready and nav.counts(s.hunks).open > 0 then
      tell(conn, notify.ready_text(s))
    end
  end
  for file in pairs(files) do
    reload(file, conn)
  end
  M.settle({ kind = 'ready' }, conn)
  resync_questions(conn)
end

local function wake(conn, err)
  local waiters = conn.waiters
  conn.waiters = {}
  for _, fn in ipairs(waiters) do
    fn(err)
  end
end

local function on_state(conn, state, info)
  conn.state = state
  if conn.root == M.current_root then
    M.state = state
  end
  if state == 'synced' then
    conn.last_refusal = nil
    if conn.report_next then
      conn.report_next = false
      local ep = conn.client and conn.client.endpoint
      tell(conn, 'hunkgate: connected to ' .. (ep and ep.url or 'the hub'))
    end
    wake(conn, nil)
  elseif state == 'disconnected' and info.err then
    -- A refused token (or a hub of another repository) is worth one message even unasked;
    -- a hub that is not running is not.
    local refused = info.status == 401 or info.status == 403 or info.err:find(' serves ', 1, true) ~= nil
    if conn.report_next or (refused and conn.last_refusal ~= info.err) then
      conn.report_next = false
      conn.last_refusal = refused and info.err or conn.last_refusal
      tell(conn, 'hunkgate: ' .. info.err, vim.log.levels.WARN)
    end
  end
  M.settle({ kind = 'status' }, conn)
end

--- Make a protocol client (the unit tests replace this to drive a connection by hand).
---@param opts hunkgate.ClientOpts
---@return hunkgate.Client
function M.new_client(opts)
  return require('hunkgate.client').new(opts)
end

--- The connection for `root`, made (and connecting) when there is none.
---@param root string
---@return hunkgate.Conn
function M.ensure(root)
  local conn = M.conns[root]
  if conn then
    if conn.client and not conn.client.want then
      conn.client:connect()
    end
    return conn
  end
  local cfg = config.get()
  conn = { root = root, store = store_mod.new(), state = 'disconnected', report_next = false, waiters = {} }
  M.conns[root] = conn
  local client
  -- A replaced client still reports its own closing; only the current one speaks for the hub.
  local function current(fn)
    return function(...)
      if conn.client == client then
        fn(conn, ...)
      end
    end
  end
  client = M.new_client({
    resolve_async = function(cb)
      local repo = config.repo_root(root)
      require('hunkgate.discovery').resolve(config.get(), repo, function(found, err, skipped)
        if not found and #skipped > 0 then
          err = err .. ' (passed over: ' .. table.concat(skipped, '; ') .. ')'
        end
        cb(found, err)
      end)
    end,
    min_delay = cfg.server.reconnect.min_delay,
    max_delay = cfg.server.reconnect.max_delay,
    request_timeout = cfg.server.request_timeout,
    ping_interval = cfg.server.ping_interval,
    on_event = current(on_event),
    on_snapshot = current(on_snapshot),
    on_state = current(on_state),
  })
  conn.client = client
  if root == M.current_root then
    show_current()
  end
  client:connect()
  return conn
end

--- Close the connection of `root` and forget it.
---@param root string
function M.close(root)
  local conn = M.conns[root]
  if not conn then
    return
  end
  M.conns[root] = nil
  local client = conn.client
  conn.client = nil
  if client then
    client:disconnect()
  end
  wake(conn, 'disconnected')
  if root == M.current_root then
    show_current()
    changed({ kind = 'status' })
  end
end

--- Make the current buffer's repository the current one (connecting to its hub when
--- `server.auto_connect` is set). On :cd in a special buffer, the new cwd's.
---@param ev? {event: string}
function M.follow(ev)
  local key = M.current_key()
  if ev and ev.event == 'DirChanged' and not M.root_of_buf(vim.api.nvim_get_current_buf()) then
    key = M.cwd_root()
  end
  if key == M.current_root then
    return
  end
  M.current_root = key
  if not M.conns[key] and config.get().server.auto_connect and not M.paused then
    M.ensure(key)
  end
  show_current()
  changed({ kind = 'status' })
end

--- Repositories still in use: those of listed buffers, the cwd's and the current one.
---@return table<string, true>
function M.in_use()
  local used = { [M.cwd_root()] = true }
  if M.current_root then
    used[M.current_root] = true
  end
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.bo[buf].buflisted then
      local r = M.root_of_buf(buf)
      if r then
        used[r] = true
      end
    end
  end
  return used
end

--- Close the connections of repositories no longer in use.
function M.prune()
  local used = M.in_use()
  for root in pairs(M.conns) do
    if not used[root] then
      M.close(root)
    end
  end
end

local prune_timer ---@type uv.uv_timer_t?

--- Prune a moment later: a buffer being deleted is still listed while its autocmds run, and
--- `:bufdo bwipeout` should not prune once per buffer.
function M.prune_soon()
  if prune_timer then
    prune_timer:stop()
  else
    prune_timer = assert(vim.uv.new_timer())
  end
  prune_timer:start(100, 0, vim.schedule_wrap(M.prune))
end

--- Follow the current buffer's repository from now on. Called again (a second setup()), it
--- starts over with the new options.
function M.start()
  for root in pairs(M.conns) do
    M.close(root)
  end
  M.paused = false
  local group = vim.api.nvim_create_augroup('hunkgate_hub', { clear = true })
  vim.api.nvim_create_autocmd({ 'BufEnter', 'DirChanged' }, { group = group, callback = M.follow })
  -- After following: a file opened now gets its checks' diagnostics.
  vim.api.nvim_create_autocmd('BufEnter', {
    group = group,
    callback = function()
      require('hunkgate.checks').refresh()
    end,
  })
  vim.api.nvim_create_autocmd({ 'BufDelete', 'BufWipeout', 'DirChanged' }, { group = group, callback = M.prune_soon })
  M.current_root = nil
  M.follow()
end

--- Connect the current repository's hub with the current options (again, if connected), and
--- report the outcome.
---@param opts? {report?: boolean}
function M.connect(opts)
  M.paused = false
  local key = M.current_key()
  M.current_root = key
  M.close(key)
  local conn = M.ensure(key)
  conn.report_next = opts and opts.report or false
  show_current()
end

--- Disconnect from every hub, and stay disconnected until :Hunkgate connect.
function M.disconnect()
  M.paused = true
  for root in pairs(M.conns) do
    M.close(root)
  end
  show_current()
  changed({ kind = 'status' })
end

---@param conn? hunkgate.Conn
---@return boolean
function M.synced(conn)
  conn = conn or M.current()
  local c = conn and conn.client
  return c ~= nil and c:is_connected() and c.synced
end

--- The connection whose store has suggestion `sid` (the current one first).
---@param sid string
---@return hunkgate.Conn?
function M.owner(sid)
  local cur = M.current()
  if cur and cur.store:get(sid) then
    return cur
  end
  for _, conn in pairs(M.conns) do
    if conn.store:get(sid) then
      return conn
    end
  end
end

--- Run `fn` once the current repository's hub is synced: connect to it, and start one when
--- none runs (unless `server.auto_start` is off). `fn(err)` gets why there is none.
---@param fn fun(err: string?)
function M.when_ready(fn)
  M.paused = false
  if not M.current_root then
    M.current_root = M.current_key()
  end
  local root = M.current_root
  if M.synced() then
    return fn(nil)
  end
  local cfg = config.get()
  local repo = config.repo_root(root)
  local function wait_synced()
    local conn = M.ensure(root)
    show_current()
    if M.synced(conn) then
      return fn(nil)
    end
    local done = false
    local function once(err)
      if not done then
        done = true
        fn(err)
      end
    end
    table.insert(conn.waiters, once)
    -- Retry now rather than after the back-off (or after a look that began before the hub
    -- was up); a handshake under way is let finish.
    local c = conn.client
    if c and (c.state == 'disconnected' or c.resolving) then
      c:disconnect()
      c:connect()
    end
    vim.defer_fn(function()
      once(('the hub of %s did not answer within %d ms'):format(root, cfg.server.start_timeout))
    end, cfg.server.start_timeout)
  end
  require('hunkgate.discovery').resolve(cfg, repo, function(found, err)
    if found then
      return wait_synced()
    end
    local none = err == require('hunkgate.discovery').none_text(repo)
    if not (none and repo and cfg.server.auto_start) then
      return fn(err)
    end
    notify.send(('hunkgate: starting the hub for %s'):format(repo))
    require('hunkgate.serve').start(repo, {}, function(serr)
      if serr then
        return fn(serr)
      end
      wait_synced()
    end)
  end)
end

--- Send a command to the current hub; `cb` gets the response. `opts.start`: when not
--- connected, find (or start) the hub first, as a command that needs one does.
---@param cmd table
---@param cb fun(resp: table)
---@param opts? {start?: boolean, conn?: hunkgate.Conn}
function M.request(cmd, cb, opts)
  opts = opts or {}
  local conn = opts.conn or M.current()
  if opts.start and not M.synced(conn) then
    return M.when_ready(function(err)
      if err then
        return cb({ success = false, error = err, code = 'disconnected' })
      end
      M.request(cmd, cb)
    end)
  end
  if not (conn and conn.client) then
    return cb({ success = false, error = 'not connected (:Hunkgate connect)', code = 'disconnected' })
  end
  conn.client:request(cmd, cb)
end

--- Statusline text: pending hunks, waiting questions and the agent's last status line. It is
--- statusline syntax: `%` is doubled, so that the agent's text cannot be a statusline item
--- (`%{expr}` would run) where it is evaluated (lualine, `%{%…%}`, `%!`).
---@return string
function M.statusline()
  local parts = {}
  local p = M.store:pending()
  if p.hunks > 0 then
    parts[#parts + 1] = p.suggestions > 1 and ('%d pending in %d suggestions'):format(p.hunks, p.suggestions)
      or ('%d pending'):format(p.hunks)
  end
  local st = M.store.last_status
  local questions = #M.store:pending_questions()
  -- The status line of a waiting run already reads "Question: ...".
  if questions > 1 or (questions == 1 and not (st and st.status == 'waiting_for_user')) then
    parts[#parts + 1] = questions > 1 and ('%d questions waiting'):format(questions) or 'question waiting'
  end
  if st and st.message ~= '' then
    local msg = require('hunkgate.visible').line(st.message)
    if vim.fn.strchars(msg) > 40 then
      msg = vim.fn.strcharpart(msg, 0, 39) .. '…'
    end
    parts[#parts + 1] = msg
  end
  if M.client and M.state == 'disconnected' and (#parts > 0 or M.client.seq) then
    parts[#parts + 1] = 'offline'
  end
  if #parts == 0 then
    return ''
  end
  return (('hunkgate: ' .. table.concat(parts, ' · ')):gsub('%%', '%%%%'))
end

return M

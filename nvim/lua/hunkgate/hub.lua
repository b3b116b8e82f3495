--- The plugin's one connection to the hub and what it has learnt from it: turns events into
--- store updates, notifications, buffer reloads and statusline refreshes.
local buffers = require('hunkgate.buffers')
local config = require('hunkgate.config')
local nav = require('hunkgate.nav')
local notify = require('hunkgate.notify')
local store_mod = require('hunkgate.store')

local M = {}

M.store = store_mod.new()
---@type hunkgate.Client?
M.client = nil
M.state = 'disconnected' ---@type string
M.listeners = {} ---@type fun(change: hunkgate.Change)[]

-- Set by a user's explicit :Hunkgate connect so that its outcome is reported once; automatic
-- reconnects stay quiet (the statusline shows them).
local report_next = false
local last_refusal ---@type string?

--- The checkout the hub writes to.
---@return string
function M.root()
  local ep = M.client and M.client.endpoint
  return (ep and ep.repo) or config.repo_root(vim.fn.getcwd()) or vim.fn.getcwd()
end

---@param file string path relative to the repository
---@return string
function M.abs(file)
  return M.root() .. '/' .. file
end

---@param fn fun(change: hunkgate.Change)
function M.subscribe(fn)
  table.insert(M.listeners, fn)
end

local function changed(change)
  for _, fn in ipairs(M.listeners) do
    fn(change)
  end
  vim.api.nvim_exec_autocmds('User', { pattern = 'HunkgateUpdate', modeline = false, data = change })
  vim.cmd('redrawstatus')
end

--- Bring buffers of `file` up to date with the disk, and say so when one could not be.
local function reload(file)
  local path = M.abs(file)
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
function M.settle(change)
  if change.kind == 'ignored' then
    return
  end
  if change.file_changed and change.file then
    reload(change.file)
  end
  changed(change)
end

---@param ev table
local function on_event(ev)
  local cfg = config.get()
  local change = M.store:apply(ev)
  -- A waiting run's "Question: ..." line is announced with the question itself.
  local asking = ev.status == 'waiting_for_user' and change.run_id and M.store.questions[change.run_id]
  if ev.type == 'suggestion.ready' and change.new and cfg.notifications.on_ready then
    notify.send(notify.ready_text(ev.suggestion))
  elseif ev.type == 'suggestion.error' and cfg.notifications.on_error then
    notify.send(notify.error_text(ev), vim.log.levels.ERROR)
  elseif ev.type == 'suggestion.status' and cfg.notifications.on_status and not asking then
    notify.send('hunkgate: ' .. (ev.message or ev.status or ''))
  end
  M.settle(change)
  if change.kind == 'question' and change.new then
    require('hunkgate.clarify').announce(M.store.questions[change.run_id])
  end
end

--- After a resync: the questions runs wait on, from the run list (events do not say which
--- questions were asked or answered while away). A failed fetch keeps what is known.
local function resync_questions()
  local client = M.client
  local ep = client and client.endpoint
  if not ep then
    return
  end
  local since = M.store.known
  require('hunkgate.http').request('GET', ep.url .. '/runs', {
    headers = { Authorization = 'Bearer ' .. ep.token },
    timeout = config.get().server.request_timeout,
  }, function(err, reply)
    if M.client ~= client then
      return
    end
    local ok, body = false, nil
    if not err and reply and reply.status == 200 then
      ok, body = pcall(vim.json.decode, reply.body, { luanil = { object = true, array = true } })
    end
    if not ok or type(body) ~= 'table' or type(body.runs) ~= 'table' then
      return -- an older hub without /runs, or a hiccup: the next resync tries again
    end
    local new = M.store:replace_questions(body.runs, since)
    changed({ kind = 'question' })
    for _, q in ipairs(new) do
      require('hunkgate.clarify').announce(q)
    end
  end)
end

--- After a resync: announce suggestions that appeared while away and reload files whose
--- hunks were decided meanwhile (by another client, or before a hub restart).
---@param list hunkgate.Suggestion[]
local function on_snapshot(list)
  local cfg = config.get()
  local before = {}
  for id, s in pairs(M.store.suggestions) do
    before[id] = {}
    for _, h in ipairs(s.hunks) do
      before[id][h.id] = h
    end
  end
  local new_ids = M.store:replace(list)
  local files = {}
  for id, old in pairs(before) do
    local s = M.store:get(id)
    for hid, h in pairs(old) do
      local now = s and s.hunks[nav.index_of(s.hunks, hid) or 0]
      local now_applied = now and nav.is_applied(now.state) or false
      if nav.is_applied(h.state) ~= now_applied or (not s and nav.is_applied(h.state)) then
        files[h.file] = true
      end
    end
  end
  for _, id in ipairs(new_ids) do
    local s = M.store:get(id)
    if s and cfg.notifications.on_ready and nav.counts(s.hunks).open > 0 then
      notify.send(notify.ready_text(s))
    end
  end
  for file in pairs(files) do
    reload(file)
  end
  changed({ kind = 'ready' })
  resync_questions()
end

local function on_state(state, info)
  M.state = state
  if state == 'synced' then
    last_refusal = nil
    if report_next then
      report_next = false
      local ep = M.client and M.client.endpoint
      notify.send('hunkgate: connected to ' .. (ep and ep.url or 'the hub'))
    end
  elseif state == 'disconnected' and info.err then
    -- A refused token is worth one message even unasked; a hub that is not running is not.
    local refused = info.status == 401 or info.status == 403
    if report_next or (refused and last_refusal ~= info.err) then
      report_next = false
      last_refusal = refused and info.err or last_refusal
      notify.send('hunkgate: ' .. info.err, vim.log.levels.WARN)
    end
  end
  changed({ kind = 'status' })
end

--- Connect with the current options (again, if already connected).
---@param opts? {report?: boolean}
function M.connect(opts)
  local cfg = config.get()
  report_next = opts and opts.report or false
  if M.client then
    M.client:disconnect()
  end
  local client
  -- A replaced client still reports its own closing; only the current one speaks for the hub.
  local function current(fn)
    return function(...)
      if M.client == client then
        fn(...)
      end
    end
  end
  client = require('hunkgate.client').new({
    resolve = function()
      return config.endpoint(config.get())
    end,
    min_delay = cfg.server.reconnect.min_delay,
    max_delay = cfg.server.reconnect.max_delay,
    request_timeout = cfg.server.request_timeout,
    ping_interval = cfg.server.ping_interval,
    on_event = current(on_event),
    on_snapshot = current(on_snapshot),
    on_state = current(on_state),
  })
  M.client = client
  client:connect()
end

function M.disconnect()
  if M.client then
    M.client:disconnect()
    M.client = nil
  end
  M.state = 'disconnected'
  changed({ kind = 'status' })
end

---@return boolean
function M.synced()
  return M.client ~= nil and M.client:is_connected() and M.client.synced
end

--- Send a command to the hub; `cb` gets the response.
---@param cmd table
---@param cb fun(resp: table)
function M.request(cmd, cb)
  if not M.client then
    return cb({ success = false, error = 'not connected (:Hunkgate connect)', code = 'disconnected' })
  end
  M.client:request(cmd, cb)
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

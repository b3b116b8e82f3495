--- The hub protocol over a transport: requests with responses, events in `seq` order,
--- reconnect with back-off, and resync so nothing that happened while away is missed.
---
--- On every `hello` the client catches up before delivering live events: with the same
--- `epoch` it asks `replay` for what it missed; on a new epoch (the hub restarted), an
--- incomplete replay, or a `resync` notice, it fetches everything with `list` + `get`. Live
--- events that arrive meanwhile are held back and delivered after, so order is kept.
local M = {}

---@class hunkgate.ClientOpts
---@field resolve? fun(): (hunkgate.Endpoint?, string?) where to connect, asked before each attempt
---@field resolve_async? fun(cb: fun(endpoint: hunkgate.Endpoint?, err: string?)) the same, answering later (it asks the hub's /health first)
---@field transport? {connect: fun(url: string, opts: table, handlers: hunkgate.WsHandlers): hunkgate.Transport}
---@field defer? fun(ms: integer, fn: fun()): fun() run `fn` later on the main loop; returns a cancel function
---@field min_delay? integer first reconnect delay (ms)
---@field max_delay? integer reconnect delay cap (ms)
---@field request_timeout? integer
---@field ping_interval? integer
---@field on_event? fun(ev: table) every event, in seq order, after catching up
---@field on_snapshot? fun(suggestions: table[]) the full state after a resync
---@field on_state? fun(state: string, info: table) 'connecting'|'connected'|'synced'|'disconnected'

---@class hunkgate.Client
---@field state 'disconnected'|'connecting'|'connected'
---@field synced boolean caught up with the hub since the last hello
---@field seq integer? newest event seq applied
---@field epoch string? the hub instance that seq belongs to
---@field endpoint hunkgate.Endpoint?
---@field last_error string?
---@field hello table?
local Client = {}
Client.__index = Client

local function default_defer(ms, fn)
  local timer = vim.defer_fn(fn, ms)
  return function()
    if timer and not timer:is_closing() then
      timer:stop()
      timer:close()
    end
  end
end

---@param opts hunkgate.ClientOpts
---@return hunkgate.Client
function M.new(opts)
  return setmetatable({
    opts = opts,
    transport = opts.transport or require('hunkgate.websocket'),
    defer = opts.defer or default_defer,
    state = 'disconnected',
    synced = false,
    want = false, -- the user wants a connection: reconnect when it drops
    attempt = 0,
    conn = nil,
    gen = 0, -- bumps per connection so callbacks of an old one are ignored
    next_id = 0,
    pending = {}, -- request id -> {cb, cancel_timeout}
    held = nil, -- live events held back while catching up
    seq = nil,
    epoch = nil,
  }, Client)
end

function Client:_emit_state(state, info)
  if self.opts.on_state then
    self.opts.on_state(state, info or {})
  end
end

--- Connect (or reconnect) and keep reconnecting until `disconnect`.
function Client:connect()
  self.want = true
  if self.state ~= 'disconnected' then
    return
  end
  if self.cancel_retry then
    self.cancel_retry()
    self.cancel_retry = nil
  end
  self:_open()
end

--- Close and stay closed.
function Client:disconnect()
  self.want = false
  if self.cancel_retry then
    self.cancel_retry()
    self.cancel_retry = nil
  end
  if self.resolving then
    -- The answer still to come is for nobody.
    self.resolving = false
    self.gen = self.gen + 1
    self.state = 'disconnected'
  end
  if self.conn then
    self.conn.close(1000, 'bye')
  end
end

---@return boolean
function Client:is_connected()
  return self.state == 'connected'
end

function Client:_open()
  if not self.opts.resolve_async then
    return self:_dial(self.opts.resolve())
  end
  self.gen = self.gen + 1
  local gen = self.gen
  self.state = 'connecting'
  self.resolving = true
  self.opts.resolve_async(function(endpoint, err)
    if gen ~= self.gen then
      return
    end
    self.resolving = false
    self.state = 'disconnected'
    if self.want then
      self:_dial(endpoint, err)
    end
  end)
end

---@param endpoint hunkgate.Endpoint?
---@param err string?
function Client:_dial(endpoint, err)
  if not endpoint then
    self.last_error = err
    self:_emit_state('disconnected', { err = err })
    return self:_schedule_retry()
  end
  self.endpoint = endpoint
  self.state = 'connecting'
  self.gen = self.gen + 1
  local gen = self.gen
  self:_emit_state('connecting', { url = endpoint.url })
  local ws_url = endpoint.url:gsub('^http', 'ws') .. '/ws'
  self.conn = self.transport.connect(ws_url, {
    headers = { Authorization = 'Bearer ' .. endpoint.token },
    ping_interval = self.opts.ping_interval,
  }, {
    on_open = function()
      if gen == self.gen then
        self.state = 'connected'
        self.synced = false
        self.held = {}
        self:_emit_state('connected', { url = endpoint.url })
      end
    end,
    on_message = function(text)
      if gen == self.gen then
        self:_on_message(text)
      end
    end,
    on_close = function(info)
      if gen == self.gen then
        self:_on_close(info)
      end
    end,
  })
end

function Client:_schedule_retry()
  if not self.want then
    return
  end
  self.attempt = self.attempt + 1
  -- Exponential back-off without jitter: one editor per local hub has no herd to spread.
  local min, max = self.opts.min_delay or 250, self.opts.max_delay or 30000
  local delay = math.min(max, min * 2 ^ (self.attempt - 1))
  self.retry_delay = delay
  self.cancel_retry = self.defer(delay, function()
    self.cancel_retry = nil
    if self.want and self.state == 'disconnected' then
      self:_open()
    end
  end)
end

function Client:_on_close(info)
  self.state = 'disconnected'
  self.synced = false
  self.conn = nil
  self.held = nil
  local pending = self.pending
  self.pending = {}
  for _, p in pairs(pending) do
    p.cancel()
    p.cb({ success = false, error = 'connection lost', code = 'disconnected' })
  end
  local err = info.err
  if info.status then
    local ok, body = pcall(vim.json.decode, info.body or '')
    local detail = ok and type(body) == 'table' and body.error or nil
    err = ('the hub refused the connection (HTTP %d%s)'):format(info.status, detail and (': ' .. detail) or '')
  end
  self.last_error = err or (info.reason ~= '' and info.reason) or self.last_error
  self:_emit_state('disconnected', { err = err, code = info.code, status = info.status, reason = info.reason })
  self:_schedule_retry()
end

--- Send a command; `cb` gets the response table ({success, data?, error?, code?}).
---@param cmd table
---@param cb? fun(resp: table)
function Client:request(cmd, cb)
  cb = cb or function() end
  if self.state ~= 'connected' or not self.conn then
    return cb({ success = false, error = 'not connected to the hunkgate hub', code = 'disconnected' })
  end
  self.next_id = self.next_id + 1
  local id = 'nvim-' .. self.next_id
  cmd = vim.tbl_extend('force', cmd, { id = id })
  local ok, err = self.conn.send(vim.json.encode(cmd))
  if not ok then
    return cb({ success = false, error = err, code = 'disconnected' })
  end
  local cancel = self.defer(self.opts.request_timeout or 30000, function()
    local p = self.pending[id]
    if p then
      self.pending[id] = nil
      p.cb({ success = false, error = ('no answer to %q'):format(cmd.type), code = 'timeout' })
    end
  end)
  self.pending[id] = { cb = cb, cancel = cancel }
end

function Client:_on_message(text)
  local ok, msg = pcall(vim.json.decode, text, { luanil = { object = true, array = true } })
  if not ok or type(msg) ~= 'table' then
    return
  end
  if msg.type == 'response' then
    local p = msg.id and self.pending[msg.id]
    if p then
      self.pending[msg.id] = nil
      p.cancel()
      p.cb(msg)
    end
  elseif msg.type == 'hello' then
    self.attempt = 0
    self.hello = msg
    self:_catch_up(msg)
  elseif msg.type == 'resync' then
    self.synced = false
    self.held = self.held or {}
    self:_full_resync(self.seq or 0)
  elseif msg.seq then
    if not self.synced then
      table.insert(self.held, msg)
    else
      self:_deliver(msg)
    end
  end
end

function Client:_deliver(ev)
  if self.seq and ev.seq <= self.seq then
    return -- already applied (a replay and the live stream overlap)
  end
  self.seq = ev.seq
  if self.opts.on_event then
    self.opts.on_event(ev)
  end
end

function Client:_finish_sync()
  self.synced = true
  local held = self.held or {}
  self.held = nil
  for _, ev in ipairs(held) do
    self:_deliver(ev)
  end
  self:_emit_state('synced', { seq = self.seq, epoch = self.epoch })
end

function Client:_catch_up(hello)
  if self.epoch == hello.epoch and self.seq then
    self:request({ type = 'replay', since = self.seq }, function(resp)
      if self.state ~= 'connected' then
        return -- the next hello starts over
      end
      local d = resp.data
      if resp.success and d and d.complete and d.epoch == hello.epoch then
        for _, ev in ipairs(d.events or {}) do
          self:_deliver(ev)
        end
        return self:_finish_sync()
      end
      self:_full_resync(hello.seq)
    end)
  else
    self:_full_resync(hello.seq)
  end
  self.epoch = hello.epoch
end

--- Fetch every open suggestion; `base_seq` is a seq the result is at least as new as.
function Client:_full_resync(base_seq)
  local gen = self.gen
  self:request({ type = 'list' }, function(resp)
    if gen ~= self.gen or self.state ~= 'connected' then
      return -- the next hello starts over
    end
    if not resp.success then
      self.last_error = 'resync failed: ' .. tostring(resp.error)
      return self.conn and self.conn.close(1011, 'resync failed')
    end
    local summaries = resp.data and resp.data.suggestions or {}
    local full, left, broken = {}, #summaries, nil
    local function done()
      if gen ~= self.gen or self.state ~= 'connected' then
        return
      end
      if broken then
        -- A partial snapshot would drop suggestions; start over on a fresh connection.
        self.last_error = 'resync failed: ' .. tostring(broken)
        return self.conn and self.conn.close(1011, 'resync failed')
      end
      -- Keep the server's order; one completed between list and get (not_found) drops out.
      local list = {}
      for _, s in ipairs(summaries) do
        if full[s.id] then
          list[#list + 1] = full[s.id]
        end
      end
      self.seq = base_seq or 0
      if self.opts.on_snapshot then
        self.opts.on_snapshot(list)
      end
      self:_finish_sync()
    end
    if left == 0 then
      return done()
    end
    for _, s in ipairs(summaries) do
      self:request({ type = 'get', suggestionId = s.id }, function(r)
        if r.success then
          full[s.id] = r.data
        elseif r.code ~= 'not_found' then
          broken = r.error or r.code
        end
        left = left - 1
        if left == 0 then
          done()
        end
      end)
    end
  end)
end

return M

-- The protocol client against a scripted transport and a manual clock.
local client_mod = require('hunkgate.client')

local function harness(opts)
  opts = opts or {}
  local h = { conns = {}, timers = {}, events = {}, snapshots = {}, states = {} }
  h.transport = {
    connect = function(url, copts, handlers)
      local c = { url = url, opts = copts, handlers = handlers, sent = {}, closed = nil }
      function c.send(text)
        c.sent[#c.sent + 1] = vim.json.decode(text)
        return true
      end
      function c.close(code)
        if not c.closed then
          c.closed = code or 1000
          handlers.on_close({ code = c.closed, reason = '' })
        end
      end
      -- The server's side of the conversation.
      function c.open()
        handlers.on_open()
      end
      function c.recv(msg)
        handlers.on_message(vim.json.encode(msg))
      end
      function c.drop(info)
        c.closed = 1006
        handlers.on_close(info or { code = 1006, reason = '', err = 'connection closed by the server' })
      end
      function c.last()
        return c.sent[#c.sent]
      end
      function c.reply(data, extra)
        local req = c.last()
        c.recv(vim.tbl_extend('force', { type = 'response', id = req.id, success = true, data = data }, extra or {}))
      end
      h.conns[#h.conns + 1] = c
      return c
    end,
  }
  h.defer = function(ms, fn)
    local t = { ms = ms, fn = fn, cancelled = false }
    h.timers[#h.timers + 1] = t
    return function()
      t.cancelled = true
    end
  end
  --- Fire every pending timer with delay <= ms (or all); returns the fired delays.
  function h.tick(ms)
    local fired = {}
    local timers = h.timers
    h.timers = {}
    for _, t in ipairs(timers) do
      if not t.cancelled and (not ms or t.ms <= ms) then
        fired[#fired + 1] = t.ms
        t.fn()
      elseif not t.cancelled then
        h.timers[#h.timers + 1] = t
      end
    end
    return fired
  end
  h.endpoint = { url = 'http://127.0.0.1:4097', token = 'tok', token_file = '/x/token' }
  h.client = client_mod.new({
    resolve = function()
      if h.resolve_err then
        return nil, h.resolve_err
      end
      return h.endpoint
    end,
    transport = h.transport,
    defer = h.defer,
    min_delay = opts.min_delay or 100,
    max_delay = opts.max_delay or 1000,
    request_timeout = 5000,
    on_event = function(ev)
      h.events[#h.events + 1] = ev
    end,
    on_snapshot = function(list)
      h.snapshots[#h.snapshots + 1] = list
    end,
    on_state = function(state, info)
      h.states[#h.states + 1] = { state, info }
    end,
  })
  return h
end

local function seqs(events)
  return vim.tbl_map(function(e)
    return e.seq
  end, events)
end

local S1 = { id = 's1', description = 'one', hunks = {} }

--- Connect and complete the first full sync with one suggestion.
local function synced(h, epoch, seq)
  h.client:connect()
  local c = h.conns[#h.conns]
  c.open()
  c.recv({ type = 'hello', service = 'hunkgate', protocol = 1, seq = seq, epoch = epoch })
  eq('list', c.last().type)
  c.reply({ suggestions = { { id = 's1' } } })
  eq({ type = 'get', suggestionId = 's1' }, { type = c.last().type, suggestionId = c.last().suggestionId })
  c.reply(S1)
  return c
end

test('connects with the bearer token to /ws', function()
  local h = harness()
  h.client:connect()
  local c = h.conns[1]
  eq('ws://127.0.0.1:4097/ws', c.url)
  eq({ Authorization = 'Bearer tok' }, c.opts.headers)
end)

test('first hello: full sync, then live events in order', function()
  local h = harness()
  local c = synced(h, 'E1', 5)
  eq(1, #h.snapshots)
  eq('s1', h.snapshots[1][1].id)
  eq(true, h.client.synced)
  eq(5, h.client.seq)
  c.recv({ type = 'suggestion.status', seq = 6, message = 'hi' })
  c.recv({ type = 'suggestion.status', seq = 6, message = 'dup' })
  c.recv({ type = 'suggestion.status', seq = 7, message = 'next' })
  eq({ 6, 7 }, seqs(h.events))
end)

test('events that arrive while syncing are held and delivered after the snapshot', function()
  local h = harness()
  h.client:connect()
  local c = h.conns[1]
  c.open()
  c.recv({ type = 'hello', seq = 10, epoch = 'E1' })
  local list_req = c.last()
  c.recv({ type = 'suggestion.status', seq = 11, message = 'during sync' })
  eq(0, #h.events)
  c.recv({ type = 'response', id = list_req.id, success = true, data = { suggestions = {} } })
  eq(1, #h.snapshots)
  eq({ 11 }, seqs(h.events))
end)

test('reconnect to the same hub replays what was missed, without a full resync', function()
  local h = harness()
  synced(h, 'E1', 5)
  h.conns[1].recv({ type = 'suggestion.status', seq = 6, message = 'x' })
  h.conns[1].drop()
  eq('disconnected', h.client.state)
  eq({ 100 }, h.tick())
  local c = h.conns[2]
  c.open()
  c.recv({ type = 'hello', seq = 9, epoch = 'E1' })
  eq({ type = 'replay', since = 6 }, { type = c.last().type, since = c.last().since })
  c.recv({ type = 'suggestion.status', seq = 10, message = 'live, held' })
  c.reply({
    seq = 9,
    epoch = 'E1',
    complete = true,
    events = {
      { type = 'suggestion.hunk_applied', seq = 7, suggestion_id = 's1', hunk_id = 'h', state = 'accepted' },
      { type = 'suggestion.status', seq = 8, message = 'y' },
      { type = 'suggestion.status', seq = 9, message = 'z' },
    },
  })
  eq(1, #h.snapshots, 'no second snapshot')
  eq({ 6, 7, 8, 9, 10 }, seqs(h.events))
end)

test('a new epoch (hub restarted) or an incomplete replay resyncs fully', function()
  local h = harness()
  synced(h, 'E1', 5)
  h.conns[1].drop()
  h.tick()
  local c = h.conns[2]
  c.open()
  c.recv({ type = 'hello', seq = 3, epoch = 'E2' })
  eq('list', c.last().type)
  c.reply({ suggestions = {} })
  eq(2, #h.snapshots)
  eq(3, h.client.seq, 'seq follows the new hub')

  c.drop()
  h.tick()
  local c3 = h.conns[3]
  c3.open()
  c3.recv({ type = 'hello', seq = 50, epoch = 'E2' })
  eq('replay', c3.last().type)
  c3.reply({ seq = 50, epoch = 'E2', complete = false, events = {} })
  eq('list', c3.last().type)
  c3.reply({ suggestions = {} })
  eq(3, #h.snapshots)
end)

test('a resync notice triggers list/get', function()
  local h = harness()
  local c = synced(h, 'E1', 5)
  c.recv({ type = 'resync', reason = 'lagged' })
  eq('list', c.last().type)
  c.recv({ type = 'suggestion.status', seq = 20, message = 'held' })
  c.reply({ suggestions = {} })
  eq(2, #h.snapshots)
  eq({ 20 }, seqs(h.events))
end)

test('back-off doubles up to the cap and resets after a hello', function()
  local h = harness({ min_delay = 100, max_delay = 500 })
  h.resolve_err = 'no hub token'
  h.client:connect()
  local delays = {}
  for _ = 1, 5 do
    local fired = h.tick()
    delays[#delays + 1] = fired[1]
  end
  eq({ 100, 200, 400, 500, 500 }, delays)
  eq('no hub token', h.client.last_error)
  h.resolve_err = nil
  h.tick()
  local c = h.conns[#h.conns]
  c.open()
  c.recv({ type = 'hello', seq = 1, epoch = 'E' })
  c.reply({ suggestions = {} })
  c.drop()
  eq({ 100 }, h.tick(), 'delay back at the minimum')
end)

test('disconnect stops reconnecting', function()
  local h = harness()
  synced(h, 'E1', 5)
  h.client:disconnect()
  eq(1000, h.conns[1].closed)
  eq({}, h.tick())
  eq(1, #h.conns)
end)

test('requests: responses by id, failures on drop, timeouts', function()
  local h = harness()
  local c = synced(h, 'E1', 5)
  local got = {}
  h.client:request({ type = 'ping' }, function(r)
    got.ping = r
  end)
  h.client:request({ type = 'list' }, function(r)
    got.list = r
  end)
  local ping_id = c.sent[#c.sent - 1].id
  c.recv({ type = 'response', id = ping_id, success = true, data = { pong = true } })
  eq(true, got.ping.data.pong)
  eq(nil, got.list)
  c.drop()
  eq('disconnected', got.list.code)
  h.client:request({ type = 'list' }, function(r)
    got.offline = r
  end)
  eq(false, got.offline.success)

  local h2 = harness()
  synced(h2, 'E1', 1)
  h2.client:request({ type = 'ping' }, function(r)
    got.slow = r
  end)
  h2.tick(5000)
  eq('timeout', got.slow.code)
end)

test('a refused handshake is reported with its status', function()
  local h = harness()
  h.client:connect()
  h.conns[1].drop({ code = 1002, reason = '', status = 401, body = '{"success":false,"error":"bad token"}' })
  local last = h.states[#h.states]
  eq('disconnected', last[1])
  eq(401, last[2].status)
  truthy(last[2].err:find('HTTP 401: bad token', 1, true), last[2].err)
end)

test('a resync that cannot fetch a suggestion retries instead of dropping it', function()
  local h = harness()
  h.client:connect()
  local c = h.conns[1]
  c.open()
  c.recv({ type = 'hello', seq = 1, epoch = 'E' })
  c.reply({ suggestions = { { id = 's1' }, { id = 's2' } } })
  local get1, get2 = c.sent[#c.sent - 1], c.sent[#c.sent]
  c.recv({ type = 'response', id = get1.id, success = true, data = S1 })
  c.recv({ type = 'response', id = get2.id, success = false, code = 'internal', error = 'boom' })
  eq(0, #h.snapshots, 'no partial snapshot')
  eq(1011, c.closed)
  truthy(h.client.last_error:find('boom'))
  eq({ 100 }, h.tick())
  eq(2, #h.conns, 'reconnecting')
end)

test('a suggestion completed between list and get just drops out', function()
  local h = harness()
  h.client:connect()
  local c = h.conns[1]
  c.open()
  c.recv({ type = 'hello', seq = 1, epoch = 'E' })
  c.reply({ suggestions = { { id = 's1' }, { id = 'gone' } } })
  local get1, get2 = c.sent[#c.sent - 1], c.sent[#c.sent]
  c.recv({ type = 'response', id = get2.id, success = false, code = 'not_found', error = 'no such suggestion' })
  c.recv({ type = 'response', id = get1.id, success = true, data = S1 })
  eq(1, #h.snapshots)
  eq({ 's1' }, vim.tbl_map(function(s)
    return s.id
  end, h.snapshots[1]))
end)

test('an async resolve: dialled when it answers; a disconnect meanwhile drops its answer', function()
  local h = harness()
  local pending = {}
  h.client.opts.resolve = nil
  h.client.opts.resolve_async = function(cb)
    pending[#pending + 1] = cb
  end
  h.client:connect()
  eq(1, #pending, 'asked where the hub is')
  eq(0, #h.conns, 'nothing dialled before the answer')
  eq('connecting', h.client.state)
  h.client:connect()
  eq(1, #pending, 'a second connect while looking does not look twice')
  pending[1](h.endpoint)
  eq(1, #h.conns, 'dialled with the answer')
  eq('ws://127.0.0.1:4097/ws', h.conns[1].url)
  eq('Bearer tok', h.conns[1].opts.headers.Authorization)

  -- Looking again after a drop; the user disconnects before the answer.
  h.conns[1].open()
  h.conns[1].drop()
  h.tick()
  eq(2, #pending)
  h.client:disconnect()
  eq('disconnected', h.client.state)
  pending[2](h.endpoint)
  eq(1, #h.conns, 'the late answer dials nothing')
  h.client:connect()
  eq(3, #pending, 'connect after disconnect looks again')
  pending[3](nil, 'no hub is running for /r')
  eq('no hub is running for /r', h.client.last_error)
  eq(1, #h.conns)
end)

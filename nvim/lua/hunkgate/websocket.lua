--- A WebSocket client (RFC 6455) in pure Lua over vim.uv: the hub's only transport.
---
--- The framing half (sha1, accept key, encode, Decoder, handshake parsing) is pure and tested
--- byte for byte; `connect` wires it to a TCP socket. The transport interface the rest of the
--- plugin relies on is just:
---
---   local conn = websocket.connect(url, { headers = {...} }, {
---     on_open = function() end, on_message = function(text) end,
---     on_close = function(info) end, -- info: { code, reason, err?, status?, body? }
---   })
---   conn.send(text) -> ok, err ; conn.close(code?, reason?)
---
--- Handlers always run on the main loop (vim.schedule), in order, so they may touch buffers.
local bit = require('bit')
local band, bor, bxor, bnot, lshift, rshift, rol, tobit =
  bit.band, bit.bor, bit.bxor, bit.bnot, bit.lshift, bit.rshift, bit.rol, bit.tobit
local unpack = unpack or table.unpack ---@diagnostic disable-line: deprecated

local M = {}

M.OP = { CONTINUATION = 0x0, TEXT = 0x1, BINARY = 0x2, CLOSE = 0x8, PING = 0x9, PONG = 0xA }

local GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'

-- The server allows 8 MiB messages; anything far beyond is a broken stream, not data.
local DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024

local function be32(n)
  return string.char(band(rshift(n, 24), 255), band(rshift(n, 16), 255), band(rshift(n, 8), 255), band(n, 255))
end

--- SHA-1 of `msg` as 20 raw bytes. Only the handshake's accept key needs it, and Neovim offers
--- sha256 alone.
---@param msg string
---@return string
function M.sha1(msg)
  local h0, h1, h2, h3, h4 =
    tobit(0x67452301), tobit(0xEFCDAB89), tobit(0x98BADCFE), tobit(0x10325476), tobit(0xC3D2E1F0)
  local bits = #msg * 8
  msg = msg .. '\128' .. string.rep('\0', (55 - #msg) % 64) .. be32(math.floor(bits / 2 ^ 32)) .. be32(bits % 2 ^ 32)
  local w = {}
  for chunk = 1, #msg, 64 do
    for i = 0, 15 do
      local a, b, c, d = msg:byte(chunk + i * 4, chunk + i * 4 + 3)
      w[i] = bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
    end
    for i = 16, 79 do
      w[i] = rol(bxor(w[i - 3], w[i - 8], w[i - 14], w[i - 16]), 1)
    end
    local a, b, c, d, e = h0, h1, h2, h3, h4
    for i = 0, 79 do
      local f, k
      if i < 20 then
        f, k = bor(band(b, c), band(bnot(b), d)), 0x5A827999
      elseif i < 40 then
        f, k = bxor(b, c, d), 0x6ED9EBA1
      elseif i < 60 then
        f, k = bor(band(b, c), band(b, d), band(c, d)), 0x8F1BBCDC
      else
        f, k = bxor(b, c, d), 0xCA62C1D6
      end
      a, b, c, d, e = tobit(rol(a, 5) + f + e + k + w[i]), a, rol(b, 30), c, d
    end
    h0, h1, h2, h3, h4 = tobit(h0 + a), tobit(h1 + b), tobit(h2 + c), tobit(h3 + d), tobit(h4 + e)
  end
  return be32(h0) .. be32(h1) .. be32(h2) .. be32(h3) .. be32(h4)
end

--- The Sec-WebSocket-Accept value a server must answer `key` with.
---@param key string
---@return string
function M.accept_key(key)
  return vim.base64.encode(M.sha1(key .. GUID))
end

--- XOR `payload` with the 4-byte `key` (masking and unmasking are the same operation).
---@param payload string
---@param key string
---@return string
function M.mask(payload, key)
  local k = { key:byte(1, 4) }
  local out = {}
  -- string.byte returns its results on the Lua stack; stay well below its limit.
  local block = 4096
  for start = 1, #payload, block do
    local bytes = { payload:byte(start, math.min(start + block - 1, #payload)) }
    for i = 1, #bytes do
      bytes[i] = bxor(bytes[i], k[(i - 1) % 4 + 1])
    end
    out[#out + 1] = string.char(unpack(bytes))
  end
  return table.concat(out)
end

local function random_bytes(n)
  return vim.uv.random(n) --[[@as string]]
end

--- One frame. Client frames must be masked: `mask_key` defaults to 4 random bytes; pass
--- `false` to build an unmasked (server-side) frame, as tests do.
---@param opcode integer
---@param payload string?
---@param opts? {fin?: boolean, mask_key?: string|false}
---@return string
function M.encode(opcode, payload, opts)
  opts = opts or {}
  payload = payload or ''
  local b1 = bor(opts.fin == false and 0 or 0x80, opcode)
  local key = opts.mask_key
  if key == nil then
    key = random_bytes(4)
  end
  local maskbit = key and 0x80 or 0
  local len = #payload
  local head
  if len < 126 then
    head = string.char(b1, bor(maskbit, len))
  elseif len < 65536 then
    head = string.char(b1, bor(maskbit, 126), rshift(len, 8), band(len, 255))
  else
    head = string.char(b1, bor(maskbit, 127)) .. be32(math.floor(len / 2 ^ 32)) .. be32(len % 2 ^ 32)
  end
  if key then
    return head .. key .. M.mask(payload, key)
  end
  return head .. payload
end

--- A close frame's payload: a 2-byte status code and a UTF-8 reason.
---@param code integer?
---@param reason string?
function M.close_payload(code, reason)
  if not code then
    return ''
  end
  return string.char(rshift(code, 8), band(code, 255)) .. (reason or ''):sub(1, 123)
end

---@class hunkgate.WsEvent
---@field kind 'text'|'binary'|'ping'|'pong'|'close'
---@field data string
---@field code? integer close code (1005 when the frame had none)
---@field reason? string

---@class hunkgate.WsDecoder
---@field private buf string
---@field private pos integer
---@field private pending string[]
---@field private avail integer
---@field private need integer
---@field private frag string[]?
---@field private frag_op integer?
---@field private frag_len integer
---@field private max integer
local Decoder = {}
Decoder.__index = Decoder

--- Incremental frame parser: feed it bytes as they arrive, get whole messages and control
--- frames back. Fragments are reassembled; control frames may arrive between them.
---@param opts? {max_message?: integer}
---@return hunkgate.WsDecoder
function M.decoder(opts)
  opts = opts or {}
  return setmetatable({
    buf = '',
    pos = 1,
    pending = {},
    avail = 0,
    need = 2,
    frag = nil,
    frag_op = nil,
    frag_len = 0,
    max = opts.max_message or DEFAULT_MAX_MESSAGE,
  }, Decoder)
end

--- Error codes are WebSocket close codes: 1002 protocol error, 1009 message too big.
---@param data string?
---@return hunkgate.WsEvent[]? events
---@return string? err
---@return integer? close_code
function Decoder:feed(data)
  if data and #data > 0 then
    self.pending[#self.pending + 1] = data
    self.avail = self.avail + #data
  end
  local events = {}
  while true do
    -- Joining only when a whole frame header or payload is there keeps large frames linear.
    if self.avail < self.need then
      return events
    end
    if #self.pending > 0 then
      self.buf = self.buf:sub(self.pos) .. table.concat(self.pending)
      self.pos = 1
      self.pending = {}
    end
    local buf, pos = self.buf, self.pos
    local b1, b2 = buf:byte(pos, pos + 1)
    local fin = band(b1, 0x80) ~= 0
    local op = band(b1, 0x0F)
    local masked = band(b2, 0x80) ~= 0
    local len = band(b2, 0x7F)
    local head = 2 + (len == 126 and 2 or len == 127 and 8 or 0) + (masked and 4 or 0)
    if self.avail < head then
      self.need = head
      return events
    end
    if band(b1, 0x70) ~= 0 then
      return nil, 'reserved bits set without a negotiated extension', 1002
    end
    if len == 126 then
      local x, y = buf:byte(pos + 2, pos + 3)
      len = x * 256 + y
    elseif len == 127 then
      len = 0
      for i = 2, 9 do
        len = len * 256 + buf:byte(pos + i)
      end
    end
    if op >= 0x8 and (not fin or len > 125) then
      return nil, 'fragmented or oversized control frame', 1002
    end
    if len > self.max or self.frag_len + len > self.max then
      return nil, ('message larger than %d bytes'):format(self.max), 1009
    end
    if self.avail < head + len then
      self.need = head + len
      return events
    end
    local payload = buf:sub(pos + head, pos + head + len - 1)
    if masked then
      payload = M.mask(payload, buf:sub(pos + head - 4, pos + head - 1))
    end
    self.pos = pos + head + len
    self.avail = self.avail - head - len
    self.need = 2
    if self.pos > #self.buf then
      self.buf, self.pos = '', 1
    end

    if op == M.OP.CLOSE then
      local code, reason = 1005, ''
      if #payload >= 2 then
        local x, y = payload:byte(1, 2)
        code, reason = x * 256 + y, payload:sub(3)
      end
      events[#events + 1] = { kind = 'close', data = payload, code = code, reason = reason }
    elseif op == M.OP.PING then
      events[#events + 1] = { kind = 'ping', data = payload }
    elseif op == M.OP.PONG then
      events[#events + 1] = { kind = 'pong', data = payload }
    elseif op == M.OP.CONTINUATION then
      if not self.frag then
        return nil, 'continuation frame without a message to continue', 1002
      end
      self.frag[#self.frag + 1] = payload
      self.frag_len = self.frag_len + len
      if fin then
        local kind = self.frag_op == M.OP.TEXT and 'text' or 'binary'
        events[#events + 1] = { kind = kind, data = table.concat(self.frag) }
        self.frag, self.frag_op, self.frag_len = nil, nil, 0
      end
    elseif op == M.OP.TEXT or op == M.OP.BINARY then
      if self.frag then
        return nil, 'new message before the fragmented one finished', 1002
      end
      if fin then
        events[#events + 1] = { kind = op == M.OP.TEXT and 'text' or 'binary', data = payload }
      else
        self.frag, self.frag_op, self.frag_len = { payload }, op, len
      end
    else
      return nil, ('unknown opcode %d'):format(op), 1002
    end
  end
end

---@class hunkgate.Url
---@field scheme string
---@field host string
---@field port integer
---@field path string

--- Split an http(s)/ws(s) URL; only plain ws/http are supported (the hub is local).
---@param url string
---@return hunkgate.Url? parsed
---@return string? err
function M.parse_url(url)
  local scheme, rest = url:match('^(%a+)://(.+)$')
  if not scheme then
    return nil, ('not a URL: %q'):format(url)
  end
  scheme = scheme:lower()
  if scheme ~= 'ws' and scheme ~= 'http' then
    return nil, ('unsupported scheme %q (the hub speaks plain ws/http)'):format(scheme)
  end
  local authority, path = rest:match('^([^/]+)(.*)$')
  if not authority then
    return nil, ('no host in %q'):format(url)
  end
  local host, port = authority:match('^%[(.+)%]:?(%d*)$')
  if not host then
    host, port = authority:match('^([^:]+):?(%d*)$')
  end
  if not host then
    return nil, ('bad host in %q'):format(url)
  end
  return { scheme = scheme, host = host, port = tonumber(port) or 80, path = path ~= '' and path or '/' }
end

--- The Host header value for `u` (the hub checks it against its own address).
---@param u hunkgate.Url
function M.host_header(u)
  local host = u.host:find(':', 1, true) and ('[' .. u.host .. ']') or u.host
  return ('%s:%d'):format(host, u.port)
end

--- The opening handshake request. Never sends Origin: the hub refuses browsers' requests by it.
---@param u hunkgate.Url
---@param key string
---@param headers? table<string, string>
---@return string
function M.handshake_request(u, key, headers)
  local lines = {
    ('GET %s HTTP/1.1'):format(u.path),
    'Host: ' .. M.host_header(u),
    'Upgrade: websocket',
    'Connection: Upgrade',
    'Sec-WebSocket-Key: ' .. key,
    'Sec-WebSocket-Version: 13',
  }
  for name, value in pairs(headers or {}) do
    if name:lower() ~= 'origin' then
      lines[#lines + 1] = name .. ': ' .. value
    end
  end
  return table.concat(lines, '\r\n') .. '\r\n\r\n'
end

---@class hunkgate.HttpHead
---@field status integer
---@field headers table<string, string> lower-cased names
---@field rest string bytes after the header block

--- Parse an HTTP response head; nil while the blank line has not arrived yet.
---@param buf string
---@return hunkgate.HttpHead? head
---@return string? err
function M.parse_response_head(buf)
  local stop = buf:find('\r\n\r\n', 1, true)
  if not stop then
    return nil
  end
  local head = buf:sub(1, stop - 1)
  local status_line = head:match('^[^\r\n]*')
  local status = tonumber(status_line:match('^HTTP/%d%.?%d* (%d%d%d)'))
  if not status then
    return nil, ('bad HTTP status line %q'):format(status_line)
  end
  local headers = {}
  for name, value in head:gmatch('\r\n([^:\r\n]+):[ \t]*([^\r\n]*)') do
    headers[name:lower()] = value
  end
  return { status = status, headers = headers, rest = buf:sub(stop + 4) }
end

--- Check a 101 answer against RFC 6455 §4.1.
---@param head hunkgate.HttpHead
---@param key string
---@return boolean ok
---@return string? err
function M.check_upgrade(head, key)
  if head.status ~= 101 then
    return false, ('HTTP %d'):format(head.status)
  end
  if (head.headers['upgrade'] or ''):lower() ~= 'websocket' then
    return false, 'response has no "Upgrade: websocket"'
  end
  if not (head.headers['connection'] or ''):lower():find('upgrade', 1, true) then
    return false, 'response has no "Connection: Upgrade"'
  end
  if head.headers['sec-websocket-accept'] ~= M.accept_key(key) then
    return false, 'wrong Sec-WebSocket-Accept'
  end
  return true
end

--- Resolve `host` and open a TCP connection, trying each address in turn.
---@param host string
---@param port integer
---@param cb fun(err: string?, tcp: uv.uv_tcp_t?)
function M.tcp_connect(host, port, cb)
  local uv = vim.uv
  uv.getaddrinfo(host, tostring(port), { socktype = 'stream' }, function(err, addrs)
    if err or not addrs or #addrs == 0 then
      return cb(('cannot resolve %s: %s'):format(host, err or 'no address'))
    end
    local i = 0
    local last_err
    local function try_next()
      i = i + 1
      local a = addrs[i]
      if not a then
        return cb(('cannot connect to %s:%d: %s'):format(host, port, last_err or 'no address'))
      end
      local tcp = assert(uv.new_tcp())
      tcp:connect(a.addr, a.port or port, function(cerr)
        if cerr then
          last_err = cerr
          tcp:close()
          return try_next()
        end
        -- Small frames (a decision, its reply) must not wait for the peer's delayed ACK.
        tcp:nodelay(true)
        cb(nil, tcp)
      end)
    end
    try_next()
  end)
end

---@class hunkgate.Transport
---@field send fun(text: string): boolean, string?
---@field close fun(code?: integer, reason?: string)

---@class hunkgate.WsHandlers
---@field on_open? fun()
---@field on_message? fun(text: string)
---@field on_close? fun(info: {code: integer, reason: string, err?: string, status?: integer, body?: string})

--- Open a WebSocket. See the module comment for the interface.
---@param url string ws:// or http:// URL of the endpoint
---@param opts? {headers?: table<string,string>, timeout?: integer, ping_interval?: integer, max_message?: integer}
---@param handlers hunkgate.WsHandlers
---@return hunkgate.Transport
function M.connect(url, opts, handlers)
  opts = opts or {}
  local uv = vim.uv
  local timeout = opts.timeout or 5000
  local ping_interval = opts.ping_interval or 30000
  local state = 'connecting' ---@type 'connecting'|'open'|'closing'|'closed'
  local tcp ---@type uv.uv_tcp_t?
  local timer = assert(uv.new_timer())
  local decoder = M.decoder({ max_message = opts.max_message })
  local heard = true -- anything received since the last keepalive ping
  local key = vim.base64.encode(random_bytes(16))

  local function emit(name, ...)
    local f = handlers[name]
    if f then
      local args = { n = select('#', ...), ... }
      vim.schedule(function()
        f(unpack(args, 1, args.n))
      end)
    end
  end

  local function finish(info)
    if state == 'closed' then
      return
    end
    state = 'closed'
    if not timer:is_closing() then
      timer:stop()
      timer:close()
    end
    if tcp and not tcp:is_closing() then
      local sock = tcp
      sock:read_stop()
      -- shutdown lets a queued close frame go out first; closing outright would cancel it.
      local req = sock:shutdown(function()
        if not sock:is_closing() then
          sock:close()
        end
      end)
      if not req then
        sock:close()
      end
    end
    info.code = info.code or 1006
    info.reason = info.reason or ''
    emit('on_close', info)
  end

  local function write(bytes)
    if tcp and not tcp:is_closing() then
      tcp:write(bytes, function(err)
        if err then
          finish({ code = 1006, err = 'write failed: ' .. err })
        end
      end)
    end
  end

  local function close(code, reason)
    if state == 'open' then
      state = 'closing'
      write(M.encode(M.OP.CLOSE, M.close_payload(code or 1000, reason)))
      -- The server should answer with its own close; don't wait for a dead one forever.
      timer:stop()
      timer:start(1000, 0, function()
        finish({ code = code or 1000, reason = reason or '' })
      end)
    elseif state == 'connecting' then
      finish({ code = code or 1000, reason = reason or '', err = 'closed before the connection opened' })
    end
  end

  local function on_frames(events)
    for _, ev in ipairs(events) do
      if ev.kind == 'text' then
        if state == 'open' then
          emit('on_message', ev.data)
        end
      elseif ev.kind == 'ping' then
        write(M.encode(M.OP.PONG, ev.data))
      elseif ev.kind == 'close' then
        if state == 'open' then
          -- Echo the code, as §5.5.1 asks, then drop the socket: the server closes TCP first.
          write(M.encode(M.OP.CLOSE, M.close_payload(ev.code ~= 1005 and ev.code or nil)))
        end
        finish({ code = ev.code, reason = ev.reason })
        return
      end
      -- binary frames and pongs carry nothing for us; any frame already counts as "heard".
    end
  end

  local head_buf = ''
  local function on_read(err, chunk)
    if err then
      return finish({ code = 1006, err = 'read failed: ' .. err })
    end
    if not chunk then
      return finish({ code = 1006, err = 'connection closed by the server' })
    end
    heard = true
    if state == 'connecting' then
      head_buf = head_buf .. chunk
      local head, perr = M.parse_response_head(head_buf)
      if perr then
        return finish({ code = 1002, err = perr })
      end
      if not head then
        return
      end
      local ok, uerr = M.check_upgrade(head, key)
      if not ok then
        return finish({ code = 1002, err = uerr, status = head.status, body = head.rest })
      end
      state = 'open'
      head_buf = ''
      timer:stop()
      timer:start(ping_interval, ping_interval, function()
        if not heard then
          return finish({ code = 1006, err = 'no answer to keepalive ping' })
        end
        heard = false
        write(M.encode(M.OP.PING, 'hunkgate'))
      end)
      emit('on_open')
      chunk = head.rest
    end
    local events, derr, code = decoder:feed(chunk)
    if not events then
      write(M.encode(M.OP.CLOSE, M.close_payload(code, derr)))
      return finish({ code = code or 1002, err = derr })
    end
    on_frames(events)
  end

  local u, uerr = M.parse_url(url)
  if not u then
    vim.schedule(function()
      finish({ code = 1006, err = uerr })
    end)
  else
    timer:start(timeout, 0, function()
      if state == 'connecting' then
        finish({ code = 1006, err = ('no WebSocket handshake within %d ms'):format(timeout) })
      end
    end)
    M.tcp_connect(u.host, u.port, function(cerr, sock)
      if state ~= 'connecting' then
        if sock then
          sock:close()
        end
        return
      end
      if cerr then
        return finish({ code = 1006, err = cerr })
      end
      tcp = sock
      assert(tcp):read_start(on_read)
      write(M.handshake_request(u, key, opts.headers))
    end)
  end

  return {
    send = function(text)
      if state ~= 'open' then
        return false, 'not connected'
      end
      write(M.encode(M.OP.TEXT, text))
      return true
    end,
    close = close,
  }
end

return M

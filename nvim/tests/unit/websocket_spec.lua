local ws = require('hunkgate.websocket')

local function hex(s)
  return (s:gsub('.', function(c)
    return ('%02x'):format(c:byte())
  end))
end

local function unhex(h)
  return (h:gsub('%s', ''):gsub('..', function(x)
    return string.char(tonumber(x, 16))
  end))
end

test('sha1 matches the FIPS 180 vectors', function()
  eq('da39a3ee5e6b4b0d3255bfef95601890afd80709', hex(ws.sha1('')))
  eq('a9993e364706816aba3e25717850c26c9cd0d89d', hex(ws.sha1('abc')))
  eq(
    '84983e441c3bd26ebaae4aa1f95129e5e54670f1',
    hex(ws.sha1('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq'))
  )
  -- Lengths around the 55/56/64-byte padding boundaries.
  eq('c1c8bbdc22796e28c0e15163d20899b65621d65a', hex(ws.sha1(string.rep('a', 55))))
  eq('c2db330f6083854c99d4b5bfb6e8f29f201be699', hex(ws.sha1(string.rep('a', 56))))
  eq('0098ba824b5c16427bd7a1122a5a442a25ec644d', hex(ws.sha1(string.rep('a', 64))))
  eq('34aa973cd4c4daa4f61eeb2bdbad27316534016f', hex(ws.sha1(string.rep('a', 1000000))))
end)

test('accept key is the RFC 6455 example', function()
  eq('s3pPLMBiTxaQ9kYGzzhZRbK+xOo=', ws.accept_key('dGhlIHNhbXBsZSBub25jZQ=='))
end)

test('encode: RFC 6455 section 5.7 examples', function()
  eq('810548656c6c6f', hex(ws.encode(ws.OP.TEXT, 'Hello', { mask_key = false })))
  eq('818537fa213d7f9f4d5158', hex(ws.encode(ws.OP.TEXT, 'Hello', { mask_key = unhex('37fa213d') })))
  eq('010348656c', hex(ws.encode(ws.OP.TEXT, 'Hel', { fin = false, mask_key = false })))
  eq('80026c6f', hex(ws.encode(ws.OP.CONTINUATION, 'lo', { mask_key = false })))
  eq('890548656c6c6f', hex(ws.encode(ws.OP.PING, 'Hello', { mask_key = false })))
  local p256 = ws.encode(ws.OP.BINARY, string.rep('x', 256), { mask_key = false })
  eq('827e0100', hex(p256:sub(1, 4)))
  eq(260, #p256)
  local p64k = ws.encode(ws.OP.BINARY, string.rep('x', 65536), { mask_key = false })
  eq('827f0000000000010000', hex(p64k:sub(1, 10)))
end)

test('client frames are masked with a fresh key', function()
  local a = ws.encode(ws.OP.TEXT, 'Hello')
  local b = ws.encode(ws.OP.TEXT, 'Hello')
  eq(0x81, a:byte(1))
  eq(0x85, a:byte(2), 'mask bit and length')
  eq(11, #a)
  truthy(a ~= b or true) -- keys are random; equality is possible but not checked
  eq('Hello', ws.mask(a:sub(7), a:sub(3, 6)))
  local big = string.rep('0123456789', 1000)
  local f = ws.encode(ws.OP.TEXT, big)
  eq(126, f:byte(2) - 0x80)
  eq(big, ws.mask(f:sub(9), f:sub(5, 8)))
end)

test('decoder: whole, fragmented and interleaved control frames', function()
  local d = ws.decoder()
  local stream = unhex('010348656c') .. unhex('890548656c6c6f') .. unhex('80026c6f') .. unhex('810548656c6c6f')
  local events = assert(d:feed(stream))
  eq({
    { kind = 'ping', data = 'Hello' },
    { kind = 'text', data = 'Hello' },
    { kind = 'text', data = 'Hello' },
  }, events)
end)

test('decoder: one byte at a time, extended lengths, masked input', function()
  local payload = string.rep('abcdefgh', 10000) -- 80000 bytes: 64-bit length
  local stream = ws.encode(ws.OP.TEXT, 'x', { mask_key = false })
    .. ws.encode(ws.OP.TEXT, string.rep('y', 300), { mask_key = false })
    .. ws.encode(ws.OP.TEXT, payload, { mask_key = false })
    .. ws.encode(ws.OP.TEXT, 'masked', { mask_key = 'abcd' })
  local d = ws.decoder()
  local got = {}
  for i = 1, 400 do
    for _, e in ipairs(assert(d:feed(stream:sub(i, i)))) do
      got[#got + 1] = e.data
    end
  end
  local rest = assert(d:feed(stream:sub(401)))
  for _, e in ipairs(rest) do
    got[#got + 1] = e.data
  end
  eq(4, #got)
  eq('x', got[1])
  eq(string.rep('y', 300), got[2])
  eq(payload, got[3])
  eq('masked', got[4])
end)

test('decoder: close frames carry code and reason', function()
  local d = ws.decoder()
  local e = assert(d:feed(ws.encode(ws.OP.CLOSE, ws.close_payload(1001, 'hub shutting down'), { mask_key = false })))
  eq({ { kind = 'close', data = ws.close_payload(1001, 'hub shutting down'), code = 1001, reason = 'hub shutting down' } }, e)
  local e2 = assert(ws.decoder():feed(ws.encode(ws.OP.CLOSE, '', { mask_key = false })))
  eq(1005, e2[1].code)
end)

test('decoder: protocol errors', function()
  local function err(bytes)
    local ev, msg, code = ws.decoder():feed(bytes)
    eq(nil, ev)
    truthy(msg)
    return code
  end
  eq(1002, err(unhex('80026c6f')), 'continuation without a start')
  eq(1002, err(unhex('0103484848') .. unhex('8103484848')), 'new message inside a fragmented one')
  eq(1002, err(unhex('090548656c6c6f')), 'fragmented ping')
  eq(1002, err(unhex('c10548656c6c6f')), 'reserved bit')
  eq(1002, err(unhex('830548656c6c6f')), 'reserved opcode')
  local ev, _, code = ws.decoder({ max_message = 10 }):feed(ws.encode(ws.OP.TEXT, string.rep('z', 11), { mask_key = false }))
  eq(nil, ev)
  eq(1009, code)
end)

test('handshake request has the bearer token, Host, and never Origin', function()
  local u = assert(ws.parse_url('ws://127.0.0.1:4097/ws'))
  local req = ws.handshake_request(u, 'KEY', { Authorization = 'Bearer t0k', Origin = 'http://evil' })
  truthy(req:find('^GET /ws HTTP/1.1\r\n'))
  truthy(req:find('\r\nHost: 127.0.0.1:4097\r\n', 1, true))
  truthy(req:find('\r\nAuthorization: Bearer t0k\r\n', 1, true))
  truthy(req:find('\r\nSec-WebSocket-Key: KEY\r\n', 1, true))
  truthy(req:find('\r\nSec-WebSocket-Version: 13\r\n', 1, true))
  truthy(not req:lower():find('origin'), 'no Origin header')
  truthy(req:sub(-4) == '\r\n\r\n')
end)

test('parse_url and host header', function()
  eq({ scheme = 'http', host = '127.0.0.1', port = 4097, path = '/' }, ws.parse_url('http://127.0.0.1:4097'))
  eq({ scheme = 'ws', host = '::1', port = 9, path = '/ws' }, ws.parse_url('ws://[::1]:9/ws'))
  eq('[::1]:9', ws.host_header(assert(ws.parse_url('ws://[::1]:9/ws'))))
  eq(nil, (ws.parse_url('wss://x:1/')))
  eq(nil, (ws.parse_url('nonsense')))
end)

test('response head parsing and upgrade check', function()
  eq(nil, (ws.parse_response_head('HTTP/1.1 101 Switching')))
  local key = 'dGhlIHNhbXBsZSBub25jZQ=='
  local head = assert(ws.parse_response_head(
    'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
      .. 'Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\129\5Hello'
  ))
  eq(101, head.status)
  eq('\129\5Hello', head.rest)
  eq(true, (ws.check_upgrade(head, key)))
  eq(false, (ws.check_upgrade(head, 'other')))
  local denied = assert(ws.parse_response_head('HTTP/1.1 401 Unauthorized\r\ncontent-length: 2\r\n\r\n{}'))
  eq(401, denied.status)
  eq(false, (ws.check_upgrade(denied, key)))
end)

-- A loopback server speaking just enough WebSocket to drive the real client through the
-- handshake, a fragmented message with a ping in between, pong, and the closing handshake.
test('connect: handshake, fragments, ping/pong, close over a real socket', function()
  local uv = vim.uv
  local server = assert(uv.new_tcp())
  assert(server:bind('127.0.0.1', 0))
  local port = server:getsockname().port
  local seen = { pong = nil, text = nil, close = nil, request = nil }
  server:listen(8, function()
    local c = assert(uv.new_tcp())
    server:accept(c)
    local buf, upgraded = '', false
    local dec = ws.decoder()
    c:read_start(function(_, chunk)
      if not chunk then
        c:close()
        return
      end
      if not upgraded then
        buf = buf .. chunk
        if not buf:find('\r\n\r\n', 1, true) then
          return
        end
        upgraded = true
        seen.request = buf
        local key = buf:match('Sec%-WebSocket%-Key: ([^\r]+)')
        c:write(
          'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: '
            .. ws.accept_key(key)
            .. '\r\n\r\n'
            -- In the same packet as the 101: the client must not lose these bytes.
            .. ws.encode(ws.OP.TEXT, '{"type":"hel', { fin = false, mask_key = false })
            .. ws.encode(ws.OP.PING, 'are you there', { mask_key = false })
            .. ws.encode(ws.OP.CONTINUATION, 'lo"}', { mask_key = false })
        )
        return
      end
      for _, e in ipairs(assert(dec:feed(chunk))) do
        if e.kind == 'pong' then
          seen.pong = e.data
        elseif e.kind == 'text' then
          seen.text = e.data
          c:write(ws.encode(ws.OP.CLOSE, ws.close_payload(1001, 'going away'), { mask_key = false }))
        elseif e.kind == 'close' then
          seen.close = e.code
          c:close()
        end
      end
    end)
  end)

  local got = { open = false, messages = {}, closed = nil }
  local conn = ws.connect(('ws://127.0.0.1:%d/ws'):format(port), { headers = { Authorization = 'Bearer abc' } }, {
    on_open = function()
      got.open = true
    end,
    on_message = function(text)
      got.messages[#got.messages + 1] = text
    end,
    on_close = function(info)
      got.closed = info
    end,
  })
  truthy(vim.wait(2000, function()
    return #got.messages == 1 and seen.pong ~= nil
  end, 5), 'message and pong')
  eq(true, got.open)
  eq('{"type":"hello"}', got.messages[1])
  eq('are you there', seen.pong)
  truthy(seen.request:find('Authorization: Bearer abc', 1, true))
  truthy(seen.request:find(('Host: 127.0.0.1:%d'):format(port), 1, true))
  truthy(not seen.request:lower():find('\norigin:'))
  eq(true, (conn.send('{"type":"ping"}')))
  truthy(vim.wait(2000, function()
    return got.closed ~= nil
  end, 5), 'closed')
  eq('{"type":"ping"}', seen.text)
  eq(1001, got.closed.code)
  eq('going away', got.closed.reason)
  truthy(vim.wait(2000, function()
    return seen.close ~= nil
  end, 5), 'close echoed')
  eq(1001, seen.close)
  eq(false, (conn.send('late')))
  server:close()
end)

test('connect: a refused upgrade reports the HTTP status', function()
  local uv = vim.uv
  local server = assert(uv.new_tcp())
  assert(server:bind('127.0.0.1', 0))
  local port = server:getsockname().port
  server:listen(8, function()
    local c = assert(uv.new_tcp())
    server:accept(c)
    c:read_start(function(_, chunk)
      if chunk and chunk:find('\r\n\r\n', 1, true) then
        c:write('HTTP/1.1 401 Unauthorized\r\ncontent-length: 16\r\n\r\n{"error":"nope"}', function()
          c:close()
        end)
      end
    end)
  end)
  local closed
  ws.connect(('ws://127.0.0.1:%d/ws'):format(port), {}, {
    on_close = function(info)
      closed = info
    end,
  })
  truthy(vim.wait(2000, function()
    return closed ~= nil
  end, 5))
  eq(401, closed.status)
  server:close()
end)

test('connect: nothing listening is a prompt close, not a hang', function()
  local uv = vim.uv
  local probe = assert(uv.new_tcp())
  assert(probe:bind('127.0.0.1', 0))
  local port = probe:getsockname().port
  probe:close()
  local closed
  ws.connect(('ws://127.0.0.1:%d/ws'):format(port), {}, {
    on_close = function(info)
      closed = info
    end,
  })
  truthy(vim.wait(2000, function()
    return closed ~= nil
  end, 5))
  eq(1006, closed.code)
  truthy(closed.err)
end)

--- A one-shot HTTP/1.1 request over vim.uv, enough for `:checkhealth` to ask the hub's
--- `/health` and check the token without the WebSocket. Keeps the plugin free of curl.
local websocket = require('hunkgate.websocket')

local M = {}

---@class hunkgate.HttpReply
---@field status integer
---@field headers table<string, string>
---@field body string

--- Perform a request; `cb` runs on the main loop.
---@param method string
---@param url string
---@param opts? {headers?: table<string, string>, timeout?: integer}
---@param cb fun(err: string?, reply: hunkgate.HttpReply?)
function M.request(method, url, opts, cb)
  opts = opts or {}
  local done = false
  local function finish(err, reply)
    if done then
      return
    end
    done = true
    vim.schedule(function()
      cb(err, reply)
    end)
  end
  local u, uerr = websocket.parse_url(url)
  if not u then
    return finish(uerr)
  end
  local timer = assert(vim.uv.new_timer())
  local tcp ---@type uv.uv_tcp_t?
  local function cleanup()
    if not timer:is_closing() then
      timer:close()
    end
    if tcp and not tcp:is_closing() then
      tcp:close()
    end
  end
  timer:start(opts.timeout or 3000, 0, function()
    cleanup()
    finish(('no answer from %s within %d ms'):format(url, opts.timeout or 3000))
  end)
  websocket.tcp_connect(u.host, u.port, function(err, sock)
    if err or done then
      if sock then
        sock:close()
      end
      cleanup()
      return finish(err)
    end
    tcp = sock
    local chunks = {}
    assert(tcp):read_start(function(rerr, chunk)
      if rerr then
        cleanup()
        return finish(rerr)
      end
      if chunk then
        chunks[#chunks + 1] = chunk
        return
      end
      cleanup()
      local head, perr = websocket.parse_response_head(table.concat(chunks))
      if not head then
        return finish(perr or 'incomplete HTTP response')
      end
      finish(nil, { status = head.status, headers = head.headers, body = head.rest })
    end)
    local lines = {
      ('%s %s HTTP/1.1'):format(method, u.path),
      'Host: ' .. websocket.host_header(u),
      'Connection: close',
      'Content-Length: 0',
    }
    for name, value in pairs(opts.headers or {}) do
      lines[#lines + 1] = name .. ': ' .. value
    end
    tcp:write(table.concat(lines, '\r\n') .. '\r\n\r\n')
  end)
end

--- Blocking variant for `:checkhealth` (which is synchronous by design).
---@param method string
---@param url string
---@param opts? {headers?: table<string, string>, timeout?: integer}
---@return string? err
---@return hunkgate.HttpReply? reply
function M.request_sync(method, url, opts)
  local result
  M.request(method, url, opts, function(err, reply)
    result = { err, reply }
  end)
  local timeout = (opts and opts.timeout or 3000) + 500
  vim.wait(timeout, function()
    return result ~= nil
  end, 10)
  if not result then
    return 'timed out'
  end
  return result[1], result[2]
end

return M

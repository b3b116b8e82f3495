-- Shared by the end-to-end scenarios, which run in a headless Neovim started by
-- tests/tests/nvim.rs against a real hub. Everything waits on conditions (vim.wait), never on
-- fixed sleeps. Environment:
--   HUNKGATE_TEST_OUT    a directory for markers shared with the Rust side
--   HUNKGATE_TEST_STATE  the hub's --state-dir (unset: the plugin must find the default one)
local M = {}

M.out = assert(vim.env.HUNKGATE_TEST_OUT, 'HUNKGATE_TEST_OUT is not set')
M.state = vim.env.HUNKGATE_TEST_STATE
M.notes = {} ---@type {msg: string, level: integer}[]

function M.log(...)
  local parts = {}
  for i = 1, select('#', ...) do
    parts[#parts + 1] = tostring((select(i, ...)))
  end
  io.stdout:write('[e2e] ', table.concat(parts, ' '), '\n')
  io.stdout:flush()
end

-- Notifications are part of what is tested: record them all.
vim.notify = function(msg, level)
  M.notes[#M.notes + 1] = { msg = msg, level = level or vim.log.levels.INFO }
  M.log('notify:', msg)
end

local function describe_state()
  local ok, hub = pcall(require, 'hunkgate.hub')
  local lines = { 'notifications:' }
  for _, n in ipairs(M.notes) do
    lines[#lines + 1] = '  ' .. n.msg
  end
  if ok then
    lines[#lines + 1] = 'hub state: ' .. tostring(hub.state)
    if hub.client then
      lines[#lines + 1] = 'last error: ' .. tostring(hub.client.last_error)
    end
    for _, s in ipairs(hub.store:list()) do
      for _, h in ipairs(s.hunks) do
        lines[#lines + 1] = ('  %s %s'):format(h.id, h.state)
      end
    end
  end
  return table.concat(lines, '\n')
end

--- Wait until `cond()` is truthy; fail the scenario with context otherwise.
---@param what string
---@param cond fun(): any
---@param timeout? integer ms
function M.wait(what, cond, timeout)
  local ok = vim.wait(timeout or 15000, function()
    local good, v = pcall(cond)
    return good and v
  end, 10)
  if not ok then
    error(('timed out waiting for %s\n%s'):format(what, describe_state()), 2)
  end
  M.log('ok:', what)
end

function M.eq(want, got, what)
  if not vim.deep_equal(want, got) then
    error(('%s: expected %s, got %s'):format(what or 'eq', vim.inspect(want), vim.inspect(got)), 2)
  end
end

--- Type keys as a user would (mappings apply), and run them to completion.
function M.feed(keys)
  vim.api.nvim_feedkeys(vim.keycode(keys), 'mx', false)
end

--- The newest notification matching a Lua pattern.
---@param pattern string
---@return string?
function M.note(pattern)
  for i = #M.notes, 1, -1 do
    if M.notes[i].msg:find(pattern) then
      return M.notes[i].msg
    end
  end
end

function M.read(path)
  local f = io.open(path, 'rb')
  if not f then
    return nil
  end
  local s = f:read('*a')
  f:close()
  return s
end

--- Markers coordinate with the Rust side of the test.
function M.mark(name, content)
  -- Write aside and rename: the Rust side reads the marker as soon as it exists, and must
  -- never see it created but not yet written (it once read an empty suggestion id).
  local path = M.out .. '/' .. name
  local f = assert(io.open(path .. '.tmp', 'wb'))
  f:write(content or '')
  f:close()
  assert(os.rename(path .. '.tmp', path))
  M.log('marker:', name)
end

function M.wait_mark(name, timeout)
  local content
  M.wait('marker ' .. name, function()
    content = M.read(M.out .. '/' .. name)
    return content ~= nil
  end, timeout or 30000)
  return content
end

--- Load the plugin as lazy.nvim would (-u NONE skips plugin/ scripts).
function M.load_plugin()
  vim.cmd.runtime('plugin/hunkgate.lua')
  assert(vim.fn.exists(':Hunkgate') == 2, ':Hunkgate is not defined')
end

---@return hunkgate.Suggestion
function M.only_suggestion()
  local list = require('hunkgate.hub').store:list()
  assert(#list == 1, ('expected one suggestion, have %d'):format(#list))
  return list[1]
end

---@param sid string
---@param hid string
function M.hunk_state(sid, hid)
  local s = require('hunkgate.hub').store:get(sid)
  for _, h in ipairs(s and s.hunks or {}) do
    if h.id == hid then
      return h.state
    end
  end
end

--- The review's current hunk.
---@return hunkgate.Hunk?
function M.current()
  local _, _, h = require('hunkgate.review').current()
  return h
end

--- Decisions move the review on when the hub's answer arrives; wait for that.
---@param id string
function M.wait_current(id)
  M.wait('review at ' .. id, function()
    local h = M.current()
    return h and h.id == id
  end)
end

function M.buf_for(path)
  return vim.fn.bufnr(path)
end

function M.buf_lines(buf)
  return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
end

return M

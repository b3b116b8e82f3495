--- The checkers' diagnostics (`[[check]]` in the hub's config, |hunkgate-checks|) as
--- `vim.diagnostic` entries: in the review window on the diff lines they fall on, and in the
--- buffers of the files at the place of their hunk. Their text is the sandbox's output: shown
--- with control characters made visible, like the agent's.
local visible = require('hunkgate.visible')

local M = {}

--- Diagnostics in the user's file buffers.
M.ns = vim.api.nvim_create_namespace('hunkgate.checks')
--- Diagnostics in the review window's buffer.
M.review_ns = vim.api.nvim_create_namespace('hunkgate.checks.review')

local severities = {
  error = vim.diagnostic.severity.ERROR,
  warning = vim.diagnostic.severity.WARN,
  info = vim.diagnostic.severity.INFO,
}

--- One diagnostic at 1-based line `lnum`: a new one at its severity, a fixed one as a hint
--- that says so.
---@param d table a Diagnostic of the protocol
---@param lnum integer
---@return vim.Diagnostic
function M.item(d, lnum)
  local fixed = d.change == 'fixed'
  return {
    lnum = math.max(lnum, 1) - 1,
    col = math.max((d.column or 1) - 1, 0),
    severity = fixed and vim.diagnostic.severity.HINT or severities[d.severity] or vim.diagnostic.severity.WARN,
    message = visible.line((fixed and 'fixed: ' or '') .. (d.message or '')),
    source = 'hunkgate ' .. visible.line(d.source or ''),
    code = d.code and visible.line(d.code) or nil,
  }
end

--- The row of a hunk's rendered diff that diagnostic `d` falls on: the line of its side (the
--- new one for `new`, the old one for `fixed`), else the first row.
---@param d table
---@param numbers {[1]: integer?, [2]: integer?}[] per row: its old and new line numbers
---@return integer 1-based row
function M.row_of(d, numbers)
  local side = d.change == 'fixed' and 1 or 2
  for row, n in ipairs(numbers) do
    if n[side] == d.line then
      return row
    end
  end
  return 1
end

--- Show hunk `h`'s diagnostics in the review buffer `buf`, whose rows carry `numbers`.
---@param buf integer
---@param h hunkgate.Hunk
---@param numbers table
function M.show_in_review(buf, h, numbers)
  local items = {}
  for _, d in ipairs(h.diagnostics or {}) do
    items[#items + 1] = M.item(d, M.row_of(d, numbers))
  end
  vim.diagnostic.set(M.review_ns, buf, items)
end

--- Where a hunk's diagnostic goes in the user's file as it is now: the run's or the base's
--- line moved to where the hunk sits in the file, within the lines the hunk holds there
--- (its old lines while it is not applied, its new ones once it is).
---@param d table
---@param h hunkgate.Hunk
---@return integer 1-based
function M.file_line(d, h)
  local hd = h.header
  if not hd then
    return d.line
  end
  local applied = h.state == 'accepted' or h.state == 'modified'
  local from = d.change == 'fixed' and hd.old_start or hd.new_start
  local span = applied and hd.new_lines or hd.old_lines
  local offset = math.min(math.max(d.line - from, 0), math.max(span, 1) - 1)
  return math.max(hd.old_start, 1) + offset
end

--- Every diagnostic of the open suggestions in `suggestions`, by repository-relative file, as
--- `vim.diagnostic` items: those of rejected hunks left out (that change is not coming).
---@param suggestions hunkgate.Suggestion[]
---@return table<string, vim.Diagnostic[]>
function M.by_file(suggestions)
  local out = {}
  local function add(file, item)
    out[file] = out[file] or {}
    table.insert(out[file], item)
  end
  for _, s in ipairs(suggestions) do
    for _, h in ipairs(s.hunks or {}) do
      if h.state ~= 'rejected' then
        for _, d in ipairs(h.diagnostics or {}) do
          add(d.file, M.item(d, M.file_line(d, h)))
        end
      end
    end
    for _, d in ipairs(s.diagnostics or {}) do
      add(d.file, M.item(d, d.line))
    end
  end
  return out
end

local shown = {} ---@type table<string, table<integer, true>> by repository: buffers holding some now

--- Put the diagnostics of `conn`'s open suggestions on the loaded buffers of their files, and
--- take them off buffers of its repository that no longer have any.
---@param conn? hunkgate.Conn default: the current connection
function M.refresh(conn)
  local hub = require('hunkgate.hub')
  local buffers = require('hunkgate.buffers')
  conn = conn or hub.current()
  if not (conn and conn.store) then
    return
  end
  local root = conn.root or ''
  local now = {}
  do
    for file, items in pairs(M.by_file(conn.store:list())) do
      for _, buf in ipairs(buffers.for_path(hub.abs(file, conn))) do
        local count = vim.api.nvim_buf_line_count(buf)
        for _, it in ipairs(items) do
          it.lnum = math.min(it.lnum, count - 1)
        end
        vim.diagnostic.set(M.ns, buf, items)
        now[buf] = true
      end
    end
  end
  for buf in pairs(shown[root] or {}) do
    if not now[buf] and vim.api.nvim_buf_is_valid(buf) then
      vim.diagnostic.reset(M.ns, buf)
    end
  end
  shown[root] = now
end

return M

--- Inline review: the current hunk overlaid on the real buffer with extmarks (removed lines
--- highlighted in place, added lines as virtual lines), and every hunk in a quickfix list.
local common = require('hunkgate.ui.common')
local diff = require('hunkgate.diff')
local nav = require('hunkgate.nav')
local visible = require('hunkgate.visible')

local ns = vim.api.nvim_create_namespace('hunkgate_inline')

---@class hunkgate.InlineView
---@field cfg hunkgate.Config
---@field win integer? the window the review uses
---@field buf integer? the buffer currently decorated and mapped
---@field maps table?
---@field qf_id integer?
---@field positions table<integer, integer>? buffer row (0-based) -> position of its diff line
local Inline = {}
Inline.__index = Inline

local M = { ns = ns }

---@param cfg hunkgate.Config
---@return hunkgate.InlineView
function M.new(cfg)
  return setmetatable({ cfg = cfg }, Inline)
end

function Inline:is_open()
  return self.buf ~= nil and vim.api.nvim_buf_is_valid(self.buf)
end

function Inline:focus()
  if self.win and vim.api.nvim_win_is_valid(self.win) then
    vim.api.nvim_set_current_win(self.win)
  end
end

function Inline:_release()
  if self.buf and vim.api.nvim_buf_is_valid(self.buf) then
    vim.api.nvim_buf_clear_namespace(self.buf, ns, 0, -1)
    common.unmap(self.buf, self.maps or {})
  end
  self.buf = nil
end

function Inline:close()
  self:_release()
  local qf = vim.fn.getqflist({ id = 0, title = 0 })
  if self.qf_id and qf.id == self.qf_id then
    vim.cmd('cclose')
  end
end

local function target_window(prev)
  if prev and vim.api.nvim_win_is_valid(prev) then
    return prev
  end
  local cur = vim.api.nvim_get_current_win()
  if vim.api.nvim_win_get_config(cur).relative == '' and vim.bo[vim.api.nvim_win_get_buf(cur)].buftype == '' then
    return cur
  end
  for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if vim.api.nvim_win_get_config(w).relative == '' and vim.bo[vim.api.nvim_win_get_buf(w)].buftype == '' then
      return w
    end
  end
  return cur
end

--- Shift of the applied hunks above `h` in the same file, so its old lines are looked for
--- where they are now.
---@param s hunkgate.Suggestion
---@param h hunkgate.Hunk
local function shift_for(s, h)
  local applied = {}
  for _, o in ipairs(s.hunks) do
    if o.file == h.file and o.id ~= h.id and nav.is_applied(o.state) then
      local p = diff.parse(o.applied_diff or o.diff or '')
      if p then
        applied[#applied + 1] = p
      end
    end
  end
  local p = diff.parse(h.diff or '')
  return p and diff.offset(applied, p.old_start) or 0
end

local function first_change_text(h)
  local p = diff.parse(h.diff or '')
  if not p then
    return vim.split(h.diff or '', '\n')[1]
  end
  for _, l in ipairs(p.lines) do
    if l.kind ~= ' ' then
      return l.kind .. l.text
    end
  end
  return ''
end

---@param ctx hunkgate.ViewCtx
function Inline:_quickfix(ctx)
  local s = ctx.suggestion
  local items = {}
  for _, h in ipairs(s.hunks) do
    local hd = h.header or {}
    items[#items + 1] = {
      filename = ctx.root .. '/' .. h.file,
      lnum = math.max(1, hd.new_start or hd.old_start or 1),
      text = visible.line(('[%s]%s %s'):format(h.state, nav.marks(h), first_change_text(h))),
      user_data = { hunkgate = h.id },
    }
  end
  local what = { title = 'hunkgate: ' .. visible.line(s.description), items = items, idx = ctx.index }
  local existing = self.qf_id and vim.fn.getqflist({ id = self.qf_id }).id or 0
  if existing ~= 0 then
    what.id = self.qf_id
    vim.fn.setqflist({}, 'r', what)
  else
    vim.fn.setqflist({}, ' ', what)
    self.qf_id = vim.fn.getqflist({ id = 0 }).id
    local win = vim.api.nvim_get_current_win()
    vim.cmd('botright copen')
    vim.api.nvim_set_current_win(win)
  end
end

--- The positions among the shown hunk's diff lines (after its @@ line, from 1) that buffer
--- lines `first`..`last` cover: from the first selected line's to the last's, so the added
--- lines (shown as virtual lines) between two selected lines are in it, and those below the
--- last selected line are not.
---@param first integer
---@param last integer
---@return integer[]? range nil when no selected line is one of the hunk's
function Inline:lines_at(first, last)
  local a, b
  for row = first - 1, last - 1 do
    local i = (self.positions or {})[row]
    if i then
      a, b = math.min(a or i, i), math.max(b or i, i)
    end
  end
  return a and { a, b } or nil
end

---@param ctx hunkgate.ViewCtx
function Inline:show(ctx)
  local h = ctx.hunk
  self.win = target_window(self.win)
  vim.api.nvim_set_current_win(self.win)
  local path = ctx.path
  if vim.fs.normalize(vim.api.nvim_buf_get_name(0)) ~= vim.fs.normalize(path) then
    local ok, err = pcall(vim.cmd.edit, vim.fn.fnameescape(path))
    if not ok then
      require('hunkgate.notify').send('hunkgate: ' .. err, vim.log.levels.WARN)
      return
    end
  end
  local buf = vim.api.nvim_get_current_buf()
  if buf ~= self.buf then
    self:_release()
    self.buf = buf
    self.maps = ctx.maps
    common.map(buf, ctx.maps)
  end
  vim.api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  self:_quickfix(ctx)
  self.positions = {}

  local p = nav.is_modifiable(h.kind) and diff.parse(h.diff or '') or nil
  local text = (' hunkgate %d/%d [%s]%s '):format(
    ctx.index,
    #ctx.suggestion.hunks,
    h.state,
    nav.marks(h)
  )
  local label = { { text, 'HunkgateDescription' } }
  if not p then
    vim.api.nvim_buf_set_extmark(buf, ns, 0, 0, { virt_lines_above = true, virt_lines = { label } })
    return
  end
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local applied = nav.is_applied(h.state)
  local shift = shift_for(ctx.suggestion, h)
  local ap = applied and (diff.parse(h.applied_diff or '') or p) or nil
  local side = ap and diff.side_text(ap, 'new') or diff.side_text(p, 'old')
  local start = ap and ap.new_start or p.old_start + shift
  if #side == 0 then
    start = start + 1 -- an empty side names the line before it
  end
  local at = diff.locate(lines, side, start) or math.max(1, math.min(start, #lines))
  local row = at - 1
  local first_row

  if applied then
    for i = 0, #side - 1 do
      if row + i < #lines then
        vim.api.nvim_buf_set_extmark(buf, ns, row + i, 0, { sign_text = '✓', sign_hl_group = 'HunkgateAddSign' })
      end
    end
    first_row = row
  else
    local adds = {}
    local function flush()
      if #adds == 0 then
        return
      end
      if row > 0 then
        vim.api.nvim_buf_set_extmark(buf, ns, math.min(row, #lines) - 1, 0, { virt_lines = adds })
      else
        vim.api.nvim_buf_set_extmark(buf, ns, 0, 0, { virt_lines = adds, virt_lines_above = true })
      end
      adds = {}
    end
    for i, l in ipairs(p.lines) do
      if l.kind ~= '+' then
        self.positions[row] = i
      end
      if l.kind == '+' then
        first_row = first_row or math.max(0, row - 1)
        -- Virtual lines are drawn as given: control characters must be made visible here.
        adds[#adds + 1] = { { '+ ' .. visible.line(l.text) .. string.rep(' ', 200), 'HunkgateAdd' } }
      else
        flush()
        if l.kind == '-' and row < #lines then
          first_row = first_row or row
          vim.api.nvim_buf_set_extmark(buf, ns, row, 0, {
            line_hl_group = 'HunkgateDelete',
            sign_text = '-',
            sign_hl_group = 'HunkgateDeleteSign',
          })
        end
        row = row + 1
      end
    end
    flush()
  end
  first_row = math.max(0, math.min(first_row or row, #lines - 1))
  vim.api.nvim_buf_set_extmark(buf, ns, first_row, 0, { virt_text = label, virt_text_pos = 'eol' })
  if h.state == 'conflict' and h.conflict then
    vim.api.nvim_buf_set_extmark(buf, ns, first_row, 0, {
      virt_lines = { { { visible.line('conflict: ' .. h.conflict), 'HunkgateConflict' } } },
      virt_lines_above = true,
    })
  end
  pcall(vim.api.nvim_win_set_cursor, self.win, { first_row + 1, 0 })
end

return M

--- The floating review window: one hunk at a time, highlighted as its file type, with the
--- review keys mapped in it.
local common = require('hunkgate.ui.common')
local nav = require('hunkgate.nav')
local visible = require('hunkgate.visible')

---@class hunkgate.ViewCtx
---@field suggestion hunkgate.Suggestion
---@field index integer
---@field hunk hunkgate.Hunk
---@field path string absolute path of the hunk's file
---@field root string the checkout the hub writes to
---@field done boolean no hunk is left to decide
---@field maps {[1]: string|false, [2]: fun(), [3]: string}[]

---@class hunkgate.FloatView
---@field cfg hunkgate.Config
---@field buf integer?
---@field win integer?
---@field rendered hunkgate.Rendered?
local Float = {}
Float.__index = Float

local M = {}

---@param cfg hunkgate.Config
---@return hunkgate.FloatView
function M.new(cfg)
  return setmetatable({ cfg = cfg }, Float)
end

function Float:is_open()
  return self.win ~= nil and vim.api.nvim_win_is_valid(self.win)
end

function Float:focus()
  if self:is_open() then
    vim.api.nvim_set_current_win(self.win)
  end
end

function Float:close()
  if self:is_open() then
    vim.api.nvim_win_close(self.win, true)
  end
  self.win, self.buf = nil, nil
end

local function truncate(s, n)
  if vim.fn.strdisplaywidth(s) <= n then
    return s
  end
  return vim.fn.strcharpart(s, 0, math.max(1, n - 1)) .. '…'
end

--- The float's 'statuscolumn': each row's line number in the old and in the new file (blank
--- on the side a line is not in), then the +/- sign.
---@return string
function M.column()
  local win = vim.g.statusline_winid
  local nums = vim.w[win].hunkgate_numbers or {}
  local row = vim.v.virtnum == 0 and nums[vim.v.lnum] or {}
  local w = vim.w[win].hunkgate_number_width or 1
  local function cell(n)
    return (n or 0) > 0 and ('%' .. w .. 'd'):format(n) or string.rep(' ', w)
  end
  return '%#LineNr#' .. cell(row[1]) .. ' ' .. cell(row[2]) .. ' %s'
end

--- Key hints for the footer, from whatever the user mapped; `?` lists them all.
local function hints(maps, done)
  local names = done and { complete = true, close = true, undo = true, prev_hunk = true, help = true }
    or { accept = true, reject = true, modify = true, next_hunk = true, prev_hunk = true, help = true }
  local out = {}
  for _, m in ipairs(maps) do
    if m[1] and names[m[4] or ''] then
      -- The help key first: a narrow window cuts the footer's end.
      table.insert(out, m[4] == 'help' and 1 or #out + 1, m[1] .. ' ' .. m[3])
    end
  end
  return table.concat(out, '  ')
end

--- The positions among the shown hunk's diff lines (after its @@ line, from 1) of the float's
--- rows `first`..`last`: each row is one line of the diff.
---@param first integer
---@param last integer
---@return integer[]? range nil when the rows hold no line of the hunk's diff
function Float:lines_at(first, last)
  local parsed = self.rendered and self.rendered.parsed
  if not parsed then
    return nil
  end
  local a, b = math.max(first, 1), math.min(last, #parsed.lines)
  return a <= b and { a, b } or nil
end

---@param ctx hunkgate.ViewCtx
function Float:show(ctx)
  local h, s = ctx.hunk, ctx.suggestion
  local r = common.render(h)
  self.rendered = r
  if not (self.buf and vim.api.nvim_buf_is_valid(self.buf)) then
    self.buf = common.scratch('hunkgate://review')
    vim.bo[self.buf].filetype = 'hunkgate'
    common.map(self.buf, ctx.maps)
  end
  local buf = self.buf
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, r.lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  common.highlight_as(buf, h.file)
  common.decorate(buf, r)
  require('hunkgate.checks').show_in_review(buf, h, r.numbers)
  if h.state == 'conflict' and h.conflict then
    vim.api.nvim_buf_set_extmark(buf, common.ns, #r.lines - 1, 0, {
      virt_lines = { { { visible.line('conflict: ' .. h.conflict), 'HunkgateConflict' } } },
    })
  end

  local conf = common.geometry(self.cfg.ui, 1 + #r.lines + ((h.state == 'conflict') and 1 or 0))
  local width = conf.width
  local status = h.state
  local merge = nav.merge_of(h)
  if merge then
    -- The window shows the merge with the file, not the agent's hunk: say so (short: the
    -- footer is cut to the window's width).
    status = status .. (merge.outcome == 'clean' and ' · merged' or ' · markers')
  end
  if ctx.done then
    status = status .. ' · all reviewed'
  end
  local where = visible.line(h.old_path and (h.old_path .. ' → ' .. h.file) or h.file)
  conf.title = ' ' .. truncate(visible.line(s.description ~= '' and s.description or 'suggestion'), width - 4) .. ' '
  conf.title_pos = 'center'
  local footer = (' %d/%d %s [%s]  %s '):format(ctx.index, #s.hunks, where, status, hints(ctx.maps, ctx.done))
  conf.footer = truncate(footer, width - 2)
  conf.footer_pos = 'left'
  if self:is_open() then
    vim.api.nvim_win_set_config(self.win, conf)
  else
    conf.style = 'minimal'
    conf.border = self.cfg.ui.border
    conf.zindex = 50
    self.win = vim.api.nvim_open_win(buf, true, conf)
    local wo = vim.wo[self.win]
    wo.signcolumn = 'yes:1'
    wo.wrap = false
    wo.cursorline = true
    wo.foldenable = false
    wo.number = true
    wo.statuscolumn = "%!v:lua.require'hunkgate.ui.float'.column()"
  end
  local widest = 1
  for _, n in ipairs(r.numbers) do
    widest = math.max(widest, #tostring(n[1] or ''), #tostring(n[2] or ''))
  end
  -- 0 for "not on this side": a window variable cannot hold a list with holes.
  vim.w[self.win].hunkgate_numbers = vim.tbl_map(function(n)
    return { n[1] or 0, n[2] or 0 }
  end, r.numbers)
  vim.w[self.win].hunkgate_number_width = widest
  -- The hunk header stays in view above the code, as in `git diff`.
  -- A destructive hunk (a deletion, rename, mode change, large deletion) says so first, as an
  -- accept-all asks before landing it; so do an oversized hunk and a rewritten file's.
  local marks = nav.marks(h)
  local bar = (marks ~= '' and marks:sub(2) .. ' ' or '') .. (r.header or h.kind or '')
  vim.wo[self.win].winbar = '%#HunkgateDescription#' .. bar:gsub('%%', '%%%%')
  pcall(vim.api.nvim_win_set_cursor, self.win, { r.first_change + 1, 0 })
end

return M

--- The scratch buffer where a hunk's new side is edited before accepting it. Writing it
--- (`:w`) is the accept: an 'acwrite' buffer hands the write to us, so the usual
--- "unsaved changes" protection applies to the edit too.
local common = require('hunkgate.ui.common')
local visible = require('hunkgate.visible')

local M = {}

---@class hunkgate.EditOpts
---@field name string buffer name
---@field file string the hunk's file (for highlighting)
---@field lines string[] the new side to start from
---@field title string
---@field ui table ui options
---@field on_write fun(lines: string[], done: fun(ok: boolean)) send the edit; `done(true)` closes
---@field on_close? fun() after the window closes

--- Open the edit float and focus it.
---@param opts hunkgate.EditOpts
---@return integer buf
---@return integer win
function M.open(opts)
  local buf = common.scratch(opts.name, 'acwrite')
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, opts.lines)
  vim.bo[buf].modified = false
  common.highlight_as(buf, opts.file)
  local conf = common.geometry(opts.ui, math.max(#opts.lines, 5) + 1)
  conf.row = conf.row + 1
  conf.border = opts.ui.border
  conf.title = ' ' .. visible.line(opts.title) .. ' '
  conf.title_pos = 'center'
  conf.footer = ' :w accepts this version · :q! cancels '
  conf.footer_pos = 'left'
  conf.zindex = 60
  local win = vim.api.nvim_open_win(buf, true, conf)
  vim.wo[win].wrap = false

  local sending = false
  vim.api.nvim_create_autocmd('BufWriteCmd', {
    buffer = buf,
    callback = function()
      if sending then
        return
      end
      sending = true
      local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
      -- Written as far as Vim is concerned, so :wq and :x work; a refusal marks it again.
      vim.bo[buf].modified = false
      opts.on_write(lines, function(ok)
        sending = false
        if not vim.api.nvim_buf_is_valid(buf) then
          return
        end
        if not ok then
          vim.bo[buf].modified = true
          return
        end
        if vim.api.nvim_win_is_valid(win) then
          vim.api.nvim_win_close(win, true)
        end
      end)
    end,
  })
  vim.api.nvim_create_autocmd('BufWipeout', {
    buffer = buf,
    once = true,
    callback = function()
      if opts.on_close then
        vim.schedule(opts.on_close)
      end
    end,
  })
  return buf, win
end

return M

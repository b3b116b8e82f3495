--- A read-only float of text lines (the review keys, `:Hunkgate status`): shown in a window
--- rather than echoed, so that no length of text raises the hit-enter prompt. `q`, `<Esc>` and
--- `?` close it.
local common = require('hunkgate.ui.common')
local visible = require('hunkgate.visible')

local M = {}

---@param title string
---@param lines string[]
---@return integer win
function M.show(title, lines)
  local buf = common.scratch('hunkgate://' .. title:gsub('%s', '-'))
  lines = vim.tbl_map(visible.line, lines)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = 'hunkgate'
  local width = 20
  for _, l in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(l))
  end
  width = math.min(width, vim.o.columns - 4)
  local height = math.max(1, math.min(#lines, vim.o.lines - vim.o.cmdheight - 4))
  local win = vim.api.nvim_open_win(buf, true, {
    relative = 'editor',
    row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
    col = math.max(0, math.floor((vim.o.columns - width) / 2)),
    width = width,
    height = height,
    style = 'minimal',
    border = require('hunkgate.config').get().ui.border,
    title = ' ' .. title .. ' ',
    title_pos = 'center',
    footer = ' q close ',
    footer_pos = 'right',
    zindex = 60,
  })
  for _, lhs in ipairs({ 'q', '<Esc>', '?' }) do
    vim.keymap.set('n', lhs, function()
      if vim.api.nvim_win_is_valid(win) then
        vim.api.nvim_win_close(win, true)
      end
    end, { buffer = buf, nowait = true, silent = true, desc = 'hunkgate: close' })
  end
  return win
end

return M

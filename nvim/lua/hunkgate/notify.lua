--- Notification text (pure) and delivery.
local visible = require('hunkgate.visible')
local M = {}

local function plural(n, word)
  return ('%d %s%s'):format(n, word, n == 1 and '' or 's')
end

--- "Suggestion ready: <description> (5 hunks in 3 files)", as the design spells it.
---@param s {description?: string, hunks?: {file: string}[], hunk_count?: integer, files?: string[]}
---@return string
function M.ready_text(s)
  local hunks = s.hunk_count or (s.hunks and #s.hunks) or 0
  local files = s.files and #s.files or 0
  if files == 0 and s.hunks then
    files = #require('hunkgate.nav').files(s.hunks)
  end
  local text =
    ('Suggestion ready: %s (%s in %s)'):format(s.description or '', plural(hunks, 'hunk'), plural(files, 'file'))
  local skipped = M.skipped_text(s)
  if skipped then
    text = text .. '\n' .. skipped
  end
  return text
end

--- The files a suggestion left out (too large, special files, odd names), or nil when none:
--- they are not hunks and the suggestion never changes them.
---@param s {skipped?: {path: string, reason: string}[]}
---@return string?
function M.skipped_text(s)
  local list = s.skipped or {}
  if #list == 0 then
    return nil
  end
  local lines = { ('%s left out (not reviewed, never changed by this suggestion):'):format(plural(#list, 'file')) }
  for i, f in ipairs(list) do
    if i > 10 then
      lines[#lines + 1] = ('  … and %d more'):format(#list - 10)
      break
    end
    lines[#lines + 1] = ('  %s: %s'):format(f.path or '?', f.reason or '')
  end
  return table.concat(lines, '\n')
end

---@param ev {code?: string, message?: string}
---@return string
function M.error_text(ev)
  return ('hunkgate: %s: %s'):format(ev.code or 'error', ev.message or '')
end

M.plural = plural

--- Whether `vim.notify` is still Neovim's own, which echoes on the command line (a
--- notification plugin replacing it shows messages its own way).
---@return boolean
function M.builtin_notify()
  local info = debug.getinfo(vim.notify, 'S')
  return info ~= nil and info.source:find('vim/_editor.lua', 1, true) ~= nil
end

--- `msg` cut to one line of `width` display cells: its first line, "…" where it was cut.
---@param msg string
---@param width integer
---@return string
function M.one_line(msg, width)
  local first = msg:match('^[^\n]*')
  if first == msg and vim.fn.strdisplaywidth(first) <= width then
    return first
  end
  first = vim.fn.strcharpart(first, 0, width)
  while first ~= '' and vim.fn.strdisplaywidth(first) > width - 1 do
    first = vim.fn.strcharpart(first, 0, vim.fn.strchars(first) - 1)
  end
  return first .. '…'
end

local level_hl = {
  [vim.log.levels.ERROR] = 'ErrorMsg',
  [vim.log.levels.WARN] = 'WarningMsg',
}

--- Full text of the last messages `echo` had to cut, newest last (`:Hunkgate status` shows them).
---@type string[]
M.cut = {}

--- Echo on the command line without ever raising the hit-enter prompt: a message longer
--- than the space left on the command line, or of several lines, makes Neovim wait for a key,
--- and that key is the user's next command (a `<leader>sr` whose space dismisses the prompt
--- and whose `s` then substitutes a character of their file). So one line is shown (and kept
--- in `:messages`, which cannot take text silently); a cut message is kept in full in `M.cut`.
---@param msg string
---@param level integer
local function echo(msg, level)
  -- v:echospace: the columns a message can use without scrolling (ruler and showcmd kept).
  local line = M.one_line(msg, math.max(1, vim.v.echospace - 1))
  if line ~= msg then
    table.insert(M.cut, msg)
    if #M.cut > 10 then
      table.remove(M.cut, 1)
    end
  end
  vim.api.nvim_echo({ { line, level_hl[level] or 'Normal' } }, true, {})
end

--- Tell the user. Through `vim.notify` when a plugin replaced it; otherwise echoed so that it
--- never waits for a key (see `echo`), the full text in `:messages`.
---@param msg string
---@param level? integer vim.log.levels
function M.send(msg, level)
  -- Agent text reaches the command line and notification plugins: control characters shown.
  local text = visible.text(msg, true)
  level = level or vim.log.levels.INFO
  if M.builtin_notify() then
    echo(text, level)
  else
    vim.notify(text, level, { title = 'hunkgate' })
  end
end

--- Text of several lines the user asked for (`:Hunkgate status`): in a window when
--- `vim.notify` is Neovim's own (echoing it would raise the hit-enter prompt), else notified.
---@param title string
---@param msg string
function M.show(title, msg)
  local text = visible.text(msg, true)
  if M.builtin_notify() then
    require('hunkgate.ui.panel').show(title, vim.split(text, '\n', { plain = true }))
  else
    vim.notify(text, vim.log.levels.INFO, { title = 'hunkgate' })
  end
end

return M

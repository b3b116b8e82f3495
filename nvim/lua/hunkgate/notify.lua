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

---@param msg string
---@param level? integer vim.log.levels
function M.send(msg, level)
  -- Agent text reaches the command line and notification plugins: control characters shown.
  vim.notify(visible.text(msg, true), level or vim.log.levels.INFO, { title = 'hunkgate' })
end

return M

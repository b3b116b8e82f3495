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
  return ('Suggestion ready: %s (%s in %s)'):format(s.description or '', plural(hunks, 'hunk'), plural(files, 'file'))
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

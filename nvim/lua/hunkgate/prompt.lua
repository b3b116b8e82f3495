--- Run prompts: the user's words plus the code they selected (pure).
local M = {}

---@class hunkgate.Selection
---@field path string relative to the repository when inside it
---@field first integer 1-based first line
---@field last integer 1-based last line
---@field filetype string
---@field lines string[]

--- Attach a selection to a prompt as a fenced block the agent can quote back.
---@param prompt string
---@param sel hunkgate.Selection?
---@return string
function M.with_context(prompt, sel)
  if not sel or #sel.lines == 0 then
    return prompt
  end
  local range = sel.first == sel.last and ('line %d'):format(sel.first) or ('lines %d-%d'):format(sel.first, sel.last)
  -- A fence longer than any backtick run inside keeps the block closed where it should be.
  local longest = 2
  for _, l in ipairs(sel.lines) do
    for run in l:gmatch('`+') do
      longest = math.max(longest, #run)
    end
  end
  local fence = string.rep('`', longest + 1)
  return table.concat({
    prompt,
    '',
    ('Selected code from %s (%s):'):format(sel.path, range),
    fence .. (sel.filetype or ''),
    table.concat(sel.lines, '\n'),
    fence,
  }, '\n')
end

--- `path` relative to `root` when inside it.
---@param path string
---@param root string?
---@return string
function M.relative(path, root)
  if root and root ~= '' then
    local prefix = root:gsub('/+$', '') .. '/'
    if path:sub(1, #prefix) == prefix then
      return path:sub(#prefix + 1)
    end
  end
  return path
end

return M

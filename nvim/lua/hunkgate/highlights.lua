--- Highlight groups, linked to the built-in Diff* groups so every colorscheme styles them.
local M = {}

M.links = {
  HunkgateAdd = 'DiffAdd',
  HunkgateDelete = 'DiffDelete',
  HunkgateChange = 'DiffChange',
  HunkgateText = 'DiffText',
  HunkgateAddSign = 'DiffAdd',
  HunkgateDeleteSign = 'DiffDelete',
  HunkgateConflict = 'DiffText',
  HunkgateNoNewline = 'NonText',
  HunkgateDescription = 'Comment',
}

--- Define the links unless the user (or a colorscheme) already styled a group.
function M.define()
  for group, target in pairs(M.links) do
    vim.api.nvim_set_hl(0, group, { link = target, default = true })
  end
end

return M

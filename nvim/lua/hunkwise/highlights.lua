--- Highlight groups, linked to the built-in Diff* groups so every colorscheme styles them.
local M = {}

M.links = {
  HunkwiseAdd = 'DiffAdd',
  HunkwiseDelete = 'DiffDelete',
  HunkwiseChange = 'DiffChange',
  HunkwiseText = 'DiffText',
  HunkwiseAddSign = 'DiffAdd',
  HunkwiseDeleteSign = 'DiffDelete',
  HunkwiseConflict = 'DiffText',
  HunkwiseNoNewline = 'NonText',
  HunkwiseDescription = 'Comment',
}

--- Define the links unless the user (or a colorscheme) already styled a group.
function M.define()
  for group, target in pairs(M.links) do
    vim.api.nvim_set_hl(0, group, { link = target, default = true })
  end
end

return M

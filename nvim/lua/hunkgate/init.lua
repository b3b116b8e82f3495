--- hunkgate: review an AI agent's changes hunk by hunk, from Neovim.
---
--- `setup()` is the only function with side effects on load-time state (options, highlight
--- links, the open-review mapping, the connection); everything else acts when called.
local M = {}

local function hub()
  return require('hunkgate.hub')
end

local mapped_open ---@type string?

--- Configure the plugin and connect to the hub of the current repository.
---@param opts? table see `:help hunkgate-config`
function M.setup(opts)
  local config = require('hunkgate.config')
  local cfg, errs = config.resolve(opts)
  if not cfg then
    vim.notify('hunkgate: invalid options:\n' .. table.concat(errs, '\n'), vim.log.levels.ERROR)
    return
  end
  config.set(cfg)

  local hl = require('hunkgate.highlights')
  hl.define()
  local group = vim.api.nvim_create_augroup('hunkgate', { clear = true })
  -- :colorscheme clears highlights, links included.
  vim.api.nvim_create_autocmd('ColorScheme', { group = group, callback = hl.define })

  if mapped_open then
    pcall(vim.keymap.del, 'n', mapped_open)
    mapped_open = nil
  end
  -- Before mapping: the key may replace another plugin's (:checkhealth hunkgate says so).
  require('hunkgate.keys').remember(cfg)
  if cfg.keymaps.open_review then
    vim.keymap.set('n', cfg.keymaps.open_review, M.review, { desc = 'hunkgate: open review' })
    mapped_open = cfg.keymaps.open_review
  end

  -- Follow the current buffer's repository, connecting to its hub (server.auto_connect).
  hub().start()
end

--- Statusline component: pending hunks and the agent's last status line ("" when idle).
---@return string
function M.statusline()
  return hub().statusline()
end

-- Every action of hunkgate.actions, by its API name: connect(), disconnect(), review({id}),
-- list(), status(), run({prompt}, {selection}), answer({text}), skip(), accept_hunk(),
-- reject_hunk(), modify_hunk(), preview_hunk(), nav_hunk({dir}), accept_all(), reject_all(),
-- complete(), discard(), undo(), close(). See `:help hunkgate-api`.
for name, fn in pairs(require('hunkgate.actions').api()) do
  assert(M[name] == nil, 'hunkgate: action API name taken: ' .. name)
  M[name] = fn
end

return M

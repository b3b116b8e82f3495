--- Which of the plugin's `<leader>s…` keys another mapping already takes. kickstart.nvim and
--- LazyVim map `<leader>s…` for search (`<leader>sr` is "[S]earch [R]esume" in kickstart), so
--- with their keys in place the review key silently replaces theirs or is replaced by it.
--- Read by `:checkhealth hunkgate` (health.lua); pure apart from reading the current maps.
local M = {}

--- The keys that live where other plugins' keys do: the global `open_review` and the
--- `keymaps.inline` keys (set on your own buffers). The floating review's single letters are
--- buffer-local to its scratch buffer and shadow nothing of yours.
---@param cfg hunkgate.Config
---@return {option: string, lhs: string}[]
function M.shared_keys(cfg)
  local km = cfg.keymaps
  local out = {}
  if km.open_review then
    out[#out + 1] = { option = 'keymaps.open_review', lhs = km.open_review }
  end
  local names = vim.tbl_keys(km.inline)
  table.sort(names)
  for _, name in ipairs(names) do
    if km.inline[name] then
      out[#out + 1] = { option = 'keymaps.inline.' .. name, lhs = km.inline[name] }
    end
  end
  return out
end

--- A mapping that is the plugin's own: set by setup() or pointing at a <Plug>(hunkgate-…).
---@param m table an item of nvim_get_keymap()
local function ours(m)
  return (m.desc or ''):find('^hunkgate:') ~= nil or (m.rhs or ''):find('<Plug>(hunkgate-', 1, true) ~= nil
end

---@class hunkgate.KeyConflict
---@field option string the keymaps option
---@field lhs string the plugin's key, as configured
---@field other string the other mapping's key
---@field desc string what the other mapping says it does (its rhs when it has no description)
---@field exact boolean the same key (else one is a prefix of the other, which makes Neovim wait)

--- The plugin's shared keys that a Normal-mode mapping of someone else takes or overlaps.
---@param cfg hunkgate.Config
---@param maps? table[] nvim_get_keymap('n') (the global Normal-mode maps) when nil
---@return hunkgate.KeyConflict[]
function M.conflicts(cfg, maps)
  maps = maps or vim.api.nvim_get_keymap('n')
  local out = {}
  for _, k in ipairs(M.shared_keys(cfg)) do
    local mine = vim.keycode(k.lhs)
    for _, m in ipairs(maps) do
      local other = m.lhsraw or vim.keycode(m.lhs)
      local exact = other == mine
      if
        not ours(m)
        and (exact or vim.startswith(mine, other) or vim.startswith(other, mine))
      then
        out[#out + 1] = {
          option = k.option,
          lhs = k.lhs,
          other = m.lhs,
          desc = m.desc or m.rhs or '(a Lua function)',
          exact = exact,
        }
      end
    end
  end
  return out
end

--- Conflicts seen by setup() before it mapped `open_review` (which replaces a global mapping
--- of the same key, so a later look would no longer see the other one).
---@type hunkgate.KeyConflict[]
M.at_setup = {}

---@param cfg hunkgate.Config
function M.remember(cfg)
  M.at_setup = M.conflicts(cfg)
end

--- Report conflicts to :checkhealth: the ones setup() saw and the ones there are now.
---@param cfg hunkgate.Config
function M.check(cfg)
  local health = vim.health
  local found, seen = {}, {}
  for _, c in ipairs(vim.list_extend(vim.list_extend({}, M.at_setup), M.conflicts(cfg))) do
    local id = c.option .. '\0' .. c.other
    if not seen[id] then
      seen[id] = true
      found[#found + 1] = c
    end
  end
  if #found == 0 then
    health.ok('no other mapping takes the review keys (keymaps.open_review, keymaps.inline)')
    return
  end
  for _, c in ipairs(found) do
    health.warn(
      ('%s = %q: %s mapping %q (%s)'):format(
        c.option,
        c.lhs,
        c.exact and 'another plugin has the same key,' or 'overlaps with',
        c.other,
        c.desc
      ),
      {
        "Move all the review's <leader>s… keys at once: setup({ keymaps = { prefix = '<leader>h' } })",
        'Or set this one key, or false to leave it unmapped (:help hunkgate-config-keymaps)',
      }
    )
  end
end

return M

-- The review's <leader>s… keys: one option moves them all, and :checkhealth names the
-- mappings of other plugins they collide with (kickstart.nvim's and LazyVim's search keys).
local config = require('hunkgate.config')
local keys = require('hunkgate.keys')

vim.g.mapleader = ' '

local function resolve(opts)
  local cfg = assert(config.resolve(vim.tbl_deep_extend('force', { server = { auto_connect = false } }, opts or {})))
  return cfg
end

test('keymaps.prefix moves open_review and every inline key; keys set explicitly stay', function()
  local cfg = resolve({ keymaps = { prefix = '<leader>h', inline = { accept = 'ga' } } })
  eq('<leader>hr', cfg.keymaps.open_review)
  eq('<leader>hx', cfg.keymaps.inline.reject)
  eq('<leader>h?', cfg.keymaps.inline.help)
  eq('ga', cfg.keymaps.inline.accept, 'set explicitly')
  eq('a', cfg.keymaps.accept, 'the floating window keys are not prefixed')
  local none = resolve({ keymaps = { prefix = false, open_review = '<F5>' } })
  eq('<F5>', none.keymaps.open_review)
  eq(false, none.keymaps.inline.undo)
  -- Positive control: the default prefix leaves the documented defaults.
  eq('<leader>sr', resolve().keymaps.open_review)
  eq('<leader>sa', resolve().keymaps.inline.accept)
end)

test("another plugin's <leader>s… maps are found: the same key, and a prefix of one", function()
  vim.keymap.set('n', '<leader>sr', '<cmd>echo<CR>', { desc = '[S]earch [R]esume' })
  vim.keymap.set('n', '<leader>sd', '<cmd>echo<CR>', { desc = '[S]earch [D]iagnostics' })
  local found = keys.conflicts(resolve())
  local by = {}
  for _, c in ipairs(found) do
    by[c.option] = c
  end
  eq(2, #found, vim.inspect(found))
  eq({ option = 'keymaps.open_review', lhs = '<leader>sr', other = ' sr', desc = '[S]earch [R]esume', exact = true }, by['keymaps.open_review'])
  eq('[S]earch [D]iagnostics', by['keymaps.inline.discard'].desc)
  -- Moved under another prefix, nothing collides.
  eq({}, keys.conflicts(resolve({ keymaps = { prefix = '<leader>h' } })))
  -- A map of "<leader>s" alone overlaps every key under it (Neovim waits for more keys).
  vim.keymap.set('n', '<leader>s', '<cmd>echo<CR>')
  eq(false, keys.conflicts(resolve({ keymaps = { inline = { discard = false } } }))[1].exact)
  vim.keymap.del('n', '<leader>s')
  vim.keymap.del('n', '<leader>sd')
  -- The plugin's own mappings are not conflicts.
  vim.keymap.set('n', '<leader>sd', '<Plug>(hunkgate-discard)')
  vim.keymap.del('n', '<leader>sr')
  vim.keymap.set('n', '<leader>sr', '<cmd>echo<CR>', { desc = 'hunkgate: open review' })
  eq({}, keys.conflicts(resolve()))
  vim.keymap.del('n', '<leader>sd')
  vim.keymap.del('n', '<leader>sr')
end)

test('setup() replacing a mapping of the same key is still reported by :checkhealth', function()
  vim.keymap.set('n', '<leader>sr', '<cmd>echo<CR>', { desc = '[S]earch [R]esume' })
  require('hunkgate').setup({ server = { auto_connect = false } })
  eq('hunkgate: open review', vim.fn.maparg('<leader>sr', 'n', false, true).desc, 'setup mapped it')
  local warned = {}
  local real = vim.health
  vim.health = {
    ok = function() end,
    warn = function(msg, advice)
      warned[#warned + 1] = { msg, advice }
    end,
  }
  local ok, err = pcall(keys.check, config.get())
  vim.health = real
  assert(ok, err)
  eq(1, #warned, vim.inspect(warned))
  truthy(warned[1][1]:find('keymaps.open_review = "<leader>sr"', 1, true), warned[1][1])
  truthy(warned[1][1]:find('[S]earch [R]esume', 1, true), warned[1][1])
  truthy(warned[1][2][1]:find("prefix = '<leader>h'", 1, true), warned[1][2][1])
  -- Positive control: with nothing else mapped, no warning.
  vim.keymap.del('n', '<leader>sr')
  require('hunkgate').setup({ server = { auto_connect = false } })
  warned = {}
  vim.health = { ok = function() end, warn = function(msg)
    warned[#warned + 1] = msg
  end }
  ok, err = pcall(keys.check, config.get())
  vim.health = real
  assert(ok, err)
  eq({}, warned)
  vim.keymap.del('n', '<leader>sr')
  config.set(resolve())
end)

-- Driven by tests/tests/nvim.rs (`install_*`): checks an install of the plugin in a headless
-- Neovim started with `-u NONE` (so Neovim itself sources no plugin file), and writes what it
-- found as JSON to the file `out`.
--   nvim --headless -u NONE -i NONE -l install.lua <mode> <clone> <spec.lua> <out>
-- mode `lazy`: do what lazy.nvim does with the documented spec (`spec.lua` returns it): put the
-- plugin's directory (`clone`, what lazy.nvim cloned from `url`) on 'runtimepath', then call
-- `config(plugin, opts)`. mode `rtp`: nothing more (the caller put `nvim/` on 'runtimepath').
local mode, clone, spec_file, out = unpack(_G.arg)
local found = {}
if mode == 'lazy' then
  local spec = dofile(spec_file)
  found.name = spec.name
  found.url = type(spec.url) == 'string' and spec.url ~= ''
  local plugin = { name = spec.name, dir = clone, url = spec.url }
  vim.opt.rtp:prepend(plugin.dir)
  spec.config(plugin, spec.opts or {})
  local ok, mod = pcall(require, 'hunkgate')
  found.module = ok and type(mod.setup) == 'function'
  found.command = vim.fn.exists(':Hunkgate') == 2
end
local ok, err = pcall(vim.cmd.help, 'hunkgate')
found.help = ok and vim.bo.buftype == 'help' and vim.fn.expand('%:t') == 'hunkgate.txt'
found.help_error = not ok and tostring(err) or nil
vim.fn.writefile({ vim.json.encode(found) }, out)

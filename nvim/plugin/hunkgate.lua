-- Registers :Hunkgate and the <Plug> mappings only. Nothing connects, maps user keys or
-- defines highlights until require('hunkgate').setup() is called.
if vim.g.loaded_hunkgate then
  return
end
vim.g.loaded_hunkgate = true

vim.api.nvim_create_user_command('Hunkgate', function(opts)
  require('hunkgate.commands').dispatch(opts)
end, {
  nargs = '*',
  range = true,
  desc = 'hunkgate: review AI suggestions hunk by hunk',
  complete = function(arglead, cmdline)
    return require('hunkgate.commands').complete(arglead, cmdline)
  end,
})

-- One <Plug>(hunkgate-…) per action of hunkgate.actions (which loads nothing else).
require('hunkgate.actions').define_plugs()

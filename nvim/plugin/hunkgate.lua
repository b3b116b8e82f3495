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

local function plug(name, fn, modes)
  vim.keymap.set(modes or 'n', '<Plug>(hunkgate-' .. name .. ')', fn, { silent = true, desc = 'hunkgate: ' .. name })
end

local function call(method, ...)
  local args = { ... }
  return function()
    require('hunkgate')[method](unpack(args))
  end
end

plug('review', call('review'))
plug('list', call('list'))
plug('connect', call('connect'))
plug('disconnect', call('disconnect'))
plug('status', call('status'))
plug('accept', call('accept_hunk'))
plug('reject', call('reject_hunk'))
plug('modify', call('modify_hunk'))
plug('preview', call('preview_hunk'))
plug('next', call('nav_hunk', 'next'))
plug('prev', call('nav_hunk', 'prev'))
plug('accept-all', call('accept_all'))
plug('reject-all', call('reject_all'))
plug('complete', call('complete'))
plug('discard', call('discard'))
plug('undo', call('undo'))
plug('close', call('close'))
plug('run', call('run'))
plug('answer', call('answer'))
plug('skip', call('skip'))
-- In visual mode the selection goes along as context.
plug('run', ':Hunkgate run<CR>', 'x')

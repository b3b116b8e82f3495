-- :Hunkwise and <Plug>(hunkwise-run) hand the right selection to run(), without a hub.
local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2)))
local root = vim.fs.dirname(vim.fs.dirname(here))
vim.cmd.source(vim.fn.fnameescape(root .. '/plugin/hunkwise.lua'))

local hub = require('hunkwise.hub')
local sent = {}
local real_request = hub.request
hub.request = function(cmd, cb)
  sent[#sent + 1] = cmd
  cb({ success = true, data = { run_id = 'run-1234567890' } })
end
local real_notify = vim.notify
vim.notify = function() end

local buf = vim.api.nvim_create_buf(true, false)
vim.api.nvim_set_current_buf(buf)
vim.api.nvim_buf_set_lines(buf, 0, -1, false, { 'alpha beta', 'gamma delta', 'epsilon' })

test(':Hunkwise run without a range sends the prompt alone', function()
  sent = {}
  vim.cmd('Hunkwise run just this')
  eq({ { type = 'run', prompt = 'just this' } }, sent)
end)

test('a linewise range attaches whole lines', function()
  sent = {}
  vim.cmd('2,3Hunkwise run explain')
  truthy(sent[1].prompt:find('^explain\n\nSelected code from .* %(lines 2%-3%):\n```\ngamma delta\nepsilon\n```$'), sent[1].prompt)
end)

test('a charwise visual selection keeps its columns', function()
  sent = {}
  vim.api.nvim_win_set_cursor(0, { 1, 6 })
  vim.api.nvim_feedkeys(vim.keycode('vjl<Esc>'), 'nx', false)
  vim.cmd("'<,'>Hunkwise run tighten")
  truthy(sent[1].prompt:find('%[No Name%] %(lines 1%-2%):\n```\nbeta\ngamma de\n```$'), sent[1].prompt)
end)

test('<Plug>(hunkwise-run) in Visual mode asks for the prompt and attaches the selection', function()
  sent = {}
  local real_input = vim.ui.input
  vim.ui.input = function(_, on_confirm)
    on_confirm('from the mapping')
  end
  vim.keymap.set('x', '<F2>', '<Plug>(hunkwise-run)')
  vim.api.nvim_win_set_cursor(0, { 3, 0 })
  vim.api.nvim_feedkeys(vim.keycode('V<F2>'), 'mx', false)
  vim.ui.input = real_input
  eq(1, #sent)
  truthy(sent[1].prompt:find('^from the mapping\n\nSelected code from .* %(line 3%):\n```\nepsilon\n```$'), sent[1].prompt)
end)

test('unknown subcommands are reported; completion lists them all', function()
  local msgs = {}
  vim.notify = function(m)
    msgs[#msgs + 1] = m
  end
  vim.cmd('Hunkwise bogus')
  truthy(msgs[1]:find('unknown subcommand "bogus"'), msgs[1])
  eq({ 'reject', 'reject_all', 'review', 'run' }, vim.fn.getcompletion('Hunkwise r', 'cmdline'))
end)

hub.request = real_request
vim.notify = real_notify

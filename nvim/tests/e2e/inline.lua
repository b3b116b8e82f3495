-- Inline review (extmarks in the real buffer + quickfix list), :Hunkgate commands and their
-- completion, and :checkhealth hunkgate against a live hub.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')
local root = vim.uv.fs_realpath(vim.fn.getcwd())

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state, reconnect = { min_delay = 50, max_delay = 500 } },
  ui = { style = 'inline' },
})
local hub = require('hunkgate.hub')
local inline_ns = require('hunkgate.ui.inline').ns

vim.cmd('edit doc.md')
local buf = vim.api.nvim_get_current_buf()
local win = vim.api.nvim_get_current_win()
t.wait('synced', hub.synced)

local subs = vim.fn.getcompletion('Hunkgate ', 'cmdline')
local all = { 'connect', 'disconnect', 'review', 'list', 'run', 'accept', 'reject', 'modify' }
vim.list_extend(all, { 'accept_all', 'reject_all', 'complete', 'discard', 'undo', 'status' })
for _, want in ipairs(all) do
  t.eq(true, vim.tbl_contains(subs, want), 'completion offers ' .. want)
end
t.eq({ 'accept', 'accept_all' }, vim.fn.getcompletion('Hunkgate acc', 'cmdline'), 'completion by prefix')

vim.cmd('Hunkgate run tidy the doc')
t.wait('ready', function()
  return t.note('^Suggestion ready: tidy the doc %(2 hunks in 1 file%)')
end, 30000)
local s = t.only_suggestion()
t.eq({ s.id }, vim.fn.getcompletion('Hunkgate review ' .. s.id:sub(1, 4), 'cmdline'), 'review completes ids')

-- :Hunkgate list offers the open suggestions; picking one opens its review.
local offered
vim.ui.select = function(items, opts, on_choice)
  offered = vim.tbl_map(opts.format_item, items)
  on_choice(items[1])
end
vim.cmd('Hunkgate list')
t.eq({ s.id:sub(1, 8) .. '  tidy the doc (0/2 reviewed)' }, offered, 'list entries')
t.eq(win, vim.api.nvim_get_current_win(), 'review stays in the editing window')
t.eq(buf, vim.api.nvim_get_current_buf(), 'on doc.md')
local function marks()
  return vim.api.nvim_buf_get_extmarks(buf, inline_ns, 0, -1, { details = true })
end
local deleted, added = {}, {}
for _, m in ipairs(marks()) do
  if m[4].line_hl_group == 'HunkgateDelete' then
    deleted[#deleted + 1] = m[2]
  end
  for _, vl in ipairs(m[4].virt_lines or {}) do
    added[#added + 1] = vim.trim(vl[1][1])
  end
end
t.eq({ 2 }, deleted, 'line 3 marked as removed (row 2)')
t.eq({ '+ line three' }, added, 'the new line shown as a virtual line')
t.eq(3, vim.api.nvim_win_get_cursor(0)[1], 'cursor on the hunk')
local qf = vim.fn.getqflist({ title = 0, items = 0 })
t.eq('hunkgate: tidy the doc', qf.title, 'quickfix title')
t.eq(2, #qf.items, 'one quickfix entry per hunk')
t.eq(win, vim.api.nvim_get_current_win(), 'quickfix opened without taking focus')

t.feed('<leader>sa')
t.wait('first hunk accepted and the buffer reloaded', function()
  return s.hunks[1].state == 'accepted' and t.buf_lines(buf)[3] == 'line three'
end)
t.wait('overlay moved to the second hunk', function()
  for _, m in ipairs(marks()) do
    if m[4].line_hl_group == 'HunkgateDelete' and m[2] == 17 then
      return true
    end
  end
end)
-- The user saves a change to the hunk's context: accepting is a conflict, nothing is written.
vim.api.nvim_buf_set_lines(buf, 16, 17, false, { 'line 17, edited by the user' })
vim.cmd('silent write')
t.feed('<leader>sa')
t.wait('conflict reported', function()
  return t.note('^hunkgate: apply_failed: doc%.md') and hub.store:get(s.id).hunks[2].state == 'conflict'
end)
t.wait('conflict shown in the overlay', function()
  for _, m in ipairs(marks()) do
    for _, vl in ipairs(m[4].virt_lines or {}) do
      if vl[1][1]:find('^conflict: ') then
        return true
      end
    end
  end
end)
t.eq('line 18', vim.split(t.read(root .. '/doc.md'), '\n')[18], 'conflict wrote nothing')
-- The reject prompt answered with Enter alone: rejected, without a comment.
t.feed('<leader>sx<CR>')
t.wait('second hunk rejected', function()
  return hub.store:get(s.id).hunks[2].state == 'rejected'
end)
t.eq(nil, hub.store:get(s.id).hunks[2].comment, 'no comment')
t.eq('line 18', t.buf_lines(buf)[18], 'rejected hunk not written')

vim.cmd('Hunkgate status')
t.wait('status shows the connection', function()
  return t.note('^hunkgate: synced to http://127%.0%.0%.1:%d+')
end)

vim.cmd('Hunkgate complete')
t.wait('completed', function()
  return t.note('^hunkgate: completed "tidy the doc": 1 of 2 hunks applied') and #hub.store:list() == 0
end)
t.eq({}, vim.api.nvim_buf_get_keymap(buf, 'n'), 'inline keymaps removed from the buffer')
t.eq(0, #marks(), 'overlay cleared')

vim.cmd('checkhealth hunkgate')
local report = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
for _, want in ipairs({ 'Neovim', 'token: ', 'serves ' .. root, 'found by server.state_dir', 'the hub accepts the token' }) do
  if not report:find(want, 1, true) then
    error(('checkhealth lacks %q:\n%s'):format(want, report))
  end
end
if report:find('ERROR', 1, true) then
  error('checkhealth reports an error:\n' .. report)
end
t.log('done')

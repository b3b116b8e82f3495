-- The floating review, driven through its keymaps: run with a visual selection, get notified,
-- navigate, accept, undo, reject, refuse to write under unsaved changes, modify, accept the rest,
-- complete. Files on disk are checked again by the Rust side afterwards.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')
local root = vim.uv.fs_realpath(vim.fn.getcwd())

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state, reconnect = { min_delay = 50, max_delay = 500 } },
})
local hub = require('hunkgate.hub')

-- Buffers for the files the agent will change, so reloads can be seen.
vim.cmd('edit b.txt')
vim.cmd('edit c.txt')
vim.cmd('edit a.txt')
local abuf, bbuf, cbuf = t.buf_for('a.txt'), t.buf_for('b.txt'), t.buf_for('c.txt')
t.eq('dos', vim.bo[cbuf].fileformat, 'c.txt is a CRLF file')

t.wait('connected and synced', hub.synced)

-- :'<,'>Hunkgate run from a linewise selection of lines 1-3.
t.feed('ggVjj:Hunkgate run make it louder<CR>')
t.wait('run started', function()
  return t.note('^hunkgate: run %S+ started')
end)
t.wait('ready notification', function()
  return t.note('^Suggestion ready:')
end, 30000)
local s = t.only_suggestion()
t.eq('Suggestion ready: make it louder (5 hunks in 4 files)', t.note('^Suggestion ready:'), 'notification text')
t.eq('hunkgate: 5 pending', require('hunkgate').statusline():match('^hunkgate: %d+ pending'), 'statusline')

local ids = vim.tbl_map(function(h)
  return h.file .. ':' .. h.index
end, s.hunks)
t.eq({ 'a.txt:0', 'a.txt:1', 'b.txt:0', 'c.txt:0', 'new.txt:0' }, ids, 'hunk order')
local function hid(short)
  return s.id .. ':' .. short
end

-- <leader>sr opens the float on the first hunk.
t.feed('<leader>sr')
local sess = require('hunkgate.review').session
t.wait('review window', function()
  return sess and sess.view:is_open()
end)
local view = sess.view
t.eq(view.win, vim.api.nvim_get_current_win(), 'the review window has focus')
t.eq(hid('a.txt:0'), t.current().id, 'first hunk')
local lines = t.buf_lines(view.buf)
t.eq(true, vim.tbl_contains(lines, 'LINE 2') and vim.tbl_contains(lines, 'line 2'), 'both sides shown: ' .. vim.inspect(lines))
local marks = vim.api.nvim_buf_get_extmarks(view.buf, require('hunkgate.ui.common').ns, 0, -1, { details = true })
local groups = {}
for _, m in ipairs(marks) do
  groups[m[4].line_hl_group or ''] = true
end
t.eq(true, groups.HunkgateAdd and groups.HunkgateDelete, 'added and removed lines highlighted')
local title = vim.api.nvim_win_get_config(view.win).title
t.eq('make it louder', vim.trim(type(title) == 'table' and title[1][1] or title), 'float title')

-- n / p move.
t.feed('n')
t.eq(hid('a.txt:1'), t.current().id, 'n')
t.feed('n')
t.eq(hid('b.txt:0'), t.current().id, 'n again')
t.feed('pp')
t.eq(hid('a.txt:0'), t.current().id, 'p p')

-- a accepts: the file changes on disk and its buffer reloads; review moves on.
t.feed('a')
t.wait('a.txt:0 accepted', function()
  return t.hunk_state(s.id, hid('a.txt:0')) == 'accepted'
end)
t.wait('a.txt buffer reloaded', function()
  return t.buf_lines(abuf)[2] == 'LINE 2'
end)
t.eq('LINE 2', vim.split(t.read(root .. '/a.txt'), '\n')[2], 'a.txt on disk')
t.wait_current(hid('a.txt:1'))
t.wait('statusline counts the decision', function()
  return require('hunkgate').statusline():find('4 pending', 1, true)
end)

-- u undoes the last decision (the current hunk is pending) and goes back to it.
t.feed('u')
t.wait('a.txt:0 undone', function()
  return t.hunk_state(s.id, hid('a.txt:0')) == 'pending'
end)
t.wait('a.txt buffer restored', function()
  return t.buf_lines(abuf)[2] == 'line 2'
end)
t.eq(hid('a.txt:0'), t.current().id, 'undo shows the undone hunk')
t.feed('a')
t.wait('a.txt:0 accepted again', function()
  return t.hunk_state(s.id, hid('a.txt:0')) == 'accepted' and t.buf_lines(abuf)[2] == 'LINE 2'
end)

-- r asks for a comment: cancelled (CTRL-C; a typed <Esc> too), the hunk stays pending.
t.wait_current(hid('a.txt:1'))
t.feed('r<C-c>')
t.wait('told the hunk was kept', function()
  return t.note('^hunkgate: a%.txt not rejected')
end)
t.eq('pending', t.hunk_state(s.id, hid('a.txt:1')), 'cancelled: still pending')
-- r with a comment typed at the prompt rejects: nothing written, the comment goes to the hub
-- (the Rust side finds it in the feedback log and in the next run's context).
t.feed('rkeep the old name<CR>')
t.wait('a.txt:1 rejected', function()
  return t.hunk_state(s.id, hid('a.txt:1')) == 'rejected'
end)
t.wait('the comment is on the hunk', function()
  return hub.store:get(s.id).hunks[2].comment == 'keep the old name'
end)
t.eq('line 25', vim.split(t.read(root .. '/a.txt'), '\n')[25], 'rejected hunk not written')

-- b.txt has unsaved changes: accepting is refused and says why; the hunk stays pending.
t.wait_current(hid('b.txt:0'))
vim.api.nvim_buf_set_lines(bbuf, 0, -1, false, { 'my unsaved edit' })
t.eq(true, vim.bo[bbuf].modified, 'b.txt modified')
t.feed('a')
t.wait('told about unsaved changes', function()
  return t.note('b%.txt has unsaved changes')
end)
t.eq('pending', t.hunk_state(s.id, hid('b.txt:0')), 'still pending')
t.eq('bravo\n', t.read(root .. '/b.txt'), 'b.txt untouched on disk')
t.eq({ 'my unsaved edit' }, t.buf_lines(bbuf), 'the edit is kept')
t.eq(hid('b.txt:0'), t.current().id, 'still at b.txt:0')
-- Once the user drops the edit, accepting works and the buffer shows the result.
vim.api.nvim_buf_call(bbuf, function()
  vim.cmd('edit!')
end)
t.feed('a')
t.wait('b.txt:0 accepted and reloaded', function()
  return t.hunk_state(s.id, hid('b.txt:0')) == 'accepted' and t.buf_lines(bbuf)[1] == 'BRAVO'
end)

-- m: edit the new side in a scratch buffer; :w sends modify.
t.wait_current(hid('c.txt:0'))
t.feed('m')
local edit
t.wait('modify buffer', function()
  edit = sess.edit_buf
  return edit and vim.api.nvim_get_current_buf() == edit
end)
t.eq({ 'one', 'TWO', 'three' }, t.buf_lines(edit), 'new side, without \\r')
vim.api.nvim_buf_set_lines(edit, 1, 2, false, { 'Two (edited)', 'and a new line' })
vim.cmd('write')
t.wait('c.txt:0 modified', function()
  return t.hunk_state(s.id, hid('c.txt:0')) == 'modified'
end)
t.wait('modify buffer closed', function()
  return not vim.api.nvim_buf_is_valid(edit)
end)
t.eq('one\r\nTwo (edited)\r\nand a new line\r\nthree\r\n', t.read(root .. '/c.txt'), 'c.txt keeps CRLF')
t.wait('c.txt buffer reloaded', function()
  return vim.deep_equal(t.buf_lines(cbuf), { 'one', 'Two (edited)', 'and a new line', 'three' })
end)
t.wait('focus back in the review', function()
  return vim.api.nvim_get_current_win() == view.win
end)

-- A accepts everything left (the new file).
t.wait_current(hid('new.txt:0'))
t.feed('A')
t.wait('new.txt created', function()
  return t.hunk_state(s.id, hid('new.txt:0')) == 'accepted'
end)
local new = vim.split(t.read(root .. '/new.txt'), '\n')
t.eq('new file', new[1], 'new.txt on disk')
t.eq('filler line 2000, so that the suggestion is sent in fragments', new[2001], 'new.txt whole')

-- <CR> completes; the review closes and the suggestion is gone.
t.feed('<CR>')
t.wait('completed', function()
  return t.note('^hunkgate: completed') and #hub.store:list() == 0
end)
t.wait('review closed', function()
  return not view:is_open()
end)
t.eq('', require('hunkgate').statusline(), 'nothing pending')
t.log('done')

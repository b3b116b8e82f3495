-- A stale hunk in the floating review (|hunkgate-merge|): the accept that finds it stale shows
-- its three-way merge with the file; `a` lands a clean one exactly as shown; a conflicted one
-- opens in the modify buffer with its markers, and what is written lands. Files on disk are
-- checked against `git merge-file` by the Rust side afterwards.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')
local root = vim.uv.fs_realpath(vim.fn.getcwd())

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state, reconnect = { min_delay = 50, max_delay = 500 } },
})
local hub = require('hunkgate.hub')
t.wait('connected and synced', hub.synced)

vim.cmd('Hunkgate run shout ten')
t.wait('ready notification', function()
  return t.note('^Suggestion ready:')
end, 30000)
local s = t.only_suggestion()
local function hid(short)
  return s.id .. ':' .. short
end

-- The user edits both files after the run: a.txt next to the agent's line, b.txt on it.
local function edit_line(file, n, text)
  local lines = vim.fn.readfile(root .. '/' .. file)
  lines[n] = text
  vim.fn.writefile(lines, root .. '/' .. file)
end
edit_line('a.txt', 8, 'line 8, mine')
edit_line('b.txt', 10, 'line ten, mine')

t.feed('<leader>sr')
local sess = require('hunkgate.review').session
t.wait('review window', function()
  return sess and sess.view:is_open()
end)
local view = sess.view
local function footer()
  local f = vim.api.nvim_win_get_config(view.win).footer
  return type(f) == 'table' and f[1][1] or f
end

-- a: stale, so nothing is written; the window now shows the merge with the file.
t.eq(hid('a.txt:0'), t.current().id, 'first hunk')
t.feed('a')
t.wait('a.txt:0 in conflict with a clean merge', function()
  local h = hub.store:get(s.id).hunks[1]
  return h.state == 'conflict' and h.merge and h.merge.outcome == 'clean'
end)
t.wait('the window shows the merge', function()
  return vim.tbl_contains(t.buf_lines(view.buf), 'line 8, mine') and footer():find('[conflict · merged]', 1, true)
end)
t.eq('line 8, mine', vim.split(t.read(root .. '/a.txt'), '\n')[8], 'nothing written yet')
t.eq('line 10', vim.split(t.read(root .. '/a.txt'), '\n')[10], 'nothing written yet')
-- a again: the merge shown lands.
t.feed('a')
t.wait('a.txt:0 accepted', function()
  return t.hunk_state(s.id, hid('a.txt:0')) == 'accepted'
end)
t.eq('LINE 10', vim.split(t.read(root .. '/a.txt'), '\n')[10], 'merged on disk')
t.eq('line 8, mine', vim.split(t.read(root .. '/a.txt'), '\n')[8], 'the edit kept')

-- b.txt: the edits overlap; the merge has markers, `a` is refused, `m` resolves it.
t.wait_current(hid('b.txt:0'))
t.feed('a')
t.wait('b.txt:0 in conflict with a conflicted merge', function()
  local h = hub.store:get(s.id).hunks[2]
  return h.state == 'conflict' and h.merge and h.merge.outcome == 'conflicted'
end)
t.wait('the window shows the markers', function()
  return vim.tbl_contains(t.buf_lines(view.buf), '<<<<<<< yours') and footer():find('[conflict · markers]', 1, true)
end)
t.feed('a')
t.wait('told it cannot be accepted as it is', function()
  return t.note('conflict markers')
end)
t.eq('conflict', t.hunk_state(s.id, hid('b.txt:0')), 'still in conflict')
t.feed('m')
local edit
t.wait('modify buffer', function()
  edit = sess.edit_buf
  return edit and vim.api.nvim_get_current_buf() == edit
end)
local lines = t.buf_lines(edit)
t.eq(true, vim.tbl_contains(lines, '<<<<<<< yours') and vim.tbl_contains(lines, '>>>>>>> agent'), vim.inspect(lines))
local resolved = vim.tbl_filter(function(l)
  return not (l:find('^<<<<<<<') or l:find('^=======') or l:find('^>>>>>>>') or l == 'LINE 10')
end, lines)
resolved = vim.tbl_map(function(l)
  return l == 'line ten, mine' and 'line ten, both' or l
end, resolved)
vim.api.nvim_buf_set_lines(edit, 0, -1, false, resolved)
vim.cmd('write')
t.wait('b.txt:0 modified', function()
  return t.hunk_state(s.id, hid('b.txt:0')) == 'modified'
end)
t.eq('line ten, both', vim.split(t.read(root .. '/b.txt'), '\n')[10], 'what was written landed')
t.log('done')

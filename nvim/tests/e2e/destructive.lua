-- Accept-all with a destructive hunk among the pending ones (a file deletion): `A` asks first.
-- "cancel" decides nothing; "all but the destructive ones" lands the edit and leaves the
-- deletion pending, with a warning naming it; "all, destructive ones too" lands it. The Rust
-- side checks the files afterwards.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state, reconnect = { min_delay = 50, max_delay = 500 } },
})
local hub = require('hunkgate.hub')

vim.cmd('edit a.txt')
t.wait('connected and synced', hub.synced)
vim.cmd('Hunkgate run edit a and delete gone')
t.wait('ready notification', function()
  return t.note('^Suggestion ready:')
end, 30000)
local s = t.only_suggestion()
local by_file = {}
for _, h in ipairs(s.hunks) do
  by_file[h.file] = h
end
t.eq(true, by_file['gone.txt'].destructive, 'the deletion is destructive')
t.eq(false, by_file['a.txt'].destructive, 'the edit is not')

t.feed('<leader>sr')
local sess = require('hunkgate.review').session
t.wait('review window', function()
  return sess and sess.view:is_open()
end)

-- Answer each question as the user would, recording what was asked.
local asked, answer = {}, nil
vim.ui.select = function(items, opts, on_choice)
  asked[#asked + 1] = { prompt = opts.prompt, items = items }
  on_choice(answer)
end

answer = 'cancel'
t.feed('A')
t.eq(1, #asked, 'A asked')
t.eq(
  'Accept all? 1 hunk is destructive (gone.txt: deletes, renames, mode or many lines)',
  asked[1].prompt,
  'the question names the destructive hunk'
)
t.eq({ 'all but the destructive ones', 'all, destructive ones too', 'cancel' }, asked[1].items, 'choices')
t.eq('pending', t.hunk_state(s.id, by_file['a.txt'].id), 'cancel decided nothing')

answer = 'all but the destructive ones'
t.feed('A')
t.wait('the edit accepted', function()
  return t.hunk_state(s.id, by_file['a.txt'].id) == 'accepted'
end)
t.wait('warned about what was left', function()
  return t.note('^hunkgate: left pending, destructive: deletes gone%.txt')
end)
t.eq('pending', t.hunk_state(s.id, by_file['gone.txt'].id), 'the deletion waits')
-- The review bar marks the destructive hunk, not the other one.
local function bar_at(file)
  sess.hunk_id = by_file[file].id
  require('hunkgate.review').render()
  return vim.wo[sess.view.win].winbar
end
t.eq(true, bar_at('gone.txt'):find('DESTRUCTIVE', 1, true) ~= nil, 'bar of gone.txt: ' .. bar_at('gone.txt'))
t.eq(nil, bar_at('a.txt'):find('DESTRUCTIVE', 1, true), 'bar of a.txt')
t.mark('partial')
t.wait_mark('checked')

answer = 'all, destructive ones too'
t.feed('A')
t.wait('the deletion accepted', function()
  return t.hunk_state(s.id, by_file['gone.txt'].id) == 'accepted'
end)
t.eq(3, #asked, 'asked each time')
vim.cmd('qa!')

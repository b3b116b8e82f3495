-- The review actions against a fake hunk source (hunkgate.source's interface), in the real
-- floating view: what is sent, where the review goes next, and what the window shows.
local review = require('hunkgate.review')
local config = require('hunkgate.config')
-- Wide enough for the whole footer.
vim.o.columns = 240
config.set(assert(config.resolve({ server = { auto_connect = false } })))

local root = vim.fn.tempname()
vim.fn.mkdir(root, 'p')
for _, f in ipairs({ 'a.txt', 'b.txt' }) do
  vim.fn.writefile({ 'one', 'two', 'three' }, root .. '/' .. f)
end

local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2)))
local fake_source = dofile(here .. '/fake_source.lua')
local suggestion = fake_source.suggestion

local function fake(s)
  return fake_source.new(s, root)
end

local notes = {}
local real_notify = vim.notify
vim.notify = function(msg)
  notes[#notes + 1] = msg
end

-- The prompts (the reject comment, the complete/discard confirmation) answer from `answers`
-- (false: cancelled), else with Enter on an empty comment and "yes"; `asked` keeps their text.
local asked, answers = {}, {}
local real_input, real_select = vim.ui.input, vim.ui.select
vim.ui.input = function(opts, cb)
  asked[#asked + 1] = opts.prompt
  local a = table.remove(answers, 1)
  cb(a == nil and '' or a or nil)
end
vim.ui.select = function(items, opts, cb)
  asked[#asked + 1] = opts.prompt
  local a = table.remove(answers, 1)
  cb(a == nil and 'yes' or a or nil)
end

--- A fresh review of `s` on a fake source, opened.
local function start(s)
  notes, asked, answers = {}, {}, {}
  local f = fake(s)
  review.set_source(f)
  -- From a window on no file of the suggestion (the window beneath follows the hunks).
  vim.cmd('enew')
  review.open()
  return f
end

local function current()
  local _, i, h = review.current()
  return i, h and h.state
end

local function chunks_text(v)
  if type(v) == 'string' then
    return v
  end
  return table.concat(vim.tbl_map(function(c)
    return c[1]
  end, v or {}))
end

local function footer()
  return chunks_text(vim.api.nvim_win_get_config(review.session.view.win).footer)
end

local function view_lines()
  return vim.api.nvim_buf_get_lines(review.session.view.buf, 0, -1, false)
end

local function virt_text(buf)
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, -1, 0, -1, { details = true })) do
    for _, l in ipairs(m[4].virt_lines or {}) do
      out[#out + 1] = chunks_text(l)
    end
  end
  return table.concat(out, '\n')
end

local function press(keys)
  vim.api.nvim_feedkeys(vim.keycode(keys), 'mx', false)
end

test('open shows the first pending hunk with its keys in the footer', function()
  local s = suggestion(3)
  s.hunks[1].state = 'rejected'
  start(s)
  eq({ 2, 'pending' }, { current() })
  eq({ 'old 1', 'new 1' }, view_lines())
  eq(' 2/3 a.txt [pending]  ? help  a accept  r reject  m modify  n next  p prev ', footer())
  eq(' rename things ', chunks_text(vim.api.nvim_win_get_config(review.session.view.win).title))
end)

test('accept (the key) sends accept and moves to the next pending hunk, skipping decided ones', function()
  local s = suggestion(4)
  s.hunks[3].state = 'accepted'
  local f = start(s)
  press('a')
  eq({ { hunk = 's1:a.txt:0', action = 'accept' } }, f.sent)
  eq('accepted', f.store:get(s.id).hunks[1].state)
  eq({ 2, 'pending' }, { current() })
  press('a')
  eq({ 4, 'pending' }, { current() }, 'hunk 3 was decided already')
end)

test('reject sends reject and moves on; n and p wrap around', function()
  local f = start(suggestion(3))
  press('r')
  eq({ { hunk = 's1:a.txt:0', action = 'reject' } }, f.sent)
  eq({ 2, 'pending' }, { current() })
  press('p')
  eq({ 1, 'rejected' }, { current() })
  press('p')
  eq({ 3, 'pending' }, { current() })
  press('n')
  eq({ 1, 'rejected' }, { current() })
end)

test('a decided hunk cannot be decided again: a warning, nothing sent', function()
  local f = start(suggestion(2))
  press('a')
  press('p')
  press('r')
  eq(1, #f.sent)
  truthy(notes[#notes]:find('cannot reject: the hunk is already accepted (u undoes it)', 1, true), notes[#notes])
end)

test('modify: edit the new side, :w sends modify with the edited diff and closes the editor', function()
  local f = start(suggestion(2))
  press('m')
  local edit = vim.api.nvim_get_current_buf()
  truthy(vim.api.nvim_buf_get_name(edit):find('hunkgate://modify/s1:a.txt:0', 1, true), 'the modify buffer is open')
  eq({ 'new 0' }, vim.api.nvim_buf_get_lines(edit, 0, -1, false))
  vim.api.nvim_buf_set_lines(edit, 0, -1, false, { 'mine 0' })
  vim.cmd('write')
  eq(1, #f.sent)
  eq('modify', f.sent[1].action)
  eq('@@ -1,1 +1,1 @@\n-old 0\n+mine 0\n', f.sent[1].modifiedDiff)
  truthy(not vim.api.nvim_buf_is_valid(edit), 'the editor closed')
  eq('modified', f.store:get('s1-0123456789').hunks[1].state)
  eq({ 2, 'pending' }, { current() })
end)

test('modify: writing the agent version unchanged accepts; a refused version comes back', function()
  local f = start(suggestion(2))
  press('m')
  vim.cmd('write')
  eq({ { hunk = 's1:a.txt:0', action = 'accept' } }, f.sent)
  f.conflicts['s1:a.txt:1'] = 'context changed'
  press('m')
  local edit = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(edit, 0, -1, false, { 'mine 1' })
  vim.cmd('write')
  eq('modify', f.sent[2].action)
  truthy(vim.api.nvim_buf_is_valid(edit) and vim.bo[edit].modified, 'refused: the editor stays, modified')
  vim.cmd('bwipeout!')
  review.session.view:focus()
  press('m')
  eq({ 'mine 1' }, vim.api.nvim_buf_get_lines(0, 0, -1, false), 'the draft comes back')
  vim.cmd('bwipeout!')
end)

test('undo: the current decided hunk, else the last decision of this review; stays there', function()
  local f = start(suggestion(3))
  press('a')
  eq({ 2, 'pending' }, { current() })
  press('u')
  eq({ hunk = 's1:a.txt:0', action = 'undo' }, f.sent[2])
  eq({ 1, 'pending' }, { current() }, 'the undone hunk is shown, pending again')
  press('u')
  eq(2, #f.sent, 'nothing left to undo')
  truthy(notes[#notes]:find('nothing to undo', 1, true), notes[#notes])
end)

test('accept rest: every open hunk in one call, then the review is done', function()
  local s = suggestion(2, { 'a.txt', 'b.txt' })
  s.hunks[2].state = 'rejected'
  local f = start(s)
  press('A')
  eq({ { all = 'accept' } }, f.sent, 'one call when no buffer is modified')
  local states = vim.tbl_map(function(h)
    return h.state
  end, f.store:get(s.id).hunks)
  eq({ 'accepted', 'rejected', 'accepted', 'accepted' }, states)
  truthy(footer():find('all reviewed', 1, true), footer())
  press('u')
  eq('undo', f.sent[2].action, 'accept-all decisions are in the undo history')
end)

test('accept rest skips files with unsaved buffers, per file, and says so', function()
  local f = start(suggestion(1, { 'a.txt', 'b.txt' }))
  local b = vim.fn.bufadd(root .. '/b.txt')
  vim.fn.bufload(b)
  vim.api.nvim_buf_set_lines(b, 0, 1, false, { 'edited' })
  press('A')
  eq({ { all = 'accept', file = 'a.txt' } }, f.sent)
  truthy(notes[#notes]:find('not accepting hunks in b.txt: unsaved changes', 1, true), notes[#notes])
  press('n')
  eq({ 2, 'pending' }, { current() })
  press('a')
  eq(1, #f.sent, 'accepting into the unsaved buffer is refused too')
  truthy(notes[#notes]:find('b.txt has unsaved changes', 1, true), notes[#notes])
  vim.api.nvim_buf_delete(b, { force = true })
end)

test('a conflict is shown in the window and the review stays on the hunk', function()
  local f = start(suggestion(2))
  f.conflicts['s1:a.txt:0'] = 'line 1 is "ONE" now, not "old 0"'
  press('a')
  eq({ 1, 'conflict' }, { current() })
  truthy(footer():find('[conflict]', 1, true), footer())
  eq('conflict: line 1 is "ONE" now, not "old 0"', virt_text(review.session.view.buf))
  -- A conflict can still be decided: reject it.
  f.conflicts['s1:a.txt:0'] = nil
  press('r')
  eq({ 2, 'pending' }, { current() })
  eq('', virt_text(review.session.view.buf), 'the conflict message is gone with the conflict')
  eq({}, vim.tbl_filter(function(n)
    return n:find('does not apply', 1, true) ~= nil
  end, notes), "the hub's suggestion.error tells of it (notifications.on_error)")
end)

test('a stale hunk shows its clean three-way merge; a accepts exactly that merge', function()
  local s = suggestion(1)
  s.hunks[1].state = 'conflict'
  s.hunks[1].conflict = 'stale; merged three ways with your file, cleanly'
  s.hunks[1].merge = { outcome = 'clean', diff = '@@ -1,2 +1,2 @@\n mine\n-old 0\n+new 0\n', merged_against = 'abc123' }
  local f = start(s)
  eq({ 'mine', 'old 0', 'new 0' }, view_lines(), 'the merge against the file, not the agent hunk')
  truthy(footer():find('[conflict · merged]', 1, true), footer())
  press('a')
  eq({ { hunk = 's1:a.txt:0', action = 'accept', mergedAgainst = 'abc123' } }, f.sent)
  eq('accepted', f.store:get(s.id).hunks[1].state)
end)

test('a conflicted merge opens in modify with its markers; what is written goes over the file', function()
  local s = suggestion(1)
  s.hunks[1].state = 'conflict'
  s.hunks[1].merge = {
    outcome = 'conflicted',
    diff = '@@ -1 +1,5 @@\n-mine 0\n+<<<<<<< yours\n+mine 0\n+=======\n+new 0\n+>>>>>>> agent\n',
    merged_against = 'def456',
  }
  local f = start(s)
  truthy(footer():find('[conflict · markers]', 1, true), footer())
  press('m')
  local edit = vim.api.nvim_get_current_buf()
  eq({ '<<<<<<< yours', 'mine 0', '=======', 'new 0', '>>>>>>> agent' }, vim.api.nvim_buf_get_lines(edit, 0, -1, false))
  vim.api.nvim_buf_set_lines(edit, 0, -1, false, { 'mine and new 0' })
  vim.cmd('write')
  eq('modify', f.sent[1].action)
  eq('@@ -1,1 +1,1 @@\n-mine 0\n+mine and new 0\n', f.sent[1].modifiedDiff)
  -- Positive control for the view: once decided, the hunk shows the agent's diff again.
  eq('modified', f.store:get(s.id).hunks[1].state)
end)

test('with notifications.on_error off, the review itself says why the hunk did not apply', function()
  config.set(assert(config.resolve({ server = { auto_connect = false }, notifications = { on_error = false } })))
  local f = start(suggestion(1))
  f.conflicts['s1:a.txt:0'] = 'context changed'
  press('a')
  config.set(assert(config.resolve({ server = { auto_connect = false } })))
  eq('hunkgate: a.txt: the hunk does not apply to the file as it is now: context changed', notes[#notes])
end)

test('a hunk that changed under you: the window follows, and the stale key is refused', function()
  local f = start(suggestion(2))
  f:change('s1:a.txt:0', { state = 'accepted' }) -- decided by another client
  truthy(footer():find('[accepted]', 1, true), footer())
  press('a')
  eq({}, f.sent, 'nothing sent for a hunk decided elsewhere')
  truthy(notes[#notes]:find('already accepted', 1, true), notes[#notes])
  -- Its text changed too (the hub re-read it): the window shows the new text.
  f:change('s1:a.txt:1', { diff = '@@ -2,1 +2,1 @@\n-old 1\n+newer 1\n' })
  press('n')
  eq({ 'old 1', 'newer 1' }, view_lines())
end)

test('the suggestion closed elsewhere: the review ends and the window closes', function()
  local f = start(suggestion(2))
  local view = review.session.view
  f:emit(f.store:apply({ type = 'suggestion.completed', suggestion_id = 's1-0123456789' }))
  eq(nil, review.session)
  truthy(not view:is_open(), 'the window closed')
end)

test('the last hunk decided: the footer turns to complete; complete finishes', function()
  local f = start(suggestion(2))
  press('a')
  press('r')
  eq({ 2, 'rejected' }, { current() }, 'nothing left open: stays on the last decision')
  eq(' 2/2 a.txt [rejected · all reviewed]  ? help  p prev  <CR> complete  <Esc> close  u undo ', footer())
  local view = review.session.view
  press('<CR>')
  eq({ finish = 'finalize' }, f.sent[3])
  eq(nil, review.session, 'the review ended')
  truthy(not view:is_open())
  eq('hunkgate: completed "rename things": 1 of 2 hunks applied', notes[#notes])
end)

test('discard, and keys typed while a decision is on its way run after its answer', function()
  local f = start(suggestion(3))
  f.hold = true
  press('a')
  press('a')
  press('n')
  eq(1, #f.sent, 'the second accept waits for the first answer')
  eq({ 1, 'pending' }, { current() })
  f:flush()
  eq({ 's1:a.txt:0', 's1:a.txt:1' }, vim.tbl_map(function(c)
    return c.hunk
  end, f.sent), 'then runs on the hunk the review moved to')
  eq({ 1, 'accepted' }, { current() }, 'and n after it: from hunk 3, wrapping to 1')
  answers = { 'no' }
  press('d')
  eq(2, #f.sent, 'answering no keeps the suggestion')
  eq({ 'Discard the review? 1 hunk still pending will count as rejected' }, asked)
  press('d')
  eq({ finish = 'discard' }, f.sent[3])
  eq(nil, review.session)
  eq('hunkgate: discarded "rename things": 2 of 3 hunks applied', notes[#notes])
end)

test('close keeps the session: reopening resumes at the same hunk', function()
  start(suggestion(3))
  press('n')
  press('<Esc>')
  truthy(not review.session.view:is_open(), 'closed')
  review.open()
  eq({ 2, 'pending' }, { current() })
  review.close()
end)

test('r asks for a comment: it is sent; Enter rejects without one; Esc keeps the hunk', function()
  local f = start(suggestion(3))
  answers = { 'keep the old name' }
  press('r')
  eq({ { hunk = 's1:a.txt:0', action = 'reject', comment = 'keep the old name' } }, f.sent)
  eq(1, #asked, 'asked once')
  truthy(asked[1]:find('Esc: keep the hunk', 1, true), asked[1])
  answers = { false }
  press('r')
  eq(1, #f.sent, 'cancelled: nothing sent')
  eq({ 2, 'pending' }, { current() })
  truthy(notes[#notes]:find('a.txt not rejected', 1, true), notes[#notes])
  answers = { '   ' }
  press('r')
  eq({ hunk = 's1:a.txt:1', action = 'reject' }, f.sent[2], 'a blank comment is no comment')
end)

test('a Visual reject of some lines asks for a comment too; Esc keeps the hunk', function()
  local f = start(suggestion(3))
  answers = { false }
  press('2GVr')
  eq({}, f.sent, 'cancelled: nothing sent')
  truthy(asked[1]:find('for these lines', 1, true), asked[1])
  answers = { 'not the new one' }
  press('2GVr')
  eq({ { hunk = 's1:a.txt:0', action = 'reject', lines = { 2, 2 }, comment = 'not the new one' } }, f.sent)
end)

test(':Hunkgate reject <text> keeps its text and does not ask; the prompt can be turned off', function()
  local f = start(suggestion(3))
  require('hunkgate.commands').dispatch({ args = 'reject keep the old name', range = 0 })
  eq({ { hunk = 's1:a.txt:0', action = 'reject', comment = 'keep the old name' } }, f.sent)
  eq({}, asked)
  config.set(assert(config.resolve({ server = { auto_connect = false }, review = { reject_comment = false } })))
  press('r')
  eq({ hunk = 's1:a.txt:1', action = 'reject' }, f.sent[2])
  eq({}, asked, 'not asked')
  config.set(assert(config.resolve({ server = { auto_connect = false } })))
end)

test('complete with pending hunks asks first, saying how many; off with review.confirm', function()
  local f = start(suggestion(3))
  press('a')
  answers = { false }
  press('<CR>')
  eq({ 'Complete the review? 2 hunks still pending will count as rejected' }, asked)
  eq(1, #f.sent, 'cancelled: not completed')
  truthy(review.session, 'the review goes on')
  config.set(assert(config.resolve({ server = { auto_connect = false }, review = { confirm = false } })))
  press('<CR>')
  eq({ finish = 'finalize' }, f.sent[2])
  eq(1, #asked, 'not asked again')
  config.set(assert(config.resolve({ server = { auto_connect = false } })))
end)

--- The float's number column on `row` as drawn ('statuscolumn' evaluated for that line).
local function column(row)
  local win = review.session.view.win
  return vim.api.nvim_eval_statusline(vim.wo[win].statuscolumn, { winid = win, use_statuscol_lnum = row }).str
end

test('the review opens at the open hunk under or after the cursor; the window beneath follows', function()
  for _, f in ipairs({ 'c.txt', 'd.txt' }) do
    vim.fn.writefile({ 'one', 'two', 'three', 'four' }, root .. '/' .. f)
  end
  local s = suggestion(3, { 'c.txt', 'd.txt' })
  s.hunks[5].state = 'accepted'
  local f = fake(s)
  notes, asked, answers = {}, {}, {}
  review.set_source(f)
  vim.cmd('edit ' .. vim.fn.fnameescape(root .. '/d.txt'))
  local main = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_cursor(main, { 2, 0 })
  review.open()
  -- d.txt:1 (line 2) is decided: the next open one after the cursor, numbered by its place in
  -- the suggestion, not by the visiting order.
  eq({ 6, 'pending' }, { current() })
  truthy(footer():find('^ 6/6 d%.txt'), footer())
  eq('@@ -3,1 +3,1 @@', vim.wo[review.session.view.win].winbar:gsub('%%#%w+#', ''), 'the header')
  eq({ 'old 2', 'new 2' }, view_lines())
  -- Old and new line numbers, then the sign: the removed line is line 3 of the old file only.
  truthy(column(1):find('^3   %-'), column(1))
  truthy(column(2):find('^  3 %+'), column(2))
  eq({ 3, 0 }, vim.api.nvim_win_get_cursor(main), 'the window beneath is at the hunk')
  -- After a decision: the rest of this file first (wrapping to its line 1), then other files.
  press('a')
  eq({ 4, 'pending' }, { current() }, vim.inspect(notes))
  eq({ 1, 0 }, vim.api.nvim_win_get_cursor(main), 'and follows')
  press('a')
  eq({ 1, 'pending' }, { current() })
  eq(root .. '/c.txt', vim.fs.normalize(vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(main))), 'to c.txt')
  -- From a buffer with no hunk, the review resumes where it was.
  review.close()
  vim.cmd('enew')
  review.open()
  eq({ 1, 'pending' }, { current() })
  -- From c.txt at line 3: hunk 3.
  review.close()
  vim.cmd('edit ' .. vim.fn.fnameescape(root .. '/c.txt'))
  vim.api.nvim_win_set_cursor(0, { 3, 0 })
  review.open()
  eq({ 3, 'pending' }, { current() })
  -- o: to the hunk in its file; the float closes and the session stays.
  press('o')
  truthy(not review.session.view:is_open(), 'the float closed')
  eq(root .. '/c.txt', vim.fs.normalize(vim.api.nvim_buf_get_name(0)))
  eq({ 3, 0 }, vim.api.nvim_win_get_cursor(0))
  review.open()
  eq({ 3, 'pending' }, { current() }, 'reopening there resumes at that hunk')
  review.close()
end)

test('one numbering: the modify window names the hunk by its place in the suggestion', function()
  start(suggestion(2, { 'a.txt', 'b.txt' }))
  press('nn')
  eq({ 3, 'pending' }, { current() })
  truthy(footer():find('^ 3/4 b%.txt'), footer())
  press('m')
  local title = chunks_text(vim.api.nvim_win_get_config(0).title)
  eq(' modify b.txt (hunk 3/4) ', title, 'not b.txt\'s own index (1)')
  vim.cmd('bwipeout!')
  review.close()
end)

test('a hunk is found where it is now: moved down by the hunks accepted above it', function()
  local grow = { id = 'x:f:0', file = 'f', state = 'accepted', diff = '@@ -1,1 +1,3 @@\n-a\n+A\n+B\n+C\n' }
  local h = {
    id = 'x:f:1',
    file = 'f',
    state = 'pending',
    diff = '@@ -5,2 +7,2 @@\n-e\n+E\n f\n',
    header = { old_start = 5, old_lines = 2, new_start = 7, new_lines = 2 },
  }
  local other = vim.tbl_extend('force', grow, { id = 'x:g:0', file = 'g' })
  eq({ 7, 8 }, { review.hunk_lines(h, { hunks = { grow, h, other } }) })
  grow.state = 'pending'
  eq({ 5, 6 }, { review.hunk_lines(h, { hunks = { grow, h, other } }) }, 'not applied: no shift')
  h.state = 'accepted'
  eq({ 7, 8 }, { review.hunk_lines(h) }, 'applied: its new side')
end)

test('? lists every review key with what it does', function()
  start(suggestion(2))
  press('?')
  local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  local text = table.concat(lines, '\n')
  for _, m in ipairs(require('hunkgate.actions').review_maps(config.get().keymaps)) do
    truthy(text:find(m[1] .. '%s+' .. vim.pesc(m[5])), m[1] .. ' missing from:\n' .. text)
  end
  truthy(text:find('<leader>sr', 1, true), text)
  eq(13, #require('hunkgate.actions').review_maps(config.get().keymaps), 'every keyed action')
  press('q')
  review.close()
end)

review.close()
review.session = nil
vim.notify = real_notify
vim.ui.input, vim.ui.select = real_input, real_select
vim.fn.delete(root, 'rf')

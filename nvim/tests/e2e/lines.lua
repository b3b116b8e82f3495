-- Line-range decisions from Visual selections: lines 3-7 of a 12-line hunk accepted in the
-- floating review, one line of the rest rejected there, and what is left accepted from a
-- selection of the file's own lines in the inline review; then an undo. The Rust side
-- (tests/tests/nvim.rs) checks the file on disk and the feedback log afterwards.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')
local root = vim.uv.fs_realpath(vim.fn.getcwd())

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state, reconnect = { min_delay = 50, max_delay = 500 } },
})
local hub = require('hunkgate.hub')
local config = require('hunkgate.config')

vim.cmd('edit a.txt')
local abuf = t.buf_for('a.txt')
t.wait('connected and synced', hub.synced)
vim.cmd('Hunkgate run three lines')
t.wait('ready notification', function()
  return t.note('^Suggestion ready:')
end, 30000)
local s = t.only_suggestion()
local h = s.hunks[1].id
t.eq(2, #s.hunks, 'two hunks')

local function file()
  return t.read(root .. '/a.txt')
end
local function numbered(edits)
  local out = {}
  for i = 1, 40 do
    local e = edits[i]
    if e ~= '' then
      out[#out + 1] = (e or ('line ' .. i)) .. '\n'
    end
  end
  return table.concat(out)
end

-- The float shows the hunk's 12 lines, one per row: rows 3-7 are `line 4`, `-line 5`,
-- `-line 6`, `-line 7`, `+five`.
t.feed('<leader>sr')
local sess = require('hunkgate.review').session
t.wait('review window', function()
  return sess and sess.view:is_open()
end)
t.eq(h, t.current().id, 'first hunk')
t.eq(12, #t.buf_lines(sess.view.buf), 'one row per diff line')
t.feed('3GV7Ga')
t.wait('lines 3-7 accepted', function()
  return t.hunk_state(s.id, h) == 'accepted'
end)
t.eq(numbered({ [5] = 'five', [6] = '', [7] = '' }), file(), 'what landed')
t.wait('a.txt buffer reloaded', function()
  return t.buf_lines(abuf)[5] == 'five'
end)
-- The rest is the next hunk, right after the decided one, and the review is on it.
local rest = h .. '~a3-7'
t.wait_current(rest)
s = t.only_suggestion()
t.eq({ h, rest }, { s.hunks[1].id, s.hunks[2].id }, 'the rest follows its hunk')
t.eq(3, #s.hunks, 'one hunk more')
t.eq({ 3, 7 }, s.hunks[1].lines, 'the decided range')

-- The rest's row 5 is `+six`: rejected from a one-line selection, it is dropped; nothing is
-- written, and what is left is the next hunk again.
t.eq('six', t.buf_lines(sess.view.buf)[5], 'row 5 of the rest')
-- The reject asks for a comment, as a whole hunk's does.
t.feed('5GVrnot six<CR>')
t.wait('+six rejected', function()
  return t.hunk_state(s.id, rest) == 'rejected'
end)
t.eq(numbered({ [5] = 'five', [6] = '', [7] = '' }), file(), 'a reject writes nothing')
local rest2 = rest .. '~r5-5'
t.wait_current(rest2)

-- The inline review: the selection is of the file's own lines. Lines 5-6 are `five` (context
-- now) and `line 8`, with `+seven` shown between them as a virtual line: that is the range.
config.get().ui.style = 'inline'
vim.cmd('Hunkgate review')
sess = require('hunkgate.review').session
t.eq('inline', sess.style, 'inline view')
if t.current().id ~= rest2 then
  sess.hunk_id = rest2
  require('hunkgate.review').render()
end
t.wait_current(rest2)
t.eq(abuf, vim.api.nvim_get_current_buf(), 'in a.txt')
-- A selection outside the hunk decides nothing.
t.feed('20GV21G<leader>sa')
t.wait('told the selection is not the hunk', function()
  return t.note('selection holds no line of the hunk')
end)
t.eq('pending', t.hunk_state(s.id, rest2), 'still pending')
t.feed('5GV6G<leader>sa')
t.wait('+seven accepted', function()
  return t.hunk_state(s.id, rest2) == 'accepted'
end)
t.eq(numbered({ [5] = 'five', [6] = '', [7] = 'seven' }), file(), 'what landed from the inline view')
t.eq('pending', t.hunk_state(s.id, t.only_suggestion().hunks[4].id), 'the hunk further down stays pending')
t.log('done')

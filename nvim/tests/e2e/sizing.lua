-- Hunks sized for a reviewer: a 200-line file rewritten but for every tenth line arrives as
-- several parts, each marked REWRITE in the review bar; a block of 100 lines with nothing to
-- cut at is one hunk marked OVERSIZED. `A` accepts every part and the block; the Rust side
-- checks the files are the agent's.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state, reconnect = { min_delay = 50, max_delay = 500 } },
})
local hub = require('hunkgate.hub')

vim.cmd('edit big.txt')
t.wait('connected and synced', hub.synced)
vim.cmd('Hunkgate run rewrite big and grow block')
t.wait('ready notification', function()
  return t.note('^Suggestion ready:')
end, 30000)
local s = t.only_suggestion()
local parts, block = {}, nil
for _, h in ipairs(s.hunks) do
  if h.file == 'big.txt' then
    parts[#parts + 1] = h
  else
    block = h
  end
end
t.eq(true, #parts >= 3, 'the rewrite arrives in parts: ' .. #parts)
for _, h in ipairs(parts) do
  t.eq({ true, false }, { h.rewrite, h.oversized }, 'part ' .. h.id)
end
t.eq({ false, true }, { block.rewrite, block.oversized }, 'the block')

t.feed('<leader>sr')
local sess = require('hunkgate.review').session
t.wait('review window', function()
  return sess and sess.view:is_open()
end)
local function bar_of(h)
  sess.hunk_id = h.id
  require('hunkgate.review').render()
  return vim.wo[sess.view.win].winbar
end
local bar = bar_of(block)
t.eq(true, bar:find('OVERSIZED', 1, true) ~= nil, 'bar of the block: ' .. bar)
t.eq(nil, bar:find('REWRITE', 1, true), 'bar of the block: ' .. bar)
bar = bar_of(parts[2])
t.eq(true, bar:find('REWRITE', 1, true) ~= nil, 'bar of a part: ' .. bar)
t.eq(nil, bar:find('OVERSIZED', 1, true), 'bar of a part: ' .. bar)

t.feed('A')
t.wait('every hunk accepted', function()
  for _, h in ipairs(s.hunks) do
    if t.hunk_state(s.id, h.id) ~= 'accepted' then
      return false
    end
  end
  return true
end)
vim.cmd('qa!')

-- Checks per hunk in Neovim (|hunkgate-checks|): the hub runs ruff on the run and its base;
-- the new warning and the fixed one arrive with `suggestion.checked` and show as
-- `vim.diagnostic` entries in the file's buffer, at their place in the file, and in the review
-- window on the diff line each falls on; a rejected hunk's go from the file.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')
local root = vim.uv.fs_realpath(vim.fn.getcwd())
local sev = vim.diagnostic.severity

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state },
  review = { reject_comment = false },
})
local hub = require('hunkgate.hub')
local checks = require('hunkgate.checks')
t.wait('connected and synced', hub.synced)
vim.cmd.edit(root .. '/app.py')
local file_buf = vim.api.nvim_get_current_buf()

vim.cmd('Hunkgate run compare with None')
t.wait('ready notification', function()
  return t.note('^Suggestion ready:')
end, 30000)
local s = t.only_suggestion()
t.wait('the checks', function()
  return hub.store:get(s.id).checks ~= nil
end, 60000)
t.eq('done', hub.store:get(s.id).checks.state, 'checks state')

local function shown(buf, ns)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(buf, { namespace = ns })) do
    out[#out + 1] = { d.lnum + 1, d.severity, d.message, d.source, d.code }
  end
  table.sort(out, function(a, b)
    return a[1] < b[1]
  end)
  return out
end

local fixed = { 1, sev.HINT, 'fixed: `os` imported but unused', 'hunkgate ruff', 'F401' }
t.wait('diagnostics in the file', function()
  return #shown(file_buf, checks.ns) == 2
end)
t.eq({
  fixed,
  -- The run's line 22 is the file's line 23 while the hunk is pending.
  { 23, sev.WARN, 'Comparison to `None` should be `cond is None`', 'hunkgate ruff', 'E711' },
}, shown(file_buf, checks.ns), 'diagnostics in the file')

t.feed('<leader>sr')
local sess = require('hunkgate.review').session
t.wait('review window', function()
  return sess and sess.view:is_open()
end)
t.wait_current(s.id .. ':app.py:0')
-- The fixed warning is on the removed `import os`, the first row of the diff.
t.eq({ fixed }, shown(sess.view.buf, checks.review_ns), 'the first hunk in the review')
t.feed('n')
t.wait_current(s.id .. ':app.py:1')
local rows = shown(sess.view.buf, checks.review_ns)
t.eq(1, #rows, 'one diagnostic on the second hunk')
t.eq('    return y == None', t.buf_lines(sess.view.buf)[rows[1][1]], 'on the added line')
t.eq('E711', rows[1][5], 'its code')

-- Rejecting the first hunk: its fixed warning is not coming, and leaves the file.
t.feed('p')
t.wait_current(s.id .. ':app.py:0')
t.feed('r')
t.wait('the rejected hunk', function()
  return t.hunk_state(s.id, s.id .. ':app.py:0') == 'rejected'
end)
t.wait('only the new warning left in the file', function()
  local left = shown(file_buf, checks.ns)
  return #left == 1 and left[1][5] == 'E711'
end)
t.log('done')

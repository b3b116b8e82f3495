-- One Neovim, two repositories (#55). The Rust side started repository A's hub as a user would
-- (default state dir and port) and B's with --state-dir on a free port; each made one
-- suggestion. No server options: both hubs are found by their discovery records.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')
local a = vim.uv.fs_realpath(vim.fn.getcwd())
local b = assert(vim.env.HUNKGATE_TEST_REPO_B, 'HUNKGATE_TEST_REPO_B is not set')

t.load_plugin()
require('hunkgate').setup({ server = { reconnect = { min_delay = 50, max_delay = 200 }, auto_start = false } })
local hub = require('hunkgate.hub')
local review = require('hunkgate.review')

--- :checkhealth hunkgate's report, its buffer closed again.
local function health()
  vim.cmd('checkhealth hunkgate')
  local report = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  vim.cmd('bwipeout')
  t.log('checkhealth:\n' .. report)
  return report
end

local function has(report, want, what)
  if not report:find(want, 1, true) then
    error(('%s: checkhealth lacks %q:\n%s'):format(what, want, report))
  end
end

vim.cmd('edit a.txt')
t.wait('synced with the hub of A', hub.synced)
t.eq(a, hub.current_root, 'A is current')
local sa = t.only_suggestion()
t.eq('change a', sa.description, "A's suggestion")
t.eq('record', hub.client.endpoint.how, 'found by its record')

vim.cmd.edit(vim.fn.fnameescape(b .. '/b.txt'))
t.eq(b, hub.current_root, 'B is current')
t.wait('synced with the hub of B', hub.synced)
local sb = t.only_suggestion()
t.eq('change b', sb.description, "B's suggestion, not A's")
t.eq(b, hub.client.endpoint.repo)
t.eq(true, hub.synced(hub.conns[a]), 'still connected to the hub of A')
t.wait('statusline of B', function()
  return require('hunkgate').statusline() == 'hunkgate: 1 pending'
end)

-- Review B's suggestion in B, accept its hunk.
vim.cmd('Hunkgate review')
t.wait('review of B', function()
  return review.session and review.session.sid == sb.id
end)
vim.cmd('Hunkgate accept')
t.wait("B's hunk accepted", function()
  return t.hunk_state(sb.id, sb.hunks[1].id) == 'accepted' and not review.session.busy
end)
review.close()

local hb = health()
has(hb, 'serves ' .. b, 'in B')
has(hb, 'found by discovery record', 'in B')
has(hb, 'the hub accepts the token', 'in B')
if hb:find('ERROR', 1, true) then
  error('checkhealth in B reports an error:\n' .. hb)
end

-- Back in A: A's suggestion, A's hub.
vim.cmd('buffer a.txt')
t.eq(a, hub.current_root, 'A is current again')
t.eq(sa.id, t.only_suggestion().id)
vim.cmd('Hunkgate review')
t.wait('review of A', function()
  return review.session and review.session.sid == sa.id
end)
vim.cmd('Hunkgate reject wrong repository')
t.wait("A's hunk rejected", function()
  return t.hunk_state(sa.id, sa.hunks[1].id) == 'rejected' and not review.session.busy
end)
review.close()
local ha = health()
has(ha, 'serves ' .. a, 'in A')
has(ha, 'also connected for ' .. b, 'in A')

-- A hub of the other repository named explicitly is refused, naming both.
local b_url = hub.conns[b].client.endpoint.url
vim.env.HUNKGATE_HUB_URL = b_url
local wrong = health()
has(wrong, ('the hub at %s serves %s, not %s'):format(b_url, b, a), 'B named for A')
has(wrong, 'ERROR', 'B named for A')
vim.env.HUNKGATE_HUB_URL = nil

-- A repository with no listed buffer left: its connection is closed.
vim.cmd.bwipeout(vim.fn.fnameescape(b .. '/b.txt'))
t.wait('the connection to B closed', function()
  return hub.conns[b] == nil
end)
t.eq(true, hub.synced(), 'A stays')
t.mark('decided', sa.id .. ' ' .. sb.id)

-- The hub of A is killed with SIGKILL: its record stays behind, stale.
t.wait_mark('killed')
t.wait('noticed the hub of A went away', function()
  return hub.state == 'disconnected'
end)
local stale = health()
has(stale, 'ignored stale record', 'after SIGKILL')
has(stale, 'is not running', 'after SIGKILL')
has(stale, 'no hub is running for ' .. a, 'after SIGKILL')
-- With auto_start off, a run says so rather than starting a hub.
vim.cmd('Hunkgate run anything')
t.wait('run refused', function()
  return t.note('^hunkgate: run failed: no hub is running for ' .. vim.pesc(a))
end)
t.log('done')

-- From a Neovim with no hub running, `:Hunkgate run` starts the hub (server.cmd, detached) and
-- the run (#55). The Rust side stops the hub at the end.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')
local root = vim.uv.fs_realpath(vim.fn.getcwd())

t.load_plugin()
require('hunkgate').setup({ server = { cmd = { assert(vim.env.HUNKGATE_TEST_BIN) } } })
local hub = require('hunkgate.hub')
local discovery = require('hunkgate.discovery')

vim.cmd('edit x.txt')
local none, err = discovery.resolve_sync(require('hunkgate.config').get(), root)
t.eq(nil, none, 'no hub runs at first')
t.eq(discovery.none_text(root), err)

vim.cmd('Hunkgate run make it X')
t.wait('starting', function()
  return t.note('^hunkgate: starting the hub for ' .. vim.pesc(root))
end)
t.wait('the run started', function()
  return t.note('^hunkgate: run %S+ started')
end, 60000)
t.wait('the suggestion', function()
  return t.note('^Suggestion ready: make it X %(1 hunk in 1 file%)')
end, 60000)
local ep = hub.client.endpoint
t.eq('record', ep.how, 'the started hub found by its record')
t.eq(root, ep.repo)
-- Detached: a session of its own, not Neovim's.
local function session(pid)
  local stat = assert(io.open(('/proc/%d/stat'):format(pid))):read('*a')
  return vim.split(stat:match('.*%)%s+(.*)$'), '%s+')[4]
end
if session(ep.pid) == session(vim.fn.getpid()) then
  error('the hub shares Neovim\'s session: not detached')
end
-- :Hunkgate serve with the hub running starts no second one.
vim.cmd('Hunkgate serve')
t.wait(':Hunkgate serve finds the running hub', function()
  return t.note(('^hunkgate: a hub already runs for %s at %s %%(pid %d%%)$'):format(vim.pesc(root), vim.pesc(ep.url), ep.pid))
end)
t.mark('started', tostring(ep.pid))
t.log('done')

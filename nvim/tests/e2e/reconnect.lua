-- Reconnect and resync. The Rust side restarts the hub (new port, new epoch) and changes
-- things while the plugin cannot see it; the plugin must catch up by list/get. Then the plugin
-- drops its connection to the same hub, misses a decision, and must catch up by replay.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')
local root = vim.uv.fs_realpath(vim.fn.getcwd())

t.load_plugin()
-- No state_dir: the plugin finds the hub's default state dir for this repository.
require('hunkgate').setup({ server = { reconnect = { min_delay = 50, max_delay = 200 } } })
local hub = require('hunkgate.hub')

vim.cmd('edit y.txt')
vim.cmd('edit x.txt')
local xbuf = t.buf_for('x.txt')

-- The suggestion made before Neovim started arrives with the first sync, and is announced.
t.wait('first sync', hub.synced)
local s1 = t.only_suggestion()
t.wait('ready notification for an existing suggestion', function()
  return t.note('^Suggestion ready: first change %(1 hunk in 1 file%)$')
end)
local url1 = hub.client.endpoint.url
t.mark('synced-1', s1.id)

t.wait('noticed the hub went away', function()
  return hub.state == 'disconnected'
end)
t.wait('statusline says offline', function()
  return require('hunkgate').statusline():find('offline', 1, true)
end)
t.mark('offline-1')

-- Count full resyncs from here on.
local snapshots = 0
local client = hub.client
local on_snapshot = client.opts.on_snapshot
client.opts.on_snapshot = function(list)
  snapshots = snapshots + 1
  on_snapshot(list)
end

local s2_id = t.wait_mark('restarted')
t.wait('reconnected to the restarted hub and resynced', function()
  return hub.synced() and hub.store:get(s2_id) ~= nil
end)
t.eq(1, snapshots, 'one full resync')
t.log('reconnected from', url1, 'to', hub.client.endpoint.url)
t.eq('accepted', hub.store:get(s1.id).hunks[1].state, 'decision made while away')
t.wait('x.txt buffer reloaded for the decision made while away', function()
  return t.buf_lines(xbuf)[1] == 'X'
end)
t.wait('ready notification for the suggestion made while away', function()
  return t.note('^Suggestion ready: second change')
end)

-- Same hub, dropped connection: the plugin is kept away until the Rust side has decided.
local resolve = client.opts.resolve_async
client.opts.resolve_async = function(cb)
  cb(nil, 'held back by the test')
end
client.conn.close(1000, 'test')
t.wait('disconnected again', function()
  return hub.state == 'disconnected'
end)
t.mark('offline-2')
t.wait_mark('rejected')
client.opts.resolve_async = resolve
t.wait('caught up by replay', function()
  return hub.synced() and hub.store:get(s2_id).hunks[1].state == 'rejected'
end)
t.eq(1, snapshots, 'no full resync on the same hub')
t.eq('y\n', t.read(root .. '/y.txt'), 'y.txt untouched')
t.log('done')

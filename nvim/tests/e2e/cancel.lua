-- :Hunkgate cancel stops the run that is working, against the real hub: the test side starts a
-- run whose agent sleeps, says so with the "working" marker, and checks afterwards that the
-- run ended cancelled and its processes are gone. Cancelling again finds nothing to stop.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state, reconnect = { min_delay = 50, max_delay = 200 } },
})
local hub = require('hunkgate.hub')

t.wait('first sync', hub.synced)
t.mark('synced')
t.wait_mark('working')
vim.cmd('Hunkgate cancel')
t.wait('the cancel answered', function()
  return t.note('^hunkgate: run %x+ cancelled$')
end)
t.mark('cancelled')
t.wait_mark('checked')
vim.cmd('Hunkgate cancel')
t.wait('nothing left to cancel', function()
  return t.note('^hunkgate: no run is queued or running$')
end)
t.log('ok: nothing left to cancel')
vim.cmd('qa!')

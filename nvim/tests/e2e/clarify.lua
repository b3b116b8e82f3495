-- The hub's built-in agent asks questions (clarify_user, against tests/src/fake_llm.rs). The
-- first is asked live: announced, prompted for (vim.ui.input, stubbed since this runs
-- headless) and answered "tabs". The second is asked while the plugin is away, found again by
-- the resync's run list, left open by a cancelled prompt, and skipped with :Hunkgate skip.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state, reconnect = { min_delay = 50, max_delay = 200 } },
})
local hub = require('hunkgate.hub')

-- What the user types into each prompt, in order; nil cancels.
local prompts, typed = {}, { 'tabs', nil }
vim.ui.input = function(opts, on_confirm)
  prompts[#prompts + 1] = opts.prompt
  t.log('prompt:', opts.prompt)
  on_confirm(typed[#prompts])
end

local function waiting()
  return hub.store:pending_questions()
end

t.wait('first sync', hub.synced)
t.mark('synced')

-- 1. Asked live, answered in the prompt.
t.wait('the first question prompted for', function()
  return #prompts == 1
end)
t.eq('Tabs or spaces? ', prompts[1], 'the prompt is the question')
t.wait('the question announced', function()
  return t.note('^hunkgate: the agent asks %(run [^)]+%): Tabs or spaces%?\nAnswer with :Hunkgate answer')
end)
t.wait('the answer sent', function()
  return t.note('^hunkgate: answer sent$')
end)
t.wait('no question waiting', function()
  return #waiting() == 0
end)

-- 2. Away while the agent asks again. The plugin is made to think the hub restarted, so it
-- resyncs from scratch instead of replaying what it missed: the question must come back from
-- the run list (GET /runs), not from the events.
local client = hub.client
local resolve = client.opts.resolve_async
client.opts.resolve_async = function(cb)
  cb(nil, 'held back by the test')
end
client.conn.close(1000, 'test')
t.wait('disconnected', function()
  return hub.state == 'disconnected'
end)
client.epoch = 'as if the hub had restarted'
t.mark('offline')
t.wait_mark('asked-2')
client.opts.resolve_async = resolve

t.wait('the second question found by the resync and prompted for', function()
  return #prompts == 2
end)
t.eq('Which license? ', prompts[2])
t.wait('told how to answer later', function()
  return t.note('^hunkgate: the question stays open: :Hunkgate answer {text}, or :Hunkgate skip')
end)
t.eq(1, #waiting(), 'a cancelled prompt skips nothing')
t.eq('Which license?', waiting()[1].question)
t.wait('the statusline says a question waits', function()
  return require('hunkgate').statusline():find('question waiting', 1, true)
end)

vim.cmd('Hunkgate skip')
t.wait('the question skipped', function()
  return #waiting() == 0 and t.note('^hunkgate: question skipped')
end)
t.log('done')

-- An ACP agent's permission question (tests/acp_agent.py `permission`, under --acp-ask
-- execute): the plugin announces it and prompts with the question itself — the tool call and
-- the options to answer with — and the answer typed, one option's id, is what the agent
-- receives (tests/tests/nvim.rs checks what the agent wrote).
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local t = dofile(here .. '/helpers.lua')

t.load_plugin()
require('hunkgate').setup({
  server = { state_dir = t.state, reconnect = { min_delay = 50, max_delay = 200 } },
})
local hub = require('hunkgate.hub')

local prompts = {}
vim.ui.input = function(opts, on_confirm)
  prompts[#prompts + 1] = opts.prompt
  t.log('prompt:', opts.prompt)
  on_confirm('reject-once')
end

t.wait('first sync', hub.synced)
t.mark('synced')

t.wait('the permission question prompted for', function()
  return #prompts == 1
end)
for _, part in ipairs({
  'Permission for execute (call-9): make clean',
  'Input: {"command":"make clean"}',
  'Answer with one of: allow-once (Allow), reject-once (Reject)',
}) do
  t.eq(true, prompts[1]:find(part, 1, true) ~= nil, 'the prompt has ' .. part .. ': ' .. prompts[1])
end
t.wait('the question announced', function()
  return t.note('^hunkgate: the agent asks %(run [^)]+%): Permission for execute %(call%-9%): make clean')
end)
t.wait('the answer sent', function()
  return t.note('^hunkgate: answer sent$')
end)
t.wait('no question waiting', function()
  return #hub.store:pending_questions() == 0
end)
t.log('done')

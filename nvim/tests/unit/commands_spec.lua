-- :Hunkgate and <Plug>(hunkgate-run) hand the right selection to run(), without a hub.
local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2)))
local root = vim.fs.dirname(vim.fs.dirname(here))
vim.cmd.source(vim.fn.fnameescape(root .. '/plugin/hunkgate.lua'))

local hub = require('hunkgate.hub')
local sent = {}
local real_request = hub.request
-- The hub's answer to a command; tests replace it.
local function default_reply(cmd)
  if cmd.type == 'clarify' then
    local answer = cmd.skip and 'no_user_answer' or cmd.answer
    return { success = true, data = { run_id = cmd.runId, question_id = cmd.questionId, answer = answer } }
  end
  return { success = true, data = { run_id = 'run-1234567890' } }
end
local reply = default_reply
hub.request = function(cmd, cb)
  sent[#sent + 1] = cmd
  cb(reply(cmd))
end
local real_notify = vim.notify
vim.notify = function() end

local buf = vim.api.nvim_create_buf(true, false)
vim.api.nvim_set_current_buf(buf)
vim.api.nvim_buf_set_lines(buf, 0, -1, false, { 'alpha beta', 'gamma delta', 'epsilon' })

test(':Hunkgate run without a range sends the prompt alone', function()
  sent = {}
  vim.cmd('Hunkgate run just this')
  eq({ { type = 'run', prompt = 'just this' } }, sent)
end)

test('a linewise range attaches whole lines', function()
  sent = {}
  vim.cmd('2,3Hunkgate run explain')
  truthy(sent[1].prompt:find('^explain\n\nSelected code from .* %(lines 2%-3%):\n```\ngamma delta\nepsilon\n```$'), sent[1].prompt)
end)

test('a charwise visual selection keeps its columns', function()
  sent = {}
  vim.api.nvim_win_set_cursor(0, { 1, 6 })
  vim.api.nvim_feedkeys(vim.keycode('vjl<Esc>'), 'nx', false)
  vim.cmd("'<,'>Hunkgate run tighten")
  truthy(sent[1].prompt:find('%[No Name%] %(lines 1%-2%):\n```\nbeta\ngamma de\n```$'), sent[1].prompt)
end)

test('<Plug>(hunkgate-run) in Visual mode asks for the prompt and attaches the selection', function()
  sent = {}
  local real_input = vim.ui.input
  vim.ui.input = function(_, on_confirm)
    on_confirm('from the mapping')
  end
  vim.keymap.set('x', '<F2>', '<Plug>(hunkgate-run)')
  vim.api.nvim_win_set_cursor(0, { 3, 0 })
  vim.api.nvim_feedkeys(vim.keycode('V<F2>'), 'mx', false)
  vim.ui.input = real_input
  eq(1, #sent)
  truthy(sent[1].prompt:find('^from the mapping\n\nSelected code from .* %(line 3%):\n```\nepsilon\n```$'), sent[1].prompt)
end)

test('unknown subcommands are reported; completion lists them all', function()
  local msgs = {}
  vim.notify = function(m)
    msgs[#msgs + 1] = m
  end
  vim.cmd('Hunkgate bogus')
  truthy(msgs[1]:find('unknown subcommand "bogus"'), msgs[1])
  eq({ 'reject', 'reject_all', 'review', 'run' }, vim.fn.getcompletion('Hunkgate r', 'cmdline'))
end)

-- The built-in agent's questions: :Hunkgate answer / skip and the prompt.
local msgs = {}
vim.notify = function(m)
  msgs[#msgs + 1] = m
end
local real_input = vim.ui.input
local inputs = {} ---@type string[] prompts shown
local typed ---@type string? what the user "types" into the next prompt (nil: cancels)
vim.ui.input = function(opts, on_confirm)
  inputs[#inputs + 1] = opts.prompt
  on_confirm(typed)
end

local function ask(run, qid, question)
  hub.store:apply({ type = 'clarification.requested', run_id = run, question_id = qid, question = question })
end

local function reset()
  sent, msgs, inputs, typed, reply = {}, {}, {}, nil, default_reply
  hub.store = require('hunkgate.store').new()
end

local function question_ids()
  return vim.tbl_map(function(q)
    return q.question_id
  end, hub.store:pending_questions())
end

test(':Hunkgate answer {text} answers the waiting question', function()
  reset()
  ask('run-1', 'q_1', 'Tabs or spaces?')
  vim.cmd('Hunkgate answer  tabs, always ')
  eq({ { type = 'clarify', runId = 'run-1', questionId = 'q_1', answer = 'tabs, always' } }, sent)
  eq({}, inputs, 'no prompt when the answer is given')
  eq({}, question_ids(), 'answered')
  eq('hunkgate: answer sent', msgs[#msgs])
end)

test(':Hunkgate answer without text prompts with the question', function()
  reset()
  ask('run-1', 'q_1', 'Tabs or spaces?')
  typed = 'spaces'
  vim.cmd('Hunkgate answer')
  eq({ 'Tabs or spaces? ' }, inputs)
  eq({ { type = 'clarify', runId = 'run-1', questionId = 'q_1', answer = 'spaces' } }, sent)
end)

test('a cancelled or empty prompt leaves the question waiting and says how to answer', function()
  for _, input in ipairs({ vim.NIL, '', '   ' }) do
    reset()
    ask('run-1', 'q_1', 'Tabs or spaces?')
    typed = input ~= vim.NIL and input or nil
    vim.cmd('Hunkgate answer')
    eq(1, #inputs)
    eq({}, sent, 'nothing sent for ' .. vim.inspect(typed))
    eq({ 'q_1' }, question_ids(), 'still waiting')
    truthy(msgs[#msgs]:find(':Hunkgate answer {text}, or :Hunkgate skip', 1, true), msgs[#msgs])
  end
end)

test(':Hunkgate skip skips the oldest waiting question', function()
  reset()
  ask('run-1', 'q_1', 'First?')
  ask('run-2', 'q_2', 'Second?')
  vim.cmd('Hunkgate skip')
  eq({ { type = 'clarify', runId = 'run-1', questionId = 'q_1', skip = true } }, sent)
  eq({ 'q_2' }, question_ids())
  truthy(msgs[#msgs]:find('skipped'), msgs[#msgs])
end)

test('answer and skip with no question waiting send nothing', function()
  reset()
  vim.cmd('Hunkgate answer tabs')
  vim.cmd('Hunkgate skip')
  eq({}, sent)
  eq({}, inputs)
  eq('hunkgate: no question is waiting for an answer', msgs[1])
end)

test('a failed answer keeps the question; one the hub no longer has is dropped', function()
  reset()
  ask('run-1', 'q_1', 'Tabs?')
  reply = function()
    return { success = false, error = 'connection lost', code = 'disconnected' }
  end
  vim.cmd('Hunkgate answer tabs')
  eq({ 'q_1' }, question_ids())
  truthy(msgs[#msgs]:find('not sent %(connection lost%); the question stays open'), msgs[#msgs])
  reply = function()
    return { success = false, error = 'run run-1 is not waiting for an answer', code = 'no_question' }
  end
  vim.cmd('Hunkgate answer tabs')
  eq({}, question_ids())
  truthy(msgs[#msgs]:find('no longer waiting'), msgs[#msgs])
end)

test('a new question is announced, and prompted for with clarify.prompt', function()
  local config = require('hunkgate.config')
  local clarify = require('hunkgate.clarify')
  for _, prompt in ipairs({ true, false }) do
    reset()
    config.set(assert(config.resolve({ clarify = { prompt = prompt } })))
    ask('run-1234567890', 'q_1', 'Tabs or spaces?')
    typed = 'tabs'
    clarify.announce(hub.store:pending_questions()[1])
    eq('hunkgate: the agent asks (run run-1234): Tabs or spaces?', vim.split(msgs[1], '\n')[1])
    -- The prompt comes from vim.schedule: once a callback scheduled after it ran, it did too.
    local flushed = false
    vim.schedule(function()
      flushed = true
    end)
    vim.wait(1000, function()
      return flushed
    end)
    if prompt then
      eq({ 'Tabs or spaces? ' }, inputs)
      eq('tabs', sent[1] and sent[1].answer)
    else
      eq({}, inputs, 'no prompt with clarify.prompt = false')
      eq({ 'q_1' }, question_ids())
    end
  end
  config.set(assert(config.resolve({})))
end)

test('one automatic prompt at a time; :Hunkgate answer always prompts', function()
  local clarify = require('hunkgate.clarify')
  reset()
  local open = {} ---@type fun(input: string?)[] prompts not answered yet
  vim.ui.input = function(opts, on_confirm)
    inputs[#inputs + 1] = opts.prompt
    open[#open + 1] = on_confirm
  end
  ask('run-1', 'q_1', 'First?')
  ask('run-2', 'q_2', 'Second?')
  local q1, q2 = unpack(hub.store:pending_questions())
  clarify.ask(q1, { auto = true })
  clarify.ask(q2, { auto = true })
  eq({ 'First? ' }, inputs, 'the second question is only announced while the first prompt is open')
  vim.cmd('Hunkgate answer')
  eq({ 'First? ', 'First? ' }, inputs, 'asked for, a prompt opens regardless')
  open[1]('one')
  eq({ { type = 'clarify', runId = 'run-1', questionId = 'q_1', answer = 'one' } }, sent)
  open[2]('late')
  eq(1, #sent, 'nothing sent for a question answered meanwhile')
  truthy(msgs[#msgs]:find('answered meanwhile'), msgs[#msgs])
  vim.ui.input = function(opts, on_confirm)
    inputs[#inputs + 1] = opts.prompt
    on_confirm(typed)
  end
end)

test('completion knows answer and skip', function()
  eq({ 'answer' }, vim.fn.getcompletion('Hunkgate an', 'cmdline'))
  eq({ 'skip' }, vim.fn.getcompletion('Hunkgate sk', 'cmdline'))
end)

vim.ui.input = real_input
hub.request = real_request
vim.notify = real_notify

--- The built-in agent's questions (`clarify_user`): what to tell the user and the command that
--- answers one (pure), then announcing, asking and sending (I/O). A question stays pending
--- until it is answered or skipped; nothing here skips on the user's behalf.
local notify = require('hunkgate.notify')

local M = {}

--- How to answer later; said whenever a question is left open.
M.HOW = ':Hunkgate answer {text}, or :Hunkgate skip to let the agent go on without an answer'

--- The `clarify` command answering `q` with `answer`, or skipping it when `answer` is nil.
---@param q hunkgate.Question
---@param answer? string
---@return table
function M.command(q, answer)
  local cmd = { type = 'clarify', runId = q.run_id, questionId = q.question_id }
  if answer then
    cmd.answer = answer
  else
    cmd.skip = true
  end
  return cmd
end

---@param q hunkgate.Question
---@return string
function M.asked_text(q)
  return ('hunkgate: the agent asks (run %s): %s\nAnswer with %s'):format(q.run_id:sub(1, 8), q.question, M.HOW)
end

--- The `vim.ui.input` prompt: the question itself.
---@param q hunkgate.Question
---@return string
function M.prompt_text(q)
  return require('hunkgate.visible').text(q.question, true) .. ' '
end

--- The user's input as an answer: nil when there is none (cancelled or blank).
---@param input string?
---@return string?
function M.answer_of(input)
  if input == nil or vim.trim(input) == '' then
    return nil
  end
  return input
end

-- I/O from here on.

local function hub()
  return require('hunkgate.hub')
end

--- Answer `q` (or skip it when `answer` is nil) and report the outcome. A question the hub no
--- longer has (answered elsewhere, its run ended) is dropped; any other failure keeps it.
---@param q hunkgate.Question
---@param answer? string
function M.send(q, answer)
  local h = hub()
  h.request(M.command(q, answer), function(resp)
    if resp.success then
      h.store:drop_question(q.run_id, resp.data and resp.data.question_id or q.question_id)
      local done = answer and 'answer sent' or 'question skipped: the agent goes on without an answer'
      notify.send('hunkgate: ' .. done)
    elseif resp.code == 'no_question' or resp.code == 'stale_question' or resp.code == 'not_found' then
      h.store:drop_question(q.run_id, q.question_id)
      notify.send('hunkgate: that question is no longer waiting: ' .. (resp.error or ''), vim.log.levels.WARN)
    else
      notify.send(
        ('hunkgate: the answer was not sent (%s); the question stays open: %s'):format(resp.error or '?', M.HOW),
        vim.log.levels.ERROR
      )
      return
    end
    h.settle({ kind = 'answered', run_id = q.run_id, question_id = q.question_id })
  end)
end

local prompting = false

--- Ask the user for the answer to `q` with `vim.ui.input`. Cancelling or answering nothing
--- leaves the question pending and says how to answer later. `auto` prompts (unasked for) come
--- one at a time: a question that arrives while one is open is only announced.
---@param q hunkgate.Question
---@param opts? {auto?: boolean}
function M.ask(q, opts)
  if not hub().store:is_pending(q) or (opts and opts.auto and prompting) then
    return
  end
  prompting = true
  vim.ui.input({ prompt = M.prompt_text(q) }, function(input)
    prompting = false
    local answer = M.answer_of(input)
    if not hub().store:is_pending(q) then
      return notify.send('hunkgate: that question was answered meanwhile', vim.log.levels.WARN)
    end
    if not answer then
      return notify.send('hunkgate: the question stays open: ' .. M.HOW)
    end
    M.send(q, answer)
  end)
end

--- Tell the user about a new question, and prompt for the answer when `clarify.prompt` is set.
---@param q hunkgate.Question?
function M.announce(q)
  if not q then
    return
  end
  notify.send(M.asked_text(q), vim.log.levels.WARN)
  if require('hunkgate.config').get().clarify.prompt then
    -- Not from inside the event handler: the prompt may block until the user answers.
    vim.schedule(function()
      M.ask(q, { auto = true })
    end)
  end
end

return M

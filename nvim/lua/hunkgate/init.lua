--- hunkgate: review an AI agent's changes hunk by hunk, from Neovim.
---
--- `setup()` is the only function with side effects on load-time state (options, highlight
--- links, the open-review mapping, the connection); everything else acts when called.
local M = {}

local function hub()
  return require('hunkgate.hub')
end

local function review()
  return require('hunkgate.review')
end

local mapped_open ---@type string?

--- Configure the plugin and connect to the hub of the current repository.
---@param opts? table see `:help hunkgate-config`
function M.setup(opts)
  local config = require('hunkgate.config')
  local cfg, errs = config.resolve(opts)
  if not cfg then
    vim.notify('hunkgate: invalid options:\n' .. table.concat(errs, '\n'), vim.log.levels.ERROR)
    return
  end
  config.set(cfg)

  local hl = require('hunkgate.highlights')
  hl.define()
  local group = vim.api.nvim_create_augroup('hunkgate', { clear = true })
  -- :colorscheme clears highlights, links included.
  vim.api.nvim_create_autocmd('ColorScheme', { group = group, callback = hl.define })

  if mapped_open then
    pcall(vim.keymap.del, 'n', mapped_open)
    mapped_open = nil
  end
  if cfg.keymaps.open_review then
    vim.keymap.set('n', cfg.keymaps.open_review, M.review, { desc = 'hunkgate: open review' })
    mapped_open = cfg.keymaps.open_review
  end

  if cfg.server.auto_connect then
    hub().connect()
  end
end

--- Connect (or reconnect) to the hub; reports the outcome once.
function M.connect()
  hub().connect({ report = true })
end

function M.disconnect()
  hub().disconnect()
end

--- Open the review window on a suggestion (id or prefix; default: the newest with hunks left).
---@param id? string
function M.review(id)
  review().open(id)
end

--- Pick a suggestion to review.
function M.list()
  local list = hub().store:list()
  if #list == 0 then
    return require('hunkgate.notify').send('hunkgate: no open suggestions')
  end
  vim.ui.select(list, {
    prompt = 'hunkgate suggestions',
    format_item = function(s)
      local visible = require('hunkgate.visible')
      return ('%s  %s (%d/%d reviewed)'):format(
        s.id:sub(1, 8),
        visible.line(s.description),
        s.reviewed_count,
        s.hunk_count
      )
    end,
  }, function(s)
    if s then
      M.review(s.id)
    end
  end)
end

--- Start an agent run.
---@param prompt string
---@param selection? hunkgate.Selection code to attach as context
function M.run(prompt, selection)
  local notify = require('hunkgate.notify')
  if not prompt or vim.trim(prompt) == '' then
    return vim.ui.input({ prompt = 'hunkgate run: ' }, function(input)
      if input and vim.trim(input) ~= '' then
        M.run(input, selection)
      end
    end)
  end
  local text = require('hunkgate.prompt').with_context(prompt, selection)
  hub().request({ type = 'run', prompt = text }, function(resp)
    if resp.success then
      local id = resp.data and resp.data.run_id or '?'
      notify.send(('hunkgate: run %s started'):format(id:sub(1, 8)))
    else
      notify.send('hunkgate: run failed: ' .. (resp.error or ''), vim.log.levels.ERROR)
    end
  end)
end

--- The question to answer: the oldest one waiting, when several runs ask.
---@return hunkgate.Question?
local function waiting_question()
  local q = hub().store:pending_questions()[1]
  if not q then
    require('hunkgate.notify').send('hunkgate: no question is waiting for an answer')
  end
  return q
end

--- Answer the agent's question (the oldest waiting); without `text`, ask for it.
---@param text? string
function M.answer(text)
  local clarify = require('hunkgate.clarify')
  local q = waiting_question()
  if not q then
    return
  end
  local answer = clarify.answer_of(text)
  if answer then
    clarify.send(q, answer)
  else
    clarify.ask(q)
  end
end

--- Skip the agent's question (the oldest waiting): it goes on without an answer.
function M.skip()
  local q = waiting_question()
  if q then
    require('hunkgate.clarify').send(q, nil)
  end
end

--- Show the connection and the pending work.
function M.status()
  local h = hub()
  local c = h.client
  local lines = {
    ('hunkgate: %s%s'):format(h.state, c and c.endpoint and (' to ' .. c.endpoint.url) or ''),
  }
  if c and c.last_error and h.state ~= 'synced' then
    lines[#lines + 1] = 'last error: ' .. c.last_error
  end
  for _, s in ipairs(h.store:list()) do
    lines[#lines + 1] =
      ('  %s  %s  %d/%d reviewed'):format(s.id:sub(1, 8), require('hunkgate.visible').line(s.description), s.reviewed_count, s.hunk_count)
  end
  local st = h.store.last_status
  if st then
    lines[#lines + 1] = ('agent: [%s] %s'):format(st.status, st.message)
  end
  local tool = h.store.last_tool
  if tool then
    lines[#lines + 1] = ('last tool call: %s %s: %s'):format(tool.ok and '✓' or '✗', tool.name, tool.summary)
  end
  for _, q in ipairs(h.store:pending_questions()) do
    lines[#lines + 1] = ('question (run %s): %s'):format(q.run_id:sub(1, 8), q.question)
  end
  require('hunkgate.notify').send(table.concat(lines, '\n'))
end

--- Statusline component: pending hunks and the agent's last status line ("" when idle).
---@return string
function M.statusline()
  return hub().statusline()
end

function M.accept_hunk()
  review().accept_hunk()
end

function M.reject_hunk()
  review().reject_hunk()
end

function M.modify_hunk()
  review().modify_hunk()
end

function M.preview_hunk()
  review().preview_hunk()
end

---@param dir 'next'|'prev'
function M.nav_hunk(dir)
  review().nav_hunk(dir)
end

function M.accept_all()
  review().accept_all()
end

function M.reject_all()
  review().reject_all()
end

function M.complete()
  review().complete()
end

function M.discard()
  review().discard()
end

function M.undo()
  review().undo()
end

function M.close()
  review().close()
end

return M

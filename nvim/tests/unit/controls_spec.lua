-- #13 item 8: the agent's text never reaches the terminal raw and never hides content. Every
-- view and notification is driven with hostile text (cursor-up + erase-line in a diff line,
-- an OSC 52 clipboard write, a CR in the middle of a line, a NUL, a C1 CSI) and checked on
-- what Neovim actually draws (the screen grid) and on every string handed to vim.notify,
-- prompts, pickers and the statusline.
local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2)))
local fake_source = dofile(here .. '/fake_source.lua')
local review = require('hunkgate.review')
local config = require('hunkgate.config')
local hub = require('hunkgate.hub')
local visible = require('hunkgate.visible')

vim.o.columns, vim.o.lines = 240, 50
config.set(assert(config.resolve({ server = { auto_connect = false }, ui = { width = 0.9, height = 0.8 } })))

local ESC, BEL = '\27', '\7'
local UP_ERASE = ESC .. '[1A' .. ESC .. '[2K'
local OSC52 = ESC .. ']52;c;ZXZpbA==' .. BEL
local CR_MID = 'shown\rhidden'
local NUL = 'nul\0byte'
local CSI = '\194\155' .. '2J'

-- What each looks like once made visible.
local SHOWN = {
  up_erase = '^[[1A^[[2K',
  osc52 = '^[]52;c;ZXZpbA==^G',
  cr = 'shown^Mhidden',
  nul = 'nul^@byte',
}

--- A control character that would reach the terminal raw: C0 but tab and newline, DEL, C1.
---@param s string
---@return string? what was found
local function raw(s)
  local c = s:match('[%z\1-\8\11-\31\127]') or s:match('\194[\128-\159]')
  return c and vim.inspect(c)
end

local function clean(s, where)
  local c = raw(s)
  truthy(not c, ('%s carries a raw %s: %s'):format(where, c, vim.inspect(s)))
end

--- The screen as Neovim drew it (what the terminal is sent), one string per row.
local function screen()
  vim.cmd('redraw!')
  local rows = {}
  for r = 1, vim.o.lines do
    local cells = {}
    for c = 1, vim.o.columns do
      cells[#cells + 1] = vim.fn.screenstring(r, c)
    end
    rows[r] = table.concat(cells)
  end
  return table.concat(rows, '\n')
end

local function on_screen(text, want)
  for name, shown in pairs(want) do
    truthy(text:find(shown, 1, true), ('%s (%s) not on screen:\n%s'):format(name, shown, text))
  end
  clean(text, 'the screen')
end

local root = vim.fn.tempname()
vim.fn.mkdir(root, 'p')
vim.fn.writefile({ 'ctx ' .. 'x', 'old' }, root .. '/a.txt')

local function hostile()
  local s = fake_source.suggestion(1)
  s.description = 'desc ' .. OSC52 .. ' ' .. CR_MID
  local h = s.hunks[1]
  h.diff = table.concat({
    '@@ -1,2 +1,5 @@',
    ' ctx x',
    '-old',
    '+print("ok")' .. UP_ERASE,
    '+' .. OSC52,
    '+' .. CR_MID,
    '+' .. NUL,
  }, '\n') .. '\n'
  h.header = { old_start = 1, old_lines = 2, new_start = 1, new_lines = 5 }
  return s
end

local notes = {}
local real_notify = vim.notify
vim.notify = function(msg)
  notes[#notes + 1] = msg
end

local function notes_clean()
  truthy(#notes > 0, 'positive control: something was notified')
  for _, n in ipairs(notes) do
    clean(n, 'a notification')
  end
end

test('visible: the four sequences, and a positive control', function()
  eq(SHOWN.up_erase, visible.line(UP_ERASE))
  eq(SHOWN.osc52, visible.line(OSC52))
  eq(SHOWN.cr, visible.line(CR_MID))
  eq(SHOWN.nul, visible.line(NUL))
  eq('<U+009B>2J', visible.line(CSI))
  truthy(raw(UP_ERASE) and raw(OSC52) and raw(CR_MID) and raw(NUL) and raw(CSI), 'the checker finds each')
  eq(nil, raw('plain\ttext\nwith ünïcode ✓'))
end)

test('the floating review window draws every control character visibly', function()
  review.set_source(fake_source.new(hostile(), root))
  review.open()
  local text = screen()
  on_screen(text, SHOWN) -- the hunk's lines, and the title (OSC 52, CR)
  truthy(text:find('desc ^[]52;c;ZXZpbA==^G shown^Mhidden', 1, true), 'the title:\n' .. text)
  -- The buffer holds the hunk exactly: what is reviewed is what is applied.
  local lines = vim.api.nvim_buf_get_lines(review.session.view.buf, 0, -1, false)
  eq({ 'ctx x', 'old', 'print("ok")' .. UP_ERASE, OSC52, CR_MID, NUL }, lines)
  review.close()
end)

test('a conflict message and a refusal are shown visibly', function()
  local s = hostile()
  local f = fake_source.new(s, root)
  review.set_source(f)
  notes = {}
  config.set(assert(config.resolve({ server = { auto_connect = false }, notifications = { on_error = false } })))
  f.conflicts[s.hunks[1].id] = 'context gone ' .. UP_ERASE .. CR_MID
  review.open()
  review.accept_hunk()
  config.set(assert(config.resolve({ server = { auto_connect = false }, ui = { width = 0.9, height = 0.8 } })))
  local text = screen()
  truthy(text:find('conflict: context gone ^[[1A^[[2Kshown^Mhidden', 1, true), text)
  clean(text, 'the screen')
  notes_clean()
  truthy(notes[#notes]:find('context gone ^[[1A^[[2Kshown^Mhidden', 1, true), notes[#notes])
  review.close()
end)

test('the modify window: its title visible, the text itself as it is', function()
  local s = hostile()
  s.hunks[1].file = 'a' .. ESC .. '[2K.txt'
  review.set_source(fake_source.new(s, root))
  review.open()
  review.modify_hunk()
  local text = screen()
  on_screen(text, SHOWN)
  truthy(text:find('modify a^[[2K.txt (hunk 1/1)', 1, true), text)
  vim.cmd('bwipeout!')
  review.close()
end)

test('the inline view: virtual lines and the quickfix list are visible', function()
  -- 80 columns: wider, this Neovim (0.12-dev) trips an assertion in grid_line_flush while
  -- drawing the quickfix window under the inline view (it does not with the float view).
  vim.o.columns = 80
  config.set(assert(config.resolve({ server = { auto_connect = false }, ui = { style = 'inline' } })))
  review.set_source(fake_source.new(hostile(), root))
  review.open()
  local text = screen()
  on_screen(text, SHOWN)
  local qf = vim.fn.getqflist({ title = 0, items = 0 })
  clean(qf.title, 'the quickfix title')
  truthy(qf.title:find('^[]52;c;ZXZpbA==^G', 1, true), qf.title)
  for _, it in ipairs(qf.items) do
    clean(it.text, 'a quickfix item')
  end
  review.close()
  vim.cmd('silent! cclose')
  vim.o.columns = 240
  config.set(assert(config.resolve({ server = { auto_connect = false }, ui = { width = 0.9, height = 0.8 } })))
end)

test('status, notifications, the picker, the question prompt: visible, one line per item', function()
  local saved_store = hub.store
  hub.store = require('hunkgate.store').new()
  local s = hostile()
  hub.store:put(s)
  hub.store:apply({ type = 'suggestion.status', status = 'running', message = 'tests ' .. UP_ERASE .. '\nFAKE LINE' })
  hub.store:apply({
    type = 'tool.call.completed',
    run_id = 'r1',
    name = 'bash' .. OSC52,
    ok = true,
    summary = CR_MID,
  })
  hub.store:ask('run-' .. NUL, 'q1', 'Tabs? ' .. OSC52 .. CR_MID)
  notes = {}
  require('hunkgate').status()
  eq(1, #notes)
  notes_clean()
  for _, want in pairs({ SHOWN.up_erase, SHOWN.osc52, SHOWN.cr }) do
    truthy(notes[1]:find(want, 1, true), want .. ' not in:\n' .. notes[1])
  end
  truthy(notes[1]:find('^JFAKE LINE', 1, true), 'a newline in agent text does not make a line:\n' .. notes[1])

  -- The ready notification and the question's announcement and prompt.
  notes = {}
  local notify = require('hunkgate.notify')
  notify.send(notify.ready_text(s))
  local clarify = require('hunkgate.clarify')
  local q = hub.store:pending_questions()[1]
  notify.send(clarify.asked_text(q))
  notes_clean()
  clean(clarify.prompt_text(q), 'the question prompt')
  truthy(clarify.prompt_text(q):find('Tabs? ' .. SHOWN.osc52 .. SHOWN.cr, 1, true), clarify.prompt_text(q))

  -- The picker's items.
  local real_select = vim.ui.select
  local items = {}
  vim.ui.select = function(list, opts)
    for _, it in ipairs(list) do
      items[#items + 1] = opts.format_item(it)
    end
  end
  require('hunkgate').list()
  vim.ui.select = real_select
  eq(1, #items)
  clean(items[1], 'the picker item')
  hub.store = saved_store
end)

test('the statusline: visible, and no statusline item or expression from agent text', function()
  local saved_store = hub.store
  hub.store = require('hunkgate.store').new()
  vim.g.hg_pwned = nil
  hub.store:apply({
    type = 'suggestion.status',
    status = 'running',
    message = "%{execute('let g:hg_pwned=1')}" .. ESC .. '[2K 5%',
  })
  local line = require('hunkgate').statusline()
  clean(line, 'the statusline text')
  -- Drawn as a statusline expression does (lualine and %{%…%} evaluate what they are given).
  local drawn = vim.api.nvim_eval_statusline(line, {}).str
  eq(nil, vim.g.hg_pwned, 'the agent text ran as a statusline expression')
  truthy(drawn:find("%{execute('let g:hg_pwned=1')}^[[2K 5%", 1, true), drawn)
  truthy(drawn:find('^[[2K 5%', 1, true), drawn)
  -- Positive control: the same text unescaped does run.
  vim.api.nvim_eval_statusline("%{execute('let g:hg_pwned=1')}", {})
  eq(1, vim.g.hg_pwned)
  vim.g.hg_pwned = nil
  hub.store = saved_store
end)

review.session = nil
vim.notify = real_notify
vim.fn.delete(root, 'rf')

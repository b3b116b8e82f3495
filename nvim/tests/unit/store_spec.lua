local store_mod = require('hunkgate.store')
local notify = require('hunkgate.notify')
local prompt = require('hunkgate.prompt')
local config = require('hunkgate.config')

local function suggestion()
  return {
    id = 'abc-123',
    description = 'Add input validation',
    files = { 'a.rs', 'b.rs', 'c.rs' },
    created_at = '2026-01-01T00:00:00Z',
    hunks = {
      { id = 'abc-123:a.rs:0', file = 'a.rs', state = 'pending', kind = 'modify', diff = '' },
      { id = 'abc-123:a.rs:1', file = 'a.rs', state = 'pending', kind = 'modify', diff = '' },
      { id = 'abc-123:b.rs:0', file = 'b.rs', state = 'pending', kind = 'modify', diff = '' },
      { id = 'abc-123:c.rs:0', file = 'c.rs', state = 'pending', kind = 'create', diff = '' },
      { id = 'abc-123:c.rs:1', file = 'c.rs', state = 'pending', kind = 'modify', diff = '' },
    },
  }
end

test('ready notification text follows the design', function()
  eq('Suggestion ready: Add input validation (5 hunks in 3 files)', notify.ready_text(suggestion()))
  eq('Suggestion ready: x (1 hunk in 1 file)', notify.ready_text({ description = 'x', hunks = { { file = 'f' } } }))
end)

test('ready, decisions, completion', function()
  local st = store_mod.new()
  local c = st:apply({ type = 'suggestion.ready', seq = 1, suggestion = suggestion() })
  eq({ kind = 'ready', suggestion_id = 'abc-123', new = true }, c)
  eq(false, st:apply({ type = 'suggestion.ready', seq = 1, suggestion = suggestion() }).new, 'replayed ready')
  eq({ suggestions = 1, hunks = 5 }, st:pending())

  local function decided(hunk, state)
    return st:apply({
      type = 'suggestion.hunk_applied',
      suggestion_id = 'abc-123',
      hunk_id = 'abc-123:' .. hunk,
      state = state,
      action = state == 'pending' and 'undone' or state,
    })
  end
  c = decided('a.rs:0', 'accepted')
  eq(true, c.file_changed)
  eq('a.rs', c.file)
  eq('partial', st:get('abc-123').status)
  c = decided('b.rs:0', 'rejected')
  eq(false, c.file_changed, 'rejecting a pending hunk writes nothing')
  c = decided('a.rs:0', 'pending')
  eq(true, c.file_changed, 'undoing an accepted hunk writes')
  eq({ suggestions = 1, hunks = 4 }, st:pending())

  st:apply({
    type = 'suggestion.error',
    code = 'apply_failed',
    suggestion_id = 'abc-123',
    hunk_id = 'abc-123:c.rs:1',
    message = 'no context',
  })
  eq('conflict', st:get('abc-123').hunks[5].state)
  eq({ suggestions = 1, hunks = 4 }, st:pending(), 'a conflict is still open')

  eq('completed', st:apply({ type = 'suggestion.completed', suggestion_id = 'abc-123', action = 'finalize' }).kind)
  eq(nil, st:get('abc-123'))
  eq('ignored', st:apply({ type = 'suggestion.completed', suggestion_id = 'abc-123' }).kind)
end)

test("an apply_failed event's three-way merge goes on the hunk; a later decision takes it off", function()
  local st = store_mod.new()
  st:put(suggestion())
  local merge = { outcome = 'clean', diff = '@@ -1 +1 @@\n-a\n+b\n', merged_against = 'abc' }
  st:apply({
    type = 'suggestion.error',
    code = 'apply_failed',
    suggestion_id = 'abc-123',
    hunk_id = 'abc-123:c.rs:1',
    message = 'stale; merged',
    merge = merge,
  })
  eq(merge, st:get('abc-123').hunks[5].merge)
  st:apply({
    type = 'suggestion.hunk_applied',
    suggestion_id = 'abc-123',
    hunk_id = 'abc-123:c.rs:1',
    action = 'rejected',
    state = 'rejected',
  })
  eq(nil, st:get('abc-123').hunks[5].merge)
  -- A feedback answer's hunk replaces it (a landed merge carries its own).
  st:update_hunk('abc-123', { id = 'abc-123:c.rs:1', state = 'accepted', merge = merge })
  eq(merge, st:get('abc-123').hunks[5].merge)
  st:update_hunk('abc-123', { id = 'abc-123:c.rs:1', state = 'pending' })
  eq(nil, st:get('abc-123').hunks[5].merge)
end)

test('status lines and unknown events', function()
  local st = store_mod.new()
  st:apply({ type = 'suggestion.status', status = 'working', message = 'Running tests...' })
  eq('Running tests...', st.last_status.message)
  eq('ignored', st:apply({ type = 'something.new' }).kind)
end)

test('replace reports suggestions not seen before; prefixes find ids', function()
  local st = store_mod.new()
  eq({ 'abc-123' }, st:replace({ suggestion() }))
  eq({}, st:replace({ suggestion() }))
  eq('abc-123', st:find('abc').id)
  local other = suggestion()
  other.id = 'abd-9'
  st:put(other)
  eq(nil, st:find('ab'), 'ambiguous prefix')
  eq({ 'abc-123', 'abd-9' }, vim.tbl_map(function(s)
    return s.id
  end, st:list()))
end)

test('update_hunk merges a feedback answer', function()
  local st = store_mod.new()
  st:put(suggestion())
  local c = st:update_hunk('abc-123', { id = 'abc-123:c.rs:0', state = 'modified', applied_diff = '@@ -0,0 +1 @@\n+x\n' })
  eq(true, c.file_changed)
  eq('modified', st:get('abc-123').hunks[4].state)
  eq('create', st:get('abc-123').hunks[4].kind, 'fields not in the answer are kept')
end)

test('a line-range decision adds its rest after the hunk, and its undo takes it back', function()
  local st = store_mod.new()
  st:put(suggestion())
  local h = 'abc-123:a.rs:0'
  local rest = { id = h .. '~a3-7', file = 'a.rs', state = 'pending', kind = 'modify', diff = '@@ …', parent_hunk_id = h }
  local ev = {
    type = 'suggestion.hunk_applied',
    suggestion_id = 'abc-123',
    hunk_id = h,
    state = 'accepted',
    action = 'accepted',
    lines = { 3, 7 },
    new_hunks = { rest },
  }
  st:apply(ev)
  local ids = function()
    return vim.tbl_map(function(x)
      return x.id
    end, st:get('abc-123').hunks)
  end
  eq({ h, rest.id, 'abc-123:a.rs:1', 'abc-123:b.rs:0', 'abc-123:c.rs:0', 'abc-123:c.rs:1' }, ids())
  eq({ 3, 7 }, st:get('abc-123').hunks[1].lines)
  eq(6, st:get('abc-123').hunk_count)
  -- The answer carries the rest too: not added twice.
  eq(false, st:reshape('abc-123', h, { rest }, nil))
  eq(6, #ids())
  local c = st:update_hunk('abc-123', { id = h, state = 'pending' })
  eq(true, c.file_changed)
  eq(nil, st:get('abc-123').hunks[1].lines, 'the undo takes the range back')
  eq(true, st:reshape('abc-123', h, nil, { rest.id }))
  eq({ h, 'abc-123:a.rs:1', 'abc-123:b.rs:0', 'abc-123:c.rs:0', 'abc-123:c.rs:1' }, ids())
  eq(5, st:get('abc-123').hunk_count)
end)

test('prompt context: selection as a fenced block', function()
  eq('fix it', prompt.with_context('fix it', nil))
  local sel = { path = 'src/a.lua', first = 3, last = 4, filetype = 'lua', lines = { 'local x = 1', 'return x' } }
  local p = prompt.with_context('fix it', sel)
  eq('fix it\n\nSelected code from src/a.lua (lines 3-4):\n```lua\nlocal x = 1\nreturn x\n```', p)
  local fenced = prompt.with_context('p', { path = 'a.md', first = 1, last = 1, filetype = '', lines = { '```code```' } })
  truthy(fenced:find('\n````\n', 1, true) or fenced:sub(-4) == '````', fenced)
  eq('src/a.lua', prompt.relative('/repo/src/a.lua', '/repo'))
  eq('/elsewhere/a', prompt.relative('/elsewhere/a', '/repo'))
end)

test('config: defaults, validation, and the hub state dir formula', function()
  local cfg = assert(config.resolve({ ui = { style = 'inline' } }))
  eq('inline', cfg.ui.style)
  eq('<leader>sr', cfg.keymaps.open_review)
  local bad, errs = config.resolve({ ui = { style = 'telescope' }, server = { prot = 1 } })
  eq(nil, bad)
  truthy(#errs >= 1)
  local _, errs2 = config.resolve({ keymaps = { accept = 1 } })
  truthy(errs2[1]:find('keymaps.accept'), errs2[1])
  eq(true, (config.resolve({ keymaps = { accept = false } })) ~= nil, 'false disables a key')

  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir .. '/my repo', 'p')
  local real = vim.uv.fs_realpath(dir .. '/my repo')
  local want = ('/state/hunkgate/my repo-%s'):format(vim.fn.sha256(real):sub(1, 12))
  eq(want, config.default_state_dir(dir .. '/my repo', { XDG_STATE_HOME = '/state' }))
  eq(
    ('/home/u/.local/state/hunkgate/my repo-%s'):format(vim.fn.sha256(real):sub(1, 12)),
    config.default_state_dir(dir .. '/my repo', { HOME = '/home/u' })
  )
  vim.fn.delete(dir, 'rf')
end)

local function asked(run, qid, question)
  return { type = 'clarification.requested', run_id = run, question_id = qid, question = question }
end

local function waiting(run, question)
  return { type = 'suggestion.status', run_id = run, status = 'waiting_for_user', message = 'Question: ' .. question }
end

test('questions: asked, replayed, answered', function()
  local st = store_mod.new()
  eq({ kind = 'question', run_id = 'run-1', question_id = 'q_1', new = true }, st:apply(asked('run-1', 'q_1', 'Tabs?')))
  st:apply(waiting('run-1', 'Tabs?'))
  eq(1, #st:pending_questions(), 'the waiting status line keeps the question')
  eq(false, st:apply(asked('run-1', 'q_1', 'Tabs?')).new, 'the same question again is not new')
  local q = st:pending_questions()[1]
  eq({ 'run-1', 'q_1', 'Tabs?' }, { q.run_id, q.question_id, q.question })
  truthy(st:is_pending(q))

  local c = st:apply({
    type = 'clarification.received',
    run_id = 'run-1',
    question_id = 'q_1',
    answer = 'tabs',
    skipped = false,
  })
  eq({ kind = 'answered', run_id = 'run-1', question_id = 'q_1' }, c)
  eq({}, st:pending_questions())
  eq(false, st:is_pending(q))
  eq(nil, st.last_status, '"Question: ..." is no news once answered')
  eq(false, st:apply(asked('run-1', 'q_1', 'Tabs?')).new, 'an answered question never comes back')

  -- The run's next question replaces nothing but itself; other runs ask independently.
  truthy(st:apply(asked('run-1', 'q_2', 'License?')).new)
  truthy(st:apply(asked('run-2', 'q_3', 'Name?')).new)
  eq({ 'q_2', 'q_3' }, vim.tbl_map(function(x)
    return x.question_id
  end, st:pending_questions()), 'oldest first')
  st:apply({ type = 'clarification.received', run_id = 'run-1', question_id = 'q_2', answer = 'no_user_answer', skipped = true })
  eq({ 'q_3' }, vim.tbl_map(function(x)
    return x.question_id
  end, st:pending_questions()))
end)

test('questions: a run that moves on without an answer drops its question', function()
  local st = store_mod.new()
  st:apply(asked('run-1', 'q_1', 'Tabs?'))
  st:apply(asked('run-2', 'q_2', 'Spaces?'))
  st:apply(waiting('run-1', 'Tabs?'))
  eq(2, #st:pending_questions())
  -- The built-in agent reports a cancelled run as an error of the run.
  st:apply({ type = 'suggestion.error', code = 'experiment_failed', run_id = 'run-1', message = 'cancelled' })
  eq({ 'run-2' }, vim.tbl_map(function(x)
    return x.run_id
  end, st:pending_questions()))
  st:apply({ type = 'suggestion.status', run_id = 'run-2', status = 'no_changes', message = 'nothing to do' })
  eq({}, st:pending_questions())
  st:apply({ type = 'suggestion.status', run_id = 'run-3', status = 'working', message = 'x' })
  eq({}, st:pending_questions(), 'status lines of other runs change nothing')
end)

test('questions: drop_question after an answer the hub confirmed', function()
  local st = store_mod.new()
  st:apply(asked('run-1', 'q_1', 'Tabs?'))
  st:drop_question('run-1', 'q_2')
  eq(1, #st:pending_questions(), 'another question id leaves it')
  st:drop_question('run-1', 'q_1')
  eq({}, st:pending_questions())
  eq(false, st:ask('run-1', 'q_1', 'Tabs?'), 'the confirmed one is not asked again')
  st:apply(asked('run-1', 'q_3', 'Again?'))
  st:drop_question('run-1')
  eq({}, st:pending_questions(), 'without an id: whatever the run waits on')
end)

test('questions: replace_questions from the run list after a resync', function()
  local st = store_mod.new()
  st:apply(asked('run-old', 'q_old', 'Gone?'))
  st:apply(asked('run-1', 'q_1', 'Tabs?'))
  st:apply({ type = 'clarification.received', run_id = 'run-9', question_id = 'q_9', answer = 'x', skipped = false })
  local since = st.known
  -- Arrives live after the list was asked for: newer than the list, so it stays.
  st:apply(asked('run-live', 'q_live', 'Live?'))
  local runs = {
    { run_id = 'run-1', status = 'waiting_for_user', question = { question_id = 'q_1', question = 'Tabs?' } },
    { run_id = 'run-2', status = 'waiting_for_user', question = { question_id = 'q_2', question = 'Missed?' } },
    { run_id = 'run-9', status = 'waiting_for_user', question = { question_id = 'q_9', question = 'Answered?' } },
    { run_id = 'run-3', status = 'working' },
    { run_id = 'run-4', status = 'waiting_for_user' },
  }
  local new = st:replace_questions(runs, since)
  eq({ 'q_2' }, vim.tbl_map(function(x)
    return x.question_id
  end, new), 'only the question missed while away is new')
  eq({ 'q_1', 'q_live', 'q_2' }, vim.tbl_map(function(x)
    return x.question_id
  end, st:pending_questions()), 'known ones keep their place; the one no run waits on is gone')
  eq({}, st:replace_questions(runs, st.known), 'the same list again brings nothing new')
  st:replace_questions({}, st.known)
  eq({}, st:pending_questions(), 'a hub whose runs wait on nothing')
end)

test('tool calls: the last one is kept', function()
  local st = store_mod.new()
  local c = st:apply({
    type = 'tool.call.completed',
    run_id = 'run-1',
    tool_call_id = 'call_1',
    name = 'read_file',
    ok = true,
    summary = 'lines 1-20 of 20',
    duration_ms = 3,
  })
  eq({ kind = 'tool', run_id = 'run-1' }, c)
  eq({ run_id = 'run-1', name = 'read_file', ok = true, summary = 'lines 1-20 of 20', duration_ms = 3 }, st.last_tool)
  eq('ignored', st:apply({ type = 'tool.call.requested', run_id = 'run-1', name = 'x', summary = 'y' }).kind)
end)

test('config: clarify.prompt', function()
  eq(true, assert(config.resolve({})).clarify.prompt)
  eq(false, assert(config.resolve({ clarify = { prompt = false } })).clarify.prompt)
  local bad, errs = config.resolve({ clarify = { prompt = 'yes' } })
  eq(nil, bad)
  truthy(errs[1]:find('clarify.prompt'), errs[1])
end)

local checks = require('hunkgate.checks')
local store_mod = require('hunkgate.store')
local sev = vim.diagnostic.severity

local function diag(change, line, hunk_id)
  return {
    severity = 'error',
    source = 'lint',
    code = 'E1',
    message = 'bad\27[2J',
    file = 'a.py',
    line = line,
    change = change,
    hunk_id = hunk_id,
  }
end

test('suggestion.checked puts each diagnostic on its hunk or on the suggestion', function()
  local st = store_mod.new()
  st:apply({
    type = 'suggestion.ready',
    seq = 1,
    suggestion = {
      id = 's',
      description = '',
      files = { 'a.py' },
      hunks = { { id = 's:a.py:0', file = 'a.py', state = 'pending', kind = 'modify', diff = '' } },
    },
  })
  local ev = {
    type = 'suggestion.checked',
    seq = 2,
    suggestion_id = 's',
    run_id = 'r',
    checks = { state = 'done', checkers = { 'lint' } },
    diagnostics = { diag('new', 3, 's:a.py:0'), diag('new', 40) },
  }
  eq({ kind = 'checked', suggestion_id = 's' }, st:apply(ev))
  local s = st:get('s')
  eq({ diag('new', 3, 's:a.py:0') }, s.hunks[1].diagnostics)
  eq({ diag('new', 40) }, s.diagnostics)
  eq('done', s.checks.state)
  eq({ kind = 'ignored' }, st:apply(vim.tbl_extend('force', ev, { suggestion_id = 'gone' })))
end)

test('an item: new at its severity, fixed as a hint, text made visible', function()
  local new = checks.item(diag('new', 3), 3)
  eq({ 2, 0, sev.ERROR, 'bad^[[2J', 'hunkgate lint', 'E1' }, { new.lnum, new.col, new.severity, new.message, new.source, new.code })
  local fixed = checks.item(vim.tbl_extend('force', diag('fixed', 5), { column = 4 }), 5)
  eq({ 4, 3, sev.HINT, 'fixed: bad^[[2J' }, { fixed.lnum, fixed.col, fixed.severity, fixed.message })
end)

test('in the review a diagnostic is on the row of its side, in the file at its hunk', function()
  -- Rows: context (old 10, new 12), removed (old 11), added (new 13).
  local numbers = { { 10, 12 }, { 11, nil }, { nil, 13 } }
  eq(3, checks.row_of(diag('new', 13), numbers))
  eq(2, checks.row_of(diag('fixed', 11), numbers))
  eq(1, checks.row_of(diag('new', 99), numbers), 'elsewhere: the first row')
  local h = { state = 'pending', header = { old_start = 10, old_lines = 2, new_start = 12, new_lines = 2 } }
  eq(11, checks.file_line(diag('new', 13), h), 'pending: within the old lines')
  eq(11, checks.file_line(diag('fixed', 11), h))
  h.state = 'accepted'
  eq(11, checks.file_line(diag('new', 13), h), 'applied: its place among the new lines')
  eq(7, checks.file_line(diag('new', 7), { state = 'pending' }), 'no header: its own line')
end)

test('a rejected hunk brings no diagnostics to the file', function()
  local s = {
    hunks = {
      { id = 'h0', state = 'rejected', diagnostics = { diag('new', 1, 'h0') } },
      { id = 'h1', state = 'pending', diagnostics = { diag('new', 2, 'h1') } },
    },
    diagnostics = { diag('fixed', 30) },
  }
  local files = checks.by_file({ s })
  eq(2, #files['a.py'])
  eq({ 1, 29 }, { files['a.py'][1].lnum, files['a.py'][2].lnum })
end)

local nav = require('hunkgate.nav')

local function hunks(states)
  local out = {}
  for i, s in ipairs(states) do
    out[i] = { id = 'h' .. i, state = s, file = i <= 2 and 'a' or 'b' }
  end
  return out
end

test('step wraps both ways', function()
  local h = hunks({ 'pending', 'accepted', 'pending' })
  eq(2, nav.step(h, 1, 1))
  eq(1, nav.step(h, 3, 1))
  eq(3, nav.step(h, 1, -1))
  eq(1, nav.step(h, nil, 1))
  eq(3, nav.step(h, nil, -1))
  eq(nil, nav.step(h, 3, 1, { wrap = false }))
  eq(nil, nav.step({}, nil, 1))
end)

test('step can skip decided hunks', function()
  local h = hunks({ 'pending', 'accepted', 'rejected', 'conflict' })
  eq(4, nav.step(h, 1, 1, { open_only = true }))
  eq(1, nav.step(h, 4, 1, { open_only = true }))
  eq(nil, nav.step(hunks({ 'accepted' }), 1, 1, { open_only = true }))
end)

test('after_decision moves to the next open hunk or reports done', function()
  eq({ 3, false }, { nav.after_decision(hunks({ 'accepted', 'rejected', 'pending' }), 1) })
  eq({ 1, false }, { nav.after_decision(hunks({ 'pending', 'rejected', 'accepted' }), 3) })
  eq({ 2, true }, { nav.after_decision(hunks({ 'accepted', 'rejected' }), 2) })
end)

test('counts and files', function()
  local c = nav.counts(hunks({ 'pending', 'accepted', 'conflict', 'modified' }))
  eq(2, c.open)
  eq(4, c.total)
  eq(1, c.accepted)
  eq({ 'a', 'b' }, nav.files(hunks({ 'pending', 'pending', 'pending' })))
end)

test('undo_target prefers the current decided hunk, then the latest decision', function()
  local h = hunks({ 'accepted', 'pending', 'rejected' })
  eq(1, nav.undo_target(h, 1, {}))
  eq(3, nav.undo_target(h, 2, { 'h1', 'h3' }))
  eq(1, nav.undo_target(hunks({ 'accepted', 'pending', 'pending' }), 2, { 'h1', 'h3' }))
  eq(nil, nav.undo_target(hunks({ 'pending' }), 1, {}))
end)

test('modifiable kinds', function()
  eq(true, nav.is_modifiable('modify'))
  eq(true, nav.is_modifiable('create'))
  eq(false, nav.is_modifiable('binary'))
  eq(false, nav.is_modifiable('rename'))
end)

test('marks name what a hunk is, in one order, and nothing for a plain hunk', function()
  eq('', nav.marks({}))
  eq('', nav.marks({ destructive = false, oversized = false, rewrite = false }))
  eq(' OVERSIZED', nav.marks({ oversized = true }))
  eq(' DESTRUCTIVE OVERSIZED REWRITE', nav.marks({ rewrite = true, oversized = true, destructive = true }))
  -- Only a real true: the wire's JSON null decodes to vim.NIL, which is truthy in Lua.
  eq('', nav.marks({ oversized = vim.NIL }))
end)

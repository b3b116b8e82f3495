local diff = require('hunkgate.diff')

local function hunk(text)
  return assert(diff.parse(text))
end

test('parse_header with and without counts', function()
  eq({ 10, 7, 10, 9 }, { diff.parse_header('@@ -10,7 +10,9 @@ fn example() {') })
  eq({ 3, 1, 3, 1 }, { diff.parse_header('@@ -3 +3 @@') })
  eq({ 0, 0, 1, 2 }, { diff.parse_header('@@ -0,0 +1,2 @@') })
  eq(nil, diff.parse_header('@@ bogus @@'))
end)

-- The design document's example, with its header counts corrected (it says -10,7 +10,9).
test('parse: the design document example', function()
  local h = hunk(table.concat({
    '@@ -10,5 +10,7 @@ function example() {',
    '   const x = 1;',
    '   const y = 2;',
    '-  return x + y;',
    '+  // Add validation',
    '+  if (x < 0 || y < 0) throw new Error("negative");',
    '+  return x + y;',
    '   // trailing context',
    ' }',
    '',
  }, '\n'))
  eq(10, h.old_start)
  eq(7, h.new_len)
  eq({ '  const x = 1;', '  const y = 2;', '  return x + y;', '  // trailing context', '}' }, diff.side_text(h, 'old'))
  eq(7, #diff.side_text(h, 'new'))
  eq(false, h.crlf)
end)

test('parse: counts must match the body', function()
  local h, err = diff.parse('@@ -1,2 +1,1 @@\n a\n')
  eq(nil, h)
  truthy(err:find('header says'))
end)

test('parse: CRLF lines lose their \\r, and the hunk says so', function()
  local h = hunk('@@ -1,2 +1,2 @@\n one\r\n-two\r\n+TWO\r\n')
  eq(true, h.crlf)
  eq({ 'one', 'two' }, diff.side_text(h, 'old'))
  eq({ 'one', 'TWO' }, diff.side_text(h, 'new'))
end)

test('parse: no newline at end of file marks the right side', function()
  local h = hunk('@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n')
  local old, new = diff.side(h, 'old'), diff.side(h, 'new')
  eq(false, old[2].eol)
  eq(true, new[2].eol)
end)

test('build_modified: unchanged ends become context, the middle is replaced', function()
  local h = hunk('@@ -4,4 +4,4 @@\n a\n-b\n+B\n c\n d\n')
  local m = diff.build_modified(h, { 'a', 'X', 'Y', 'c', 'd' })
  eq('@@ -4,4 +4,5 @@\n a\n-b\n+X\n+Y\n c\n d\n', diff.format(m))
end)

test('build_modified: editing a context line changes it too', function()
  local h = hunk('@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n')
  eq('@@ -1,3 +1,3 @@\n-a\n-b\n+A\n+B\n c\n', diff.format(diff.build_modified(h, { 'A', 'B', 'c' })))
end)

test('build_modified: the old side is kept verbatim so the hub finds it', function()
  local h = hunk('@@ -7,3 +7,2 @@\n x\n-y\n z\n')
  local m = diff.build_modified(h, { 'x', 'y2', 'extra', 'z' })
  eq({ 'x', 'y', 'z' }, diff.side_text(m, 'old'))
  eq({ 'x', 'y2', 'extra', 'z' }, diff.side_text(m, 'new'))
  eq('@@ -7,3 +7,4 @@\n x\n-y\n+y2\n+extra\n z\n', diff.format(m))
end)

test('build_modified: strips \\r from CRLF hunks and edits', function()
  local h = hunk('@@ -1,2 +1,2 @@\n one\r\n-two\r\n+TWO\r\n')
  local text = diff.format(diff.build_modified(h, { 'one', 'Two\r' }))
  eq('@@ -1,2 +1,2 @@\n one\n-two\n+Two\n', text)
  truthy(not text:find('\r'))
end)

test('build_modified: a created file (empty old side)', function()
  local h = hunk('@@ -0,0 +1,2 @@\n+hello\n+world\n')
  eq('@@ -0,0 +1,3 @@\n+hello\n+there\n+world\n', diff.format(diff.build_modified(h, { 'hello', 'there', 'world' })))
end)

test('build_modified: emptying the new side moves its start to the line before', function()
  local h = hunk('@@ -5,2 +5,3 @@\n a\n+b\n c\n')
  eq('@@ -5,2 +4,0 @@\n-a\n-c\n', diff.format(diff.build_modified(h, {})))
  local d = hunk('@@ -3,1 +2,0 @@\n-gone\n')
  eq('@@ -3,1 +3,1 @@\n-gone\n+kept\n', diff.format(diff.build_modified(d, { 'kept' })))
end)

test('build_modified: keeps a missing final newline on the new side', function()
  local h = hunk('@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n')
  eq(
    '@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n+c\n+d\n\\ No newline at end of file\n',
    diff.format(diff.build_modified(h, { 'a', 'c', 'd' }))
  )
  -- Same text but different line ends are not common lines.
  local g = hunk('@@ -1,1 +1,1 @@\n-x\n\\ No newline at end of file\n+x\n')
  eq('@@ -1,1 +1,1 @@\n-x\n\\ No newline at end of file\n+x\n', diff.format(diff.build_modified(g, { 'x' })))
end)

test('build_modified: an emptied last line without newline ends the file after the line before', function()
  local h = hunk('@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file\n')
  eq('@@ -1,2 +1,1 @@\n a\n-b\n', diff.format(diff.build_modified(h, { 'a', '' })))
  eq('@@ -1,2 +0,0 @@\n-a\n-b\n', diff.format(diff.build_modified(h, { '' })))
  -- Positive control: with a final newline an empty line is a line.
  local k = hunk('@@ -1,2 +1,2 @@\n a\n-b\n+c\n')
  eq('@@ -1,2 +1,2 @@\n a\n-b\n+\n', diff.format(diff.build_modified(k, { 'a', '' })))
end)

test('formatted hunks round-trip through parse', function()
  local h = hunk('@@ -2,3 +2,3 @@\n a\n-b\n+B\n c\n')
  local m = diff.build_modified(h, { 'a', 'bb', 'c' })
  local again = hunk(diff.format(m))
  eq(m.lines, again.lines)
  eq({ m.old_start, m.old_len, m.new_start, m.new_len }, { again.old_start, again.old_len, again.new_start, again.new_len })
end)

test('classify_edit', function()
  local h = hunk('@@ -1,2 +1,2 @@\n a\n-b\n+B\n')
  eq('accept', (diff.classify_edit(h, { 'a', 'B' })))
  eq('noop', (diff.classify_edit(h, { 'a', 'b' })))
  local what, m = diff.classify_edit(h, { 'a', 'C' })
  eq('modify', what)
  eq('@@ -1,2 +1,2 @@\n a\n-b\n+C\n', diff.format(assert(m)))
end)

test('locate: expected place, else the only occurrence, never a guess', function()
  local lines = { 'a', 'b', 'c', 'a', 'b', 'x' }
  eq(4, diff.locate(lines, { 'a', 'b' }, 4))
  eq(nil, diff.locate(lines, { 'a', 'b' }, 3), 'two candidates')
  eq(3, diff.locate(lines, { 'c' }, 1))
  eq(nil, diff.locate(lines, { 'zzz' }, 1))
  eq(7, diff.locate(lines, {}, 9), 'insertion clamps to the end')
end)

test('offset sums the applied hunks above', function()
  local applied = { { old_start = 1, old_len = 1, new_len = 3 }, { old_start = 50, old_len = 2, new_len = 0 } }
  eq(2, diff.offset(applied, 10))
  eq(0, diff.offset(applied, 1))
  eq(0, diff.offset(applied, 60))
end)

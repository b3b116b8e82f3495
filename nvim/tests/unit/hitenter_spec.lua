-- #55 item 7: a notification never raises the hit-enter prompt, whose dismissal eats the
-- user's next keys (`<leader>sr`: the space dismisses it, `s` substitutes a character of the
-- file and leaves Insert mode on). Checked on a real Neovim with a real terminal UI at 80 and
-- 120 columns: a child `nvim --listen` in a pty of that size, driven over RPC. The negative
-- control sends the same text the way the plugin used to (vim.notify, Neovim's own) and shows
-- the prompt and the eaten keys.
local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2)))
local plugin = vim.fs.dirname(vim.fs.dirname(here))

local DESCRIPTION = 'rename the configuration loader, move its defaults next to the schema and '
  .. 'update every caller in the server and the command line'

--- A child Neovim in a `cols`x24 terminal, the plugin set up (default keys, <leader> = space)
--- on a fake source with one long-described suggestion, editing a file of it.
local function child(cols)
  local addr = vim.fn.tempname()
  local job = vim.fn.jobstart({ vim.v.progpath, '-u', 'NONE', '-i', 'NONE', '-n', '--listen', addr }, {
    pty = true,
    width = cols,
    height = 24,
    env = { TERM = 'xterm-256color' },
    on_stdout = function() end,
  })
  local ch
  vim.wait(10000, function()
    local ok, c = pcall(vim.fn.sockconnect, 'pipe', addr, { rpc = true })
    ch = ok and c > 0 and c or nil
    return ch ~= nil
  end, 20)
  assert(ch, 'child nvim did not start')
  local me = vim.rpcrequest(ch, 'nvim_get_api_info')[1]
  vim.rpcrequest(
    ch,
    'nvim_exec_lua',
    [[
    local plugin, here, description = ...
    package.path = ('%s/lua/?.lua;%s/lua/?/init.lua;'):format(plugin, plugin) .. package.path
    vim.g.mapleader = ' '
    require('hunkgate').setup({ server = { auto_connect = false } })
    local fake = dofile(here .. '/fake_source.lua')
    local root = vim.fn.tempname()
    vim.fn.mkdir(root, 'p')
    vim.fn.writefile({ 'one', 'two', 'three' }, root .. '/a.txt')
    local s = fake.suggestion(2, { 'a.txt' })
    s.description = description
    _G.suggestion = s
    require('hunkgate.review').set_source(fake.new(s, root))
    vim.cmd.edit(vim.fn.fnameescape(root .. '/a.txt'))
  ]],
    { plugin, here, DESCRIPTION }
  )
  return { ch = ch, job = job, me = me, cols = cols }
end

--- Let the child handle everything sent so far and come back to waiting for keys (twice, so
--- a prompt raised on the way back is up), or stop at a blocking prompt; then its mode.
local function settle(c)
  for _ = 1, 2 do
    vim.g.hg_barrier = nil
    vim.rpcnotify(c.ch, 'nvim_exec_lua', "vim.rpcnotify(..., 'nvim_set_var', 'hg_barrier', 1)", { c.me })
    vim.wait(10000, function()
      return vim.g.hg_barrier ~= nil or vim.rpcrequest(c.ch, 'nvim_get_mode').blocking
    end, 10)
  end
  return vim.rpcrequest(c.ch, 'nvim_get_mode')
end

--- Run `code` in the child from the event loop, as a hub message's handler runs.
local function later(c, code)
  vim.rpcrequest(c.ch, 'nvim_exec_lua', 'vim.schedule(function() ' .. code .. ' end)', {})
end

--- The ready notification, sent the plugin's way (`new`) or the old way (vim.notify).
local function notify_ready(c, new)
  local send = new and "require('hunkgate.notify').send" or 'vim.notify'
  later(c, ("local n = require('hunkgate.notify'); %s(n.ready_text(_G.suggestion))"):format(send))
end

local function lua(c, code)
  return vim.rpcrequest(c.ch, 'nvim_exec_lua', code, {})
end

local function stop(c)
  vim.fn.jobstop(c.job)
  vim.fn.jobwait({ c.job }, 5000)
end

for _, cols in ipairs({ 80, 120 }) do
  test(('%d columns: the old vim.notify raises the prompt and <leader>sr edits the file (control)'):format(cols), function()
    local c = child(cols)
    truthy(#('Suggestion ready: ' .. DESCRIPTION) > cols, 'the text is longer than a line')
    notify_ready(c, false)
    local mode = settle(c)
    eq({ blocking = true, mode = 'r' }, mode, 'the hit-enter prompt is up')
    vim.rpcrequest(c.ch, 'nvim_input', ' sr')
    settle(c)
    eq({ 'i', true, false }, lua(c, [[
      local r = require('hunkgate.review')
      return { vim.api.nvim_get_mode().mode, vim.bo.modified, r.session ~= nil and r.session.view:is_open() }
    ]]), 'Insert mode in a modified file, no review')
    stop(c)
  end)

  test(('%d columns: the plugin notification fits one line; <leader>sr then opens the review'):format(cols), function()
    local c = child(cols)
    notify_ready(c, true)
    eq({ blocking = false, mode = 'n' }, settle(c), 'no prompt')
    local shown = lua(c, "return vim.api.nvim_exec2('messages', { output = true }).output")
    truthy(shown:find('^Suggestion ready: rename the configuration'), shown)
    truthy(vim.fn.strdisplaywidth(shown) < cols - 10, 'one line, clear of the ruler: ' .. shown)
    -- A message of several lines (a suggestion that left files out) and an error.
    later(c, [[
      local n = require('hunkgate.notify')
      _G.suggestion.skipped = { { path = 'big.bin', reason = 'over the 64 MiB cap' }, { path = 'fifo', reason = 'not a file' } }
      n.send(n.ready_text(_G.suggestion))
      n.send('hunkgate: suggestion.error: ' .. string.rep('the agent failed ', 20), vim.log.levels.ERROR)
    ]])
    eq({ blocking = false, mode = 'n' }, settle(c), 'no prompt for several lines or an error')
    vim.rpcrequest(c.ch, 'nvim_input', ' sr')
    settle(c)
    eq({ 'n', false, true }, lua(c, [[
      local r = require('hunkgate.review')
      vim.api.nvim_set_current_win(vim.fn.win_getid(vim.fn.bufwinnr(vim.fn.bufnr('a.txt'))))
      return { vim.api.nvim_get_mode().mode, vim.bo.modified, r.session ~= nil and r.session.view:is_open() }
    ]]), 'Normal mode, the file unmodified, the review open')
    -- What was cut is kept in full, and :Hunkgate status shows it in a window, not echoed.
    later(c, "require('hunkgate').status()")
    eq({ blocking = false, mode = 'n' }, settle(c), 'no prompt for the status')
    local status = lua(c, [[
      local buf = vim.api.nvim_get_current_buf()
      return { vim.api.nvim_win_get_config(0).relative, table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n') }
    ]])
    eq('editor', status[1], 'a float')
    truthy(status[2]:find('recent messages:', 1, true), status[2])
    truthy(status[2]:find('update every caller in the server and the command line', 1, true), status[2])
    stop(c)
  end)
end

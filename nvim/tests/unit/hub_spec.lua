-- One Neovim, several repositories: each buffer belongs to its repository's hub, the current
-- one follows the buffer (and :cd), events of the others are announced naming their repository,
-- and connections of repositories no longer open are closed. Clients are fakes driven by hand.
local hub = require('hunkgate.hub')
local config = require('hunkgate.config')

local function git_repo(path)
  vim.fn.mkdir(path .. '/.git', 'p')
  vim.fn.writefile({ 'content' }, path .. '/file.txt')
  return assert(vim.uv.fs_realpath(path))
end

--- Run `fn` with two repositories, fake clients and recorded notifications; restore after.
local function world(fn)
  local base = vim.fn.tempname()
  local w = { a = git_repo(base .. '/alpha'), b = git_repo(base .. '/beta'), clients = {}, notes = {} }
  local saved = { cwd = vim.fn.getcwd(), new_client = hub.new_client, notify = vim.notify, cfg = config.get() }
  -- Other specs widen the (UI-less) screen; splitting a window that wide trips a grid
  -- assertion of debug builds of Neovim.
  saved.columns = vim.o.columns
  vim.o.columns = 80
  config.set(assert(config.resolve({ notifications = { on_status = true } })))
  hub.new_client = function(opts)
    local c = { opts = opts, want = true, state = 'disconnected', synced = false, disconnected = 0 }
    function c.connect(self)
      self.want = true
    end
    function c.disconnect(self)
      self.want = false
      self.disconnected = self.disconnected + 1
    end
    function c.is_connected(self)
      return self.state == 'connected'
    end
    function c.request(_, cmd, cb)
      c.sent = c.sent or {}
      c.sent[#c.sent + 1] = cmd
      cb({ success = true, data = {} })
    end
    w.clients[#w.clients + 1] = c
    return c
  end
  vim.notify = function(msg, level)
    w.notes[#w.notes + 1] = { msg = msg, level = level }
  end
  --- The fake client of `root`'s connection.
  function w.client(root)
    local conn = hub.conns[root]
    return conn and conn.client
  end
  --- The hub of `root` says it is synced.
  function w.sync(root)
    local c = assert(w.client(root), 'no connection for ' .. root)
    c.state, c.synced = 'connected', true
    c.opts.on_state('synced', {})
  end
  vim.cmd.cd(vim.fn.fnameescape(w.a))
  hub.start()
  local ok, err = xpcall(fn, debug.traceback, w)
  pcall(vim.api.nvim_del_augroup_by_name, 'hunkgate_hub')
  for root in pairs(hub.conns) do
    hub.close(root)
  end
  hub.current_root = nil
  hub.paused = false
  hub.new_client, vim.notify = saved.new_client, saved.notify
  config.set(saved.cfg)
  vim.o.columns = saved.columns
  vim.cmd('silent! %bwipeout!')
  vim.cmd.cd(vim.fn.fnameescape(saved.cwd))
  vim.fn.delete(base, 'rf')
  assert(ok, err)
end

local function ready(id, description)
  return {
    type = 'suggestion.ready',
    seq = 1,
    suggestion = { id = id, description = description, files = { 'file.txt' }, hunks = { { id = id .. '-h1', file = 'file.txt', state = 'pending', diff = '' } } },
  }
end

test('hub: the current connection follows the buffer, and special buffers do not move it', function()
  world(function(w)
    eq(w.a, hub.current_root, 'the cwd repository at start')
    truthy(w.client(w.a), 'connecting to the cwd repository')
    vim.cmd.edit(vim.fn.fnameescape(w.b .. '/file.txt'))
    eq(w.b, hub.current_root)
    truthy(w.client(w.b), 'connecting to the buffer repository')
    eq(hub.conns[w.b].store, hub.store, 'the store is the current repository one')
    eq(w.client(w.b), hub.client)

    -- A scratch window (the review, :checkhealth) keeps the hub of the buffer before it.
    local scratch = vim.api.nvim_create_buf(false, true)
    local win = vim.api.nvim_open_win(scratch, true, { split = 'below' })
    eq(scratch, vim.api.nvim_get_current_buf())
    eq(w.b, hub.current_root)
    vim.api.nvim_win_close(win, true)
    -- Positive control: an unnamed file buffer belongs to the cwd repository.
    vim.cmd('new')
    eq(w.a, hub.current_root)
    vim.cmd('close')

    vim.cmd.edit(vim.fn.fnameescape(w.a .. '/file.txt'))
    eq(w.a, hub.current_root)
    eq(hub.conns[w.a].store, hub.store)
    eq(w.a, hub.root())
  end)
end)

test('hub: :cd moves the current hub when the buffer has no repository of its own', function()
  world(function(w)
    vim.cmd('enew')
    eq(w.a, hub.current_root)
    vim.cmd.cd(vim.fn.fnameescape(w.b))
    eq(w.b, hub.current_root, 'DirChanged follows the cwd')
    -- In a scratch buffer too.
    local scratch = vim.api.nvim_create_buf(false, true)
    vim.api.nvim_set_current_buf(scratch)
    eq(w.b, hub.current_root)
    vim.cmd.cd(vim.fn.fnameescape(w.a))
    eq(w.a, hub.current_root, 'DirChanged in a scratch buffer')
    -- A file buffer keeps its own repository whatever the cwd.
    vim.cmd.edit(vim.fn.fnameescape(w.b .. '/file.txt'))
    vim.cmd.cd(vim.fn.fnameescape(vim.fs.dirname(w.a)))
    eq(w.b, hub.current_root, 'the buffer file decides')
  end)
end)

test('hub: events of another repository update its store and are announced naming it', function()
  world(function(w)
    vim.cmd.edit(vim.fn.fnameescape(w.b .. '/file.txt'))
    vim.cmd.edit(vim.fn.fnameescape(w.a .. '/file.txt'))
    w.sync(w.a)
    w.sync(w.b)
    eq(w.a, hub.current_root)
    w.client(w.b).opts.on_event(ready('sb', 'beta change'))
    eq('[beta] Suggestion ready: beta change (1 hunk in 1 file)', w.notes[#w.notes].msg)
    eq(nil, hub.store:get('sb'), 'not in the current repository store')
    eq('', hub.statusline(), 'nor in its statusline')
    w.client(w.a).opts.on_event(ready('sa', 'alpha change'))
    eq('Suggestion ready: alpha change (1 hunk in 1 file)', w.notes[#w.notes].msg, 'the current one unprefixed')
    eq('hunkgate: 1 pending', hub.statusline())

    -- The suggestion of beta is decided through beta hub, whatever the current buffer.
    eq(hub.conns[w.b], hub.owner('sb'))
    local src = require('hunkgate.source').hub()
    eq('beta change', src:get('sb').description)
    local answered
    src:decide('sb', 'sb-h1', { action = 'reject' }, function(resp)
      answered = resp
    end)
    truthy(answered and answered.success)
    eq('feedback', w.client(w.b).sent[1].type)
    eq(nil, w.client(w.a).sent, 'nothing went to alpha hub')

    vim.cmd.edit(vim.fn.fnameescape(w.b .. '/file.txt'))
    eq('hunkgate: 1 pending', hub.statusline(), 'beta statusline once in beta')
    eq('beta change', hub.store:get('sb').description)
  end)
end)

test('hub: a hub of another repository refusing is said once, and a run goes to the current hub', function()
  world(function(w)
    w.client(w.a).opts.on_state('disconnected', { err = 'the hub at http://x serves /other, not ' .. w.a })
    w.client(w.a).opts.on_state('disconnected', { err = 'the hub at http://x serves /other, not ' .. w.a })
    eq(1, #w.notes, 'said once')
    truthy(w.notes[1].msg:find('serves /other'), w.notes[1].msg)
    w.sync(w.a)
    local resp
    hub.request({ type = 'run', prompt = 'p' }, function(r)
      resp = r
    end, { start = true })
    truthy(resp.success)
    eq('run', w.client(w.a).sent[1].type)
  end)
end)

test('hub: connections of repositories no longer open are closed', function()
  world(function(w)
    vim.cmd.edit(vim.fn.fnameescape(w.b .. '/file.txt'))
    local bclient = w.client(w.b)
    vim.cmd.edit(vim.fn.fnameescape(w.a .. '/file.txt'))
    hub.prune()
    truthy(hub.conns[w.b], 'beta still has a listed buffer')
    vim.cmd.bwipeout(vim.fn.fnameescape(w.b .. '/file.txt'))
    hub.prune()
    eq(nil, hub.conns[w.b], 'beta closed')
    eq(1, bclient.disconnected)
    truthy(hub.conns[w.a], 'alpha (the cwd, the current buffer) stays')
  end)
end)

--- Start the hub of a repository from Neovim (`:Hunkgate serve`, and when a command needs a hub
--- and none runs): `hunkgate serve --repo <root>`, detached by default so that it outlives
--- Neovim, then wait until discovery finds it answering for that repository.
local config = require('hunkgate.config')

local M = {}

--- Hubs started here and tied to this Neovim (server.detach = false), by repository.
---@type table<string, {handle: uv.uv_process_t, pid: integer}>
M.tied = {}
-- Starts under way, by repository: a second request joins the first.
local starting = {} ---@type table<string, fun(err: string?)[]>

--- The command line that starts the hub of `root`.
---@param cmd string|string[] server.cmd
---@param root string
---@return string[]
function M.argv(cmd, root)
  local argv = type(cmd) == 'string' and { cmd } or vim.deepcopy(cmd)
  vim.list_extend(argv, { 'serve', '--repo', root })
  return argv
end

--- Where the hub's output goes: the first thing to read when it does not start.
---@param root string
---@return string
function M.log_path(root)
  local dir = vim.fn.stdpath('log') --[[@as string]]
  vim.fn.mkdir(dir, 'p')
  return ('%s/hunkgate-serve-%s.log'):format(dir, vim.fs.basename(config.default_state_dir(root)))
end

--- The last lines of `path` (the hub's own words on why it did not start).
---@param path string
---@param n integer
---@return string
function M.tail(path, n)
  local ok, lines = pcall(vim.fn.readfile, path)
  if not ok then
    return ''
  end
  lines = vim.tbl_filter(function(l)
    return vim.trim(l) ~= ''
  end, lines)
  return table.concat(vim.list_slice(lines, math.max(1, #lines - n + 1)), '\n')
end

local function stop_tied()
  for root, h in pairs(M.tied) do
    M.tied[root] = nil
    if not h.handle:is_closing() then
      -- SIGTERM: the hub shuts down cleanly and removes its discovery record.
      h.handle:kill('sigterm')
    end
  end
end

--- Start the hub of `root` and call `cb(err)` once discovery finds it answering (`err`: why
--- not, with the tail of the hub's output).
---@param root string the repository (canonical)
---@param opts? {detach?: boolean, timeout?: integer, resolve?: fun(root: string, cb: fun(found: table?))}
---@param cb fun(err: string?, pid: integer?)
function M.start(root, opts, cb)
  opts = opts or {}
  local s = config.get().server
  local detach = opts.detach
  if detach == nil then
    detach = s.detach
  end
  local timeout = opts.timeout or s.start_timeout
  if starting[root] then
    table.insert(starting[root], cb)
    return
  end
  local waiting = { cb }
  starting[root] = waiting
  local function finish(err, pid)
    starting[root] = nil
    for _, fn in ipairs(waiting) do
      fn(err, pid)
    end
  end

  local argv = M.argv(s.cmd, root)
  local log = M.log_path(root)
  local fd = vim.uv.fs_open(log, 'w', tonumber('600', 8))
  if not fd then
    return finish(('cannot write the hub log %s'):format(log))
  end
  local exited ---@type integer?
  local handle, pid_or_err
  handle, pid_or_err = vim.uv.spawn(argv[1], {
    args = vim.list_slice(argv, 2),
    cwd = root,
    -- Output to the log, never to a pipe: a detached hub outlives Neovim and its pipes.
    stdio = { nil, fd, fd },
    detached = detach,
  }, function(code)
    exited = code
    if handle and not handle:is_closing() then
      handle:close()
    end
    if M.tied[root] and M.tied[root].pid == pid_or_err then
      M.tied[root] = nil
    end
  end)
  vim.uv.fs_close(fd)
  if not handle then
    return finish(('cannot start %s: %s (set server.cmd to the hunkgate binary)'):format(argv[1], pid_or_err))
  end
  local pid = pid_or_err --[[@as integer]]
  if detach then
    handle:unref()
  else
    M.tied[root] = { handle = handle, pid = pid }
    vim.api.nvim_create_autocmd('VimLeavePre', {
      group = vim.api.nvim_create_augroup('hunkgate_serve', { clear = true }),
      callback = stop_tied,
    })
  end

  local resolve = opts.resolve
    or function(r, done)
      require('hunkgate.discovery').resolve(config.get(), r, function(found)
        done(found)
      end)
    end
  local deadline = vim.uv.now() + timeout
  local function poll()
    if exited then
      local why = M.tail(log, 8)
      return finish(
        ('the hub for %s exited (status %d) before it answered%s\n(log: %s)'):format(
          root,
          exited,
          why ~= '' and (':\n' .. why) or '',
          log
        )
      )
    end
    resolve(root, function(found)
      -- Found answering for `root`: this hub, or one started meanwhile by someone else.
      if found then
        return finish(nil, found.pid)
      end
      if vim.uv.now() > deadline then
        local why = M.tail(log, 8)
        return finish(
          ('the hub for %s (pid %d) did not answer within %d ms%s\n(log: %s)'):format(
            root,
            pid,
            timeout,
            why ~= '' and (':\n' .. why) or '',
            log
          )
        )
      end
      vim.defer_fn(poll, 100)
    end)
  end
  vim.defer_fn(poll, 50)
end

return M

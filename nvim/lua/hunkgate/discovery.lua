--- Which hub serves a repository: explicit options, a state dir, the hub's discovery record
--- (`$XDG_STATE_HOME/hunkgate/hubs/<name>-<hash12>.json`, see `:help hunkgate-discovery`), or an
--- older hub's `hub.json` in the default state dir, in that order. Whatever was found, the token
--- is only read and handed out after the hub's `/health` named the repository it is wanted for:
--- a hub of another repository on the same port never sees it.
local config = require('hunkgate.config')

local M = {}

---@class hunkgate.Found: hunkgate.Endpoint
---@field how 'explicit'|'state dir'|'record'|'default state dir' what led to the hub
---@field pid integer? the hub's process, from its /health or record
---@field skipped string[] stale records and dead hubs passed over on the way, and why

--- The options that point at a hub explicitly: `setup()` first, then the environment.
---@param cfg hunkgate.Config
---@return {url?: string, state_dir?: string, token_file?: string}
function M.overrides(cfg)
  local s = cfg.server
  local function env(name)
    local v = vim.env[name]
    return v ~= '' and v or nil
  end
  local function norm(p)
    return p and vim.fs.normalize(p)
  end
  return {
    url = s.url or env('HUNKGATE_HUB_URL'),
    state_dir = norm(s.state_dir or env('HUNKGATE_STATE_DIR')),
    token_file = norm(s.token_file or env('HUNKGATE_TOKEN_FILE')),
  }
end

--- The directory of discovery records.
---@param env? {HUNKGATE_DISCOVERY_DIR?: string, XDG_STATE_HOME?: string, HOME?: string}
---@return string
function M.dir(env)
  env = env
    or { HUNKGATE_DISCOVERY_DIR = vim.env.HUNKGATE_DISCOVERY_DIR, XDG_STATE_HOME = vim.env.XDG_STATE_HOME, HOME = vim.env.HOME }
  if env.HUNKGATE_DISCOVERY_DIR and env.HUNKGATE_DISCOVERY_DIR ~= '' then
    return vim.fs.normalize(env.HUNKGATE_DISCOVERY_DIR)
  end
  local base = env.XDG_STATE_HOME
  if not base or base == '' then
    base = (env.HOME or vim.uv.os_homedir() or '') .. '/.local/state'
  end
  return base .. '/hunkgate/hubs'
end

--- The record of `root`: named as its default state dir is (`<name>-<hash12>`).
---@param root string
---@param env? table as for `M.dir`
---@return string
function M.record_path(root, env)
  return ('%s/%s.json'):format(M.dir(env), vim.fs.basename(config.default_state_dir(root, env)))
end

local function read_file(path)
  local f = io.open(path, 'rb')
  if not f then
    return nil
  end
  local s = f:read('*a')
  f:close()
  return s
end

---@param path string
---@return table?
local function read_json(path)
  local text = read_file(path)
  if not text then
    return nil
  end
  local ok, v = pcall(vim.json.decode, text, { luanil = { object = true, array = true } })
  return ok and type(v) == 'table' and v or nil
end

--- `/proc/<pid>/stat`'s field 22 (starttime) from the file's text: counted after the last `)`,
--- since the command name (field 2) may hold spaces and parentheses.
---@param stat string
---@return string?
function M.parse_stat(stat)
  local rest = stat:match('.*%)%s+(.*)$')
  if not rest then
    return nil
  end
  local fields = vim.split(vim.trim(rest), '%s+')
  -- `rest` starts at field 3 (state).
  return fields[20]
end

--- The identity of `pid`'s start, compared as an opaque string; nil when there is no such process.
---@param pid integer
---@return string?
function M.start_identity(pid)
  local stat = read_file(('/proc/%d/stat'):format(pid))
  if stat then
    return M.parse_stat(stat)
  end
  if vim.uv.os_uname().sysname == 'Linux' then
    return nil
  end
  local ok, res = pcall(function()
    return vim.system({ 'ps', '-o', 'lstart=', '-p', tostring(pid) }, { text = true }):wait()
  end)
  local out = ok and res.code == 0 and vim.trim(res.stdout or '') or ''
  return out ~= '' and out or nil
end

--- Why a record cannot be the hub it names, judged from the process alone (nil: it may be).
---@param rec table a decoded record
---@param identity fun(pid: integer): string?
---@return string?
function M.stale_reason(rec, identity)
  if type(rec.pid) ~= 'number' or type(rec.url) ~= 'string' or type(rec.repo) ~= 'string' then
    return 'not a discovery record (no pid, url or repo)'
  end
  local now = identity(rec.pid)
  if not now then
    return ('its hub (pid %d) is not running'):format(rec.pid)
  end
  if now ~= tostring(rec.started) then
    return ('pid %d is another process now (started %s, the record says %s)'):format(rec.pid, now, tostring(rec.started))
  end
end

---@alias hunkgate.HttpGet fun(url: string, cb: fun(err: string?, reply: {status: integer, body: string}?))

local function http_get(url, cb)
  require('hunkgate.http').request('GET', url, { timeout = 2000 }, cb)
end

--- Ask `url`'s /health which repository it serves. `cb(err, health)`; `err` says why the hub
--- is not the one wanted for `want` (nil when any repository will do).
---@param get hunkgate.HttpGet
---@param url string
---@param want string?
---@param cb fun(err: string?, health: table?, wrong_repo: boolean?)
function M.check_health(get, url, want, cb)
  get(url .. '/health', function(err, reply)
    if err or not reply then
      return cb(('no hub answers at %s (%s)'):format(url, err or 'no reply'))
    end
    local ok, body = pcall(vim.json.decode, reply.body or '', { luanil = { object = true, array = true } })
    if reply.status ~= 200 or not ok or type(body) ~= 'table' then
      return cb(('%s/health answered HTTP %d, not a hunkgate hub'):format(url, reply.status))
    end
    if want and type(body.repo) == 'string' and body.repo ~= want then
      return cb(('the hub at %s serves %s, not %s'):format(url, body.repo, want), body, true)
    end
    cb(nil, body)
  end)
end

--- Read the token of a hub that passed its check.
---@param token_file string
---@return string? token
---@return string? err
local function token_at(token_file)
  local t = read_file(token_file)
  t = t and vim.trim(t)
  if not t or t == '' then
    return nil, ('no hub token at %s'):format(token_file)
  end
  return t
end

---@class hunkgate.Candidate
---@field how string
---@field url string
---@field state_dir string?
---@field token_file string
---@field repo string? the repository this hub is expected to serve
---@field pid integer?
---@field final boolean an explicit choice: when it fails, nothing else is tried
---@field needs_repo boolean /health must name the repository (a record's hub does)

--- Where to look for the hub of `root`, in order, without asking any hub yet. Records and
--- `hub.json` files whose process is gone are left out, with the reason in `skipped`.
---@param cfg hunkgate.Config
---@param root string? the repository (nil: not in one)
---@param deps? {identity?: fun(pid: integer): string?}
---@return hunkgate.Candidate[] candidates
---@return string[] skipped
function M.candidates(cfg, root, deps)
  local identity = deps and deps.identity or M.start_identity
  local o = M.overrides(cfg)
  local out, skipped = {}, {}
  local default_dir = root and config.default_state_dir(root)
  local function token_file(dir)
    return o.token_file or (dir and dir .. '/token')
  end
  if o.url then
    local dir = o.state_dir or default_dir
    out[#out + 1] = {
      how = 'explicit',
      url = o.url,
      state_dir = dir,
      token_file = token_file(dir),
      repo = root,
      final = true,
    }
    return out, skipped
  end
  if o.state_dir then
    local info = read_json(o.state_dir .. '/hub.json') or {}
    out[#out + 1] = {
      how = 'state dir',
      url = type(info.url) == 'string' and info.url or nil,
      state_dir = o.state_dir,
      token_file = token_file(o.state_dir),
      repo = root or (type(info.repo) == 'string' and info.repo or nil),
      pid = type(info.pid) == 'number' and info.pid or nil,
      final = true,
      missing = not info.url and ('no hub.json in %s (is `hunkgate serve --state-dir %s` running?)'):format(
        o.state_dir,
        o.state_dir
      ) or nil,
    }
    return out, skipped
  end
  if not root then
    return out, skipped
  end
  local path = M.record_path(root)
  local rec = read_json(path)
  local stale_pid ---@type integer?
  if rec then
    local why = M.stale_reason(rec, identity)
    if not why and rec.repo ~= root then
      why = ('it is for %s'):format(rec.repo)
    end
    if why then
      stale_pid = rec.pid
      skipped[#skipped + 1] = ('stale record %s: %s'):format(path, why)
    else
      out[#out + 1] = {
        how = 'record',
        url = rec.url,
        state_dir = type(rec.stateDir) == 'string' and rec.stateDir or nil,
        token_file = o.token_file or (type(rec.tokenFile) == 'string' and rec.tokenFile)
          or (rec.stateDir and rec.stateDir .. '/token'),
        repo = root,
        pid = rec.pid,
        record = path,
        needs_repo = true,
      }
    end
  end
  local info = read_json(default_dir .. '/hub.json')
  if info and type(info.url) == 'string' then
    if info.pid == stale_pid then
      -- The same hub's hub.json: its record already said why it is not that hub.
      skipped[#skipped + 1] = ('%s/hub.json: the same stale hub (pid %d)'):format(default_dir, info.pid)
    elseif type(info.pid) == 'number' and not identity(info.pid) then
      skipped[#skipped + 1] = ('%s/hub.json: its hub (pid %d) is not running'):format(default_dir, info.pid)
    elseif type(info.repo) == 'string' and info.repo ~= root then
      skipped[#skipped + 1] = ('%s/hub.json: it is for %s'):format(default_dir, info.repo)
    else
      out[#out + 1] = {
        how = 'default state dir',
        url = info.url,
        state_dir = default_dir,
        token_file = token_file(default_dir),
        repo = root,
        pid = info.pid,
      }
    end
  end
  return out, skipped
end

--- The message for a repository without a hub.
---@param root string?
---@return string
function M.none_text(root)
  if not root then
    return 'not in a git repository, and no server.url or server.state_dir (or HUNKGATE_HUB_URL, HUNKGATE_STATE_DIR) is set'
  end
  return ('no hub is running for %s: start one with `hunkgate serve` (or :Hunkgate serve)'):format(root)
end

--- Find the hub of `root` and check it serves `root` before reading its token.
--- `cb(found, err)`: `err` says why none was found; `found.skipped` and, on failure, the
--- third argument (the list of what was passed over) say what was passed over and why.
---@param cfg hunkgate.Config
---@param root string?
---@param cb fun(found: hunkgate.Found?, err: string?, skipped: string[])
---@param deps? {identity?: fun(pid: integer): string?, get?: hunkgate.HttpGet}
function M.resolve(cfg, root, cb, deps)
  local get = deps and deps.get or http_get
  local list, skipped = M.candidates(cfg, root, deps)
  local i = 0
  local function next_one()
    i = i + 1
    local c = list[i]
    if not c then
      return cb(nil, M.none_text(root), skipped)
    end
    if c.missing then
      return cb(nil, c.missing, skipped)
    end
    local url = c.url:gsub('/+$', '')
    M.check_health(get, url, c.repo, function(err, health, wrong_repo)
      if not err and c.needs_repo and (not health or health.repo ~= c.repo) then
        err = ('the hub at %s does not say which repository it serves'):format(url)
      end
      if err then
        local what = c.record and ('stale record %s: '):format(c.record) or (c.how .. ': ')
        if c.final or wrong_repo and c.how ~= 'record' then
          return cb(nil, err, skipped)
        end
        skipped[#skipped + 1] = what .. err
        return next_one()
      end
      if not c.token_file then
        return cb(nil, 'no server.token_file, and no state dir to find the token in', skipped)
      end
      local token, terr = token_at(c.token_file)
      if not token then
        return cb(nil, terr, skipped)
      end
      cb({
        url = url,
        token = token,
        state_dir = c.state_dir,
        token_file = c.token_file,
        repo = health and type(health.repo) == 'string' and health.repo or c.repo,
        pid = health and type(health.pid) == 'number' and health.pid or c.pid,
        how = c.how,
        skipped = skipped,
      }, nil, skipped)
    end)
  end
  next_one()
end

--- `M.resolve`, waiting for the answer (for :checkhealth and the start poll).
---@param cfg hunkgate.Config
---@param root string?
---@return hunkgate.Found? found
---@return string? err
---@return string[] skipped
function M.resolve_sync(cfg, root)
  local result
  M.resolve(cfg, root, function(found, err, skipped)
    result = { found, err, skipped }
  end)
  vim.wait(10000, function()
    return result ~= nil
  end, 10)
  if not result then
    return nil, 'timed out looking for the hub', {}
  end
  return result[1], result[2], result[3] or {}
end

return M

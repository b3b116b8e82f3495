-- Finding the hub of a repository: discovery records in a temp HUNKGATE_DISCOVERY_DIR, fake
-- processes (an identity table) and a fake /health.
local discovery = require('hunkgate.discovery')
local config = require('hunkgate.config')

local function write(path, text)
  vim.fn.mkdir(vim.fs.dirname(path), 'p')
  local f = assert(io.open(path, 'wb'))
  f:write(text)
  f:close()
end

--- A sandbox: temp state home, discovery dir and repositories; restores the environment.
local function sandbox(fn)
  local saved = {}
  local names = { 'HUNKGATE_DISCOVERY_DIR', 'XDG_STATE_HOME', 'HUNKGATE_STATE_DIR', 'HUNKGATE_HUB_URL', 'HUNKGATE_TOKEN_FILE' }
  for _, n in ipairs(names) do
    saved[n] = vim.env[n]
    vim.env[n] = nil
  end
  local base = vim.fn.tempname()
  vim.fn.mkdir(base .. '/repo-a', 'p')
  vim.fn.mkdir(base .. '/repo-b', 'p')
  vim.env.XDG_STATE_HOME = base .. '/state'
  vim.env.HUNKGATE_DISCOVERY_DIR = base .. '/hubs'
  local sb = {
    base = base,
    a = assert(vim.uv.fs_realpath(base .. '/repo-a')),
    b = assert(vim.uv.fs_realpath(base .. '/repo-b')),
    procs = {}, -- pid -> start identity of the fake processes
    health = {}, -- url -> /health body (nil: nothing answers)
    asked = {}, -- urls asked
  }
  sb.deps = {
    identity = function(pid)
      return sb.procs[pid]
    end,
    get = function(url, cb)
      sb.asked[#sb.asked + 1] = url
      local body = sb.health[url:gsub('/health$', '')]
      if not body then
        return cb('connection refused')
      end
      cb(nil, { status = 200, body = vim.json.encode(body) })
    end,
  }
  --- A hub for `repo`: its state dir with a token, and its record (unless `no_record`).
  function sb.hub(repo, o)
    o = o or {}
    local dir = o.state_dir or config.default_state_dir(repo)
    write(dir .. '/token', (o.token or 'tok-' .. vim.fs.basename(repo)) .. '\n')
    sb.procs[o.pid] = o.started or ('st' .. o.pid)
    sb.health[o.url] = { healthy = true, service = 'hunkgate', repo = o.serves or repo, pid = o.pid }
    local rec = {
      repo = repo,
      url = o.url,
      pid = o.pid,
      started = o.record_started or ('st' .. o.pid),
      stateDir = dir,
      tokenFile = dir .. '/token',
      version = '0.1.0',
    }
    if not o.no_record then
      write(discovery.record_path(repo), vim.json.encode(rec))
    end
    write(dir .. '/hub.json', vim.json.encode({ url = o.url, pid = o.pid, repo = repo }))
    return dir
  end
  function sb.resolve(root, opts)
    local cfg = assert(config.resolve(opts))
    local out
    discovery.resolve(cfg, root, function(found, err, skipped)
      out = { found = found, err = err, skipped = skipped }
    end, sb.deps)
    return assert(out, 'the fakes answer at once')
  end
  local ok, err = xpcall(fn, debug.traceback, sb)
  for _, n in ipairs(names) do
    vim.env[n] = saved[n]
  end
  vim.fn.delete(base, 'rf')
  assert(ok, err)
end

test('discovery: the records directory and the record name', function()
  eq('/d/hubs', discovery.dir({ HUNKGATE_DISCOVERY_DIR = '/d/hubs', XDG_STATE_HOME = '/s' }))
  eq('/s/hunkgate/hubs', discovery.dir({ XDG_STATE_HOME = '/s', HOME = '/h' }))
  eq('/h/.local/state/hunkgate/hubs', discovery.dir({ XDG_STATE_HOME = '', HOME = '/h' }))
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir .. '/my repo', 'p')
  local real = vim.uv.fs_realpath(dir .. '/my repo')
  eq(
    ('/s/hunkgate/hubs/my repo-%s.json'):format(vim.fn.sha256(real):sub(1, 12)),
    discovery.record_path(dir .. '/my repo', { XDG_STATE_HOME = '/s' })
  )
  vim.fn.delete(dir, 'rf')
end)

test('discovery: start identity is field 22 of /proc/<pid>/stat, counted after the last )', function()
  local fields = {}
  for i = 3, 52 do
    fields[#fields + 1] = tostring(i == 22 and 987654 or i)
  end
  local rest = table.concat(fields, ' ')
  eq('987654', discovery.parse_stat('42 (hunkgate) ' .. rest))
  eq('987654', discovery.parse_stat('42 (a) b) (c d) ' .. rest), 'a command name with ) and spaces')
  eq(nil, discovery.parse_stat('garbage'))
  -- This process: a number; a pid that cannot exist: none.
  truthy(tostring(discovery.start_identity(vim.fn.getpid())):match('^%d+$'), 'own start identity')
  eq(nil, discovery.start_identity(2 ^ 22 + 12345))
end)

test('discovery: a live record is found, checked by /health, and gives the token', function()
  sandbox(function(sb)
    local dir = sb.hub(sb.a, { url = 'http://127.0.0.1:5001', pid = 101 })
    local r = sb.resolve(sb.a)
    eq(nil, r.err)
    eq('record', r.found.how)
    eq('http://127.0.0.1:5001', r.found.url)
    eq('tok-repo-a', r.found.token)
    eq(sb.a, r.found.repo)
    eq(dir, r.found.state_dir)
    eq(101, r.found.pid)
    eq({ 'http://127.0.0.1:5001/health' }, sb.asked)
  end)
end)

test('discovery: stale records are passed over and say why; never a blind 4097', function()
  sandbox(function(sb)
    -- The hub's process is gone.
    sb.hub(sb.a, { url = 'http://127.0.0.1:5001', pid = 101 })
    sb.procs[101] = nil
    local r = sb.resolve(sb.a)
    eq(nil, r.found)
    eq(discovery.none_text(sb.a), r.err)
    truthy(r.err:find('start one with `hunkgate serve`', 1, true), r.err)
    truthy(r.skipped[1]:find('pid 101%) is not running'), r.skipped[1])
    eq({}, sb.asked, 'a dead hub is not asked, nor port 4097')

    -- The pid was reused by another process.
    sb.procs[101] = 'st-other'
    r = sb.resolve(sb.a)
    eq(nil, r.found)
    truthy(r.skipped[1]:find('pid 101 is another process now'), r.skipped[1])

    -- Alive, but its URL answers for another repository (another hub took the port).
    sb.procs[101] = 'st101'
    sb.health['http://127.0.0.1:5001'].repo = sb.b
    r = sb.resolve(sb.a)
    eq(nil, r.found)
    truthy(r.skipped[1]:find('serves ' .. vim.pesc(sb.b) .. ', not ' .. vim.pesc(sb.a)), r.skipped[1])

    -- Alive, nothing answers.
    sb.health['http://127.0.0.1:5001'] = nil
    r = sb.resolve(sb.a)
    eq(nil, r.found)
    truthy(r.skipped[1]:find('no hub answers at http://127.0.0.1:5001'), r.skipped[1])

    -- Positive control: the same record, healthy, is found.
    sb.health['http://127.0.0.1:5001'] = { healthy = true, repo = sb.a, pid = 101 }
    eq('record', sb.resolve(sb.a).found.how)
  end)
end)

test('discovery: two repositories, each finds its own hub', function()
  sandbox(function(sb)
    sb.hub(sb.a, { url = 'http://127.0.0.1:5001', pid = 101 })
    sb.hub(sb.b, { url = 'http://127.0.0.1:5002', pid = 102, state_dir = sb.base .. '/custom-state' })
    local a, b = sb.resolve(sb.a), sb.resolve(sb.b)
    eq({ 'http://127.0.0.1:5001', 'tok-repo-a' }, { a.found.url, a.found.token })
    eq({ 'http://127.0.0.1:5002', 'tok-repo-b', sb.base .. '/custom-state' }, { b.found.url, b.found.token, b.found.state_dir })
  end)
end)

test('discovery: an older hub is found by the default state dir when its pid is alive', function()
  sandbox(function(sb)
    local dir = sb.hub(sb.a, { url = 'http://127.0.0.1:5001', pid = 101, no_record = true })
    local r = sb.resolve(sb.a)
    eq('default state dir', r.found.how)
    eq(dir, r.found.state_dir)
    sb.procs[101] = nil
    r = sb.resolve(sb.a)
    eq(nil, r.found)
    truthy(r.skipped[1]:find('hub.json: its hub %(pid 101%) is not running'), r.skipped[1])
  end)
end)

test('discovery: an explicit URL or state dir wins; a hub of another repository is an error naming both', function()
  sandbox(function(sb)
    sb.hub(sb.a, { url = 'http://127.0.0.1:5001', pid = 101 })
    local bdir = sb.hub(sb.b, { url = 'http://127.0.0.1:5002', pid = 102, state_dir = sb.base .. '/b-state', no_record = true })

    -- server.url of repo-b's hub while in repo-a: refused, not passed over to repo-a's record.
    local r = sb.resolve(sb.a, { server = { url = 'http://127.0.0.1:5002', token_file = bdir .. '/token' } })
    eq(nil, r.found)
    eq(('the hub at http://127.0.0.1:5002 serves %s, not %s'):format(sb.b, sb.a), r.err)
    -- The same options in repo-b: found, explicitly.
    r = sb.resolve(sb.b, { server = { url = 'http://127.0.0.1:5002', token_file = bdir .. '/token' } })
    eq({ 'explicit', 'tok-repo-b' }, { r.found.how, r.found.token })

    -- server.state_dir, and HUNKGATE_STATE_DIR from the environment.
    r = sb.resolve(sb.b, { server = { state_dir = bdir } })
    eq({ 'state dir', 'http://127.0.0.1:5002', 'tok-repo-b' }, { r.found.how, r.found.url, r.found.token })
    vim.env.HUNKGATE_STATE_DIR = bdir
    r = sb.resolve(sb.b)
    eq({ 'state dir', 'http://127.0.0.1:5002' }, { r.found.how, r.found.url })
    r = sb.resolve(sb.a)
    eq(nil, r.found, "HUNKGATE_STATE_DIR of repo-b's hub in repo-a")
    truthy(r.err:find('serves ' .. vim.pesc(sb.b)), r.err)
    vim.env.HUNKGATE_STATE_DIR = sb.base .. '/nowhere'
    r = sb.resolve(sb.a)
    truthy(r.err:find('no hub.json in ' .. vim.pesc(sb.base .. '/nowhere')), r.err)
    vim.env.HUNKGATE_STATE_DIR = nil

    -- HUNKGATE_HUB_URL + HUNKGATE_TOKEN_FILE.
    vim.env.HUNKGATE_HUB_URL = 'http://127.0.0.1:5002/'
    vim.env.HUNKGATE_TOKEN_FILE = bdir .. '/token'
    r = sb.resolve(sb.b)
    eq({ 'explicit', 'http://127.0.0.1:5002', 'tok-repo-b' }, { r.found.how, r.found.url, r.found.token })
  end)
end)

test('discovery: a record whose hub does not name its repository is stale', function()
  sandbox(function(sb)
    sb.hub(sb.a, { url = 'http://127.0.0.1:5001', pid = 101 })
    sb.health['http://127.0.0.1:5001'].repo = nil
    local r = sb.resolve(sb.a)
    truthy(r.skipped[1]:find('does not say which repository'), vim.inspect(r.skipped))
  end)
end)

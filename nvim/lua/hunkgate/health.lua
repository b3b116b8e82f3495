--- :checkhealth hunkgate
local M = {}

function M.check()
  local health = vim.health

  health.start('hunkgate: Neovim')
  if vim.fn.has('nvim-0.10') == 1 then
    health.ok(('Neovim %s'):format(tostring(vim.version())))
  else
    health.error('Neovim 0.10 or newer is required', { 'Upgrade Neovim' })
  end

  health.start('hunkgate: keys')
  require('hunkgate.keys').check(require('hunkgate.config').get())
  M.hub_report()
end

--- Which hub serves the current repository and how it was found, what was passed over and
--- why, whether it takes the token; then the other repositories this Neovim is connected to.
function M.hub_report()
  local health = vim.health
  local config = require('hunkgate.config')
  local discovery = require('hunkgate.discovery')
  local cfg = config.get()
  local hub = package.loaded['hunkgate.hub']

  health.start('hunkgate: hub')
  -- :checkhealth opens its own buffer: the repository is the one edited before it.
  local key = hub and hub.current_root or vim.fn.getcwd()
  local root = config.repo_root(key)
  local o = discovery.overrides(cfg)
  if root then
    health.info('repository: ' .. root)
  elseif not (o.url or o.state_dir) then
    health.warn('not inside a git repository', {
      'Open a file of the repository the hub serves, or set server.state_dir',
    })
  end
  for _, e in ipairs({ { 'url', 'HUNKGATE_HUB_URL' }, { 'state_dir', 'HUNKGATE_STATE_DIR' }, { 'token_file', 'HUNKGATE_TOKEN_FILE' } }) do
    if o[e[1]] then
      health.info(('explicit %s: %s (server.%s or %s)'):format(e[1], o[e[1]], e[1], e[2]))
    end
  end
  local found, err, skipped = discovery.resolve_sync(cfg, root)
  for _, why in ipairs(skipped) do
    health.warn('ignored ' .. why)
  end
  if not found then
    local advice = { 'Start the hub: :Hunkgate serve (or `hunkgate serve` in the repository)' }
    if err and err:find(' serves ', 1, true) then
      advice = { 'That hub serves another repository: start this one (:Hunkgate serve), or fix server.url / server.state_dir / HUNKGATE_STATE_DIR' }
    end
    health.error(err or 'cannot find the hub', advice)
    return
  end
  local how = {
    explicit = 'server.url / HUNKGATE_HUB_URL',
    ['state dir'] = 'server.state_dir / HUNKGATE_STATE_DIR',
    record = 'discovery record in ' .. discovery.dir(),
    ['default state dir'] = "the default state dir's hub.json (a hub without discovery records)",
  }
  health.ok(('hub at %s serves %s (pid %s), found by %s'):format(found.url, found.repo or '?', found.pid or '?', how[found.how] or found.how))
  health.info('state dir: ' .. (found.state_dir or '(none)'))
  local stat = vim.uv.fs_stat(found.token_file)
  if stat and require('bit').band(stat.mode, tonumber('077', 8)) ~= 0 then
    health.warn(('token %s is readable by other users'):format(found.token_file), { 'chmod 600 ' .. found.token_file })
  else
    health.ok('token: ' .. found.token_file)
  end

  local http = require('hunkgate.http')
  local aerr, auth = http.request_sync('GET', found.url .. '/suggestions', {
    headers = { Authorization = 'Bearer ' .. found.token },
  })
  if aerr or not auth then
    health.error('could not check the token: ' .. (aerr or 'no reply'))
  elseif auth.status == 200 then
    health.ok('the hub accepts the token')
  else
    health.error(('the hub refused the token (HTTP %d)'):format(auth.status), {
      'The token belongs to another hub: check server.state_dir / server.token_file',
    })
  end

  if not hub then
    return health.info('not connected (setup() with server.auto_connect, or :Hunkgate connect)')
  end
  local conn = hub.current()
  health.info(('connection: %s'):format(conn and conn.state or 'none (:Hunkgate connect)'))
  for r, c in pairs(hub.conns) do
    if c ~= conn then
      local ep = c.client and c.client.endpoint
      health.info(('also connected for %s: %s%s'):format(r, c.state, ep and (' to ' .. ep.url) or ''))
    end
  end
end

return M

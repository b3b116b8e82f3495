--- :checkhealth hunkgate
local M = {}

function M.check()
  local health = vim.health
  local config = require('hunkgate.config')
  local cfg = config.get()

  health.start('hunkgate: Neovim')
  if vim.fn.has('nvim-0.10') == 1 then
    health.ok(('Neovim %s'):format(tostring(vim.version())))
  else
    health.error('Neovim 0.10 or newer is required', { 'Upgrade Neovim' })
  end

  health.start('hunkgate: keys')
  require('hunkgate.keys').check(cfg)

  health.start('hunkgate: hub')
  local root = config.repo_root(vim.fn.getcwd())
  if root then
    health.info('repository: ' .. root)
  elseif not (cfg.server.state_dir or cfg.server.token_file) then
    health.warn('not inside a git repository', {
      'Start Neovim inside the repository the hub serves, or set server.state_dir',
    })
  end
  local ep, err = config.endpoint(cfg)
  if not ep then
    health.error(err or 'cannot find the hub', {
      'Start the hub in this repository: hunkgate serve',
      'Or point server.state_dir / server.token_file at its state dir',
    })
    return
  end
  health.info('state dir: ' .. (ep.state_dir or '(none)'))
  local stat = vim.uv.fs_stat(ep.token_file)
  if stat and require('bit').band(stat.mode, tonumber('077', 8)) ~= 0 then
    health.warn(('token %s is readable by other users'):format(ep.token_file), { 'chmod 600 ' .. ep.token_file })
  else
    health.ok('token: ' .. ep.token_file)
  end

  local http = require('hunkgate.http')
  local herr, reply = http.request_sync('GET', ep.url .. '/health')
  if herr or not reply then
    health.error(
      ('hub not reachable at %s: %s'):format(ep.url, herr or 'no reply'),
      { 'Is `hunkgate serve` running?' }
    )
    return
  end
  local ok, body = pcall(vim.json.decode, reply.body)
  if reply.status == 200 and ok and type(body) == 'table' and body.healthy then
    health.ok(('hub %s %s at %s'):format(body.service or '?', body.version or '', ep.url))
  else
    health.error(('unexpected /health answer from %s: HTTP %d'):format(ep.url, reply.status))
    return
  end

  local aerr, auth = http.request_sync('GET', ep.url .. '/suggestions', {
    headers = { Authorization = 'Bearer ' .. ep.token },
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

  local hub = package.loaded['hunkgate.hub']
  if hub and hub.client then
    health.info(('connection: %s'):format(hub.state))
  else
    health.info('not connected (setup() with server.auto_connect, or :Hunkgate connect)')
  end
end

return M

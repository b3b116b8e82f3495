--- Options, their defaults, and where the hub of the current repository is found.
local M = {}

---@class hunkgate.Config
M.defaults = {
  server = {
    -- The hub is found by its discovery record (see :help hunkgate-discovery); these point at
    -- one explicitly instead (HUNKGATE_HUB_URL, HUNKGATE_STATE_DIR, HUNKGATE_TOKEN_FILE too).
    -- The hub's base URL, e.g. "http://127.0.0.1:4097"; its token comes from token_file or
    -- the state dir.
    url = nil, ---@type string?
    -- A hub started with --state-dir: its hub.json and token.
    state_dir = nil, ---@type string?
    -- Default: <state_dir>/token.
    token_file = nil, ---@type string?
    -- The hunkgate binary :Hunkgate serve starts (a string, or a list: command and arguments).
    cmd = 'hunkgate', ---@type string|string[]
    -- Start the hub when a command needs one (run, review, list) and none runs.
    auto_start = true,
    -- A hub started from Neovim keeps running after Neovim exits; false: stopped on exit.
    detach = true,
    -- How long to wait for a started hub to answer (ms).
    start_timeout = 20000,
    auto_connect = true,
    reconnect = { min_delay = 250, max_delay = 30000 },
    ping_interval = 30000,
    request_timeout = 30000,
  },
  ui = {
    style = 'floating', ---@type 'floating'|'inline'
    position = 'right', ---@type 'right'|'left'|'center'
    width = 0.4,
    height = 0.6,
    border = 'rounded',
    -- While the floating review is open, the window it was opened from shows each hunk's
    -- file at the hunk.
    follow = true,
  },
  review = {
    -- `r` asks for an optional comment (vim.ui.input); cancelling the prompt keeps the hunk.
    reject_comment = true,
    -- Completing or discarding while hunks are still to decide asks first.
    confirm = true,
  },
  keymaps = {
    -- Every default "<leader>s…" key below (open_review and keymaps.inline) starts with this;
    -- change it to move them all, false to map none of them. Keys set explicitly are kept.
    prefix = '<leader>s',
    open_review = '<leader>sr',
    -- In the review window:
    accept = 'a',
    reject = 'r',
    modify = 'm',
    next_hunk = 'n',
    prev_hunk = 'p',
    accept_all = 'A',
    reject_all = 'X',
    complete = '<CR>',
    close = '<Esc>',
    discard = 'd',
    undo = 'u',
    jump = 'o',
    help = '?',
    -- With ui.style = "inline" the review happens in your own buffers, where single letters
    -- are taken, so these (the design's <leader>s… set) are mapped there instead.
    inline = {
      accept = '<leader>sa',
      reject = '<leader>sx',
      modify = '<leader>sm',
      next_hunk = '<leader>sn',
      prev_hunk = '<leader>sp',
      accept_all = '<leader>sA',
      reject_all = '<leader>sX',
      complete = '<leader>sc',
      close = '<leader>sq',
      discard = '<leader>sd',
      undo = '<leader>su',
      jump = '<leader>so',
      help = '<leader>s?',
    },
  },
  notifications = {
    on_ready = true,
    on_error = true,
    on_status = false,
  },
  clarify = {
    -- Ask for the answer (vim.ui.input) as soon as the agent asks a question; off: only notify.
    prompt = true,
  },
}

local current = vim.deepcopy(M.defaults)

-- Expected type of every option; a table value means a nested table of options.
local schema = {
  server = {
    url = 'string?',
    state_dir = 'string?',
    token_file = 'string?',
    cmd = 'any',
    auto_start = 'boolean',
    detach = 'boolean',
    start_timeout = 'number',
    auto_connect = 'boolean',
    reconnect = { min_delay = 'number', max_delay = 'number' },
    ping_interval = 'number',
    request_timeout = 'number',
  },
  ui = {
    style = 'string',
    position = 'string',
    width = 'number',
    height = 'number',
    border = 'any',
    follow = 'boolean',
  },
  review = { reject_comment = 'boolean', confirm = 'boolean' },
  keymaps = {
    prefix = 'key',
    open_review = 'key',
    accept = 'key',
    reject = 'key',
    modify = 'key',
    next_hunk = 'key',
    prev_hunk = 'key',
    accept_all = 'key',
    reject_all = 'key',
    complete = 'key',
    close = 'key',
    discard = 'key',
    undo = 'key',
    jump = 'key',
    help = 'key',
    inline = {
      accept = 'key',
      reject = 'key',
      modify = 'key',
      next_hunk = 'key',
      prev_hunk = 'key',
      accept_all = 'key',
      reject_all = 'key',
      complete = 'key',
      close = 'key',
      discard = 'key',
      undo = 'key',
      jump = 'key',
      help = 'key',
    },
  },
  notifications = { on_ready = 'boolean', on_error = 'boolean', on_status = 'boolean' },
  clarify = { prompt = 'boolean' },
}

local function check(spec, value, path, errs)
  if type(spec) == 'table' then
    if type(value) ~= 'table' then
      errs[#errs + 1] = ('%s: expected a table, got %s'):format(path, type(value))
      return
    end
    for k, v in pairs(value) do
      local p = path == '' and k or (path .. '.' .. k)
      if spec[k] == nil then
        errs[#errs + 1] = ('%s: unknown option'):format(p)
      else
        check(spec[k], v, p, errs)
      end
    end
  elseif spec == 'key' then
    -- false disables a mapping.
    if value ~= false and type(value) ~= 'string' then
      errs[#errs + 1] = ('%s: expected a key (string) or false, got %s'):format(path, type(value))
    end
  elseif spec ~= 'any' then
    local want, optional = spec:gsub('%?$', '')
    if not (type(value) == want or (optional > 0 and value == nil)) then
      errs[#errs + 1] = ('%s: expected %s, got %s'):format(path, want, type(value))
    end
  end
end

--- The default keys that start with the default `keymaps.prefix`: `open_review` and every
--- `keymaps.inline` key, as {table path, key name}.
---@return {[1]: string[], [2]: string}[]
local function prefixed_keys()
  local out = { { {}, 'open_review' } }
  for name in pairs(M.defaults.keymaps.inline) do
    out[#out + 1] = { { 'inline' }, name }
  end
  return out
end

--- Move the default "<leader>s…" keys the user did not set under `keymaps.prefix` (false
--- turns them all off).
---@param cfg hunkgate.Config merged options
---@param opts table the user's options
local function apply_prefix(cfg, opts)
  local prefix = cfg.keymaps.prefix
  local default = M.defaults.keymaps.prefix
  if prefix == default then
    return
  end
  local user = opts.keymaps or {}
  for _, k in ipairs(prefixed_keys()) do
    local path, name = k[1], k[2]
    local set, def, dst = user, M.defaults.keymaps, cfg.keymaps
    for _, part in ipairs(path) do
      set, def, dst = (set or {})[part], def[part], dst[part]
    end
    if (set or {})[name] == nil then
      dst[name] = prefix and (prefix .. def[name]:sub(#default + 1)) or false
    end
  end
end

--- Validate `opts` and merge them over the defaults.
---@param opts table?
---@return hunkgate.Config? config
---@return string[] errors
function M.resolve(opts)
  opts = opts or {}
  local errs = {}
  check(schema, opts, '', errs)
  if #errs > 0 then
    return nil, errs
  end
  local cfg = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts)
  apply_prefix(cfg, opts)
  if cfg.ui.style ~= 'floating' and cfg.ui.style ~= 'inline' then
    errs[#errs + 1] = ('ui.style: %q is not one of "floating", "inline"'):format(cfg.ui.style)
  end
  if not vim.tbl_contains({ 'right', 'left', 'center' }, cfg.ui.position) then
    errs[#errs + 1] = ('ui.position: %q is not one of "right", "left", "center"'):format(cfg.ui.position)
  end
  local cmd = cfg.server.cmd
  if not (type(cmd) == 'string' or (vim.islist(cmd) and #cmd > 0 and #vim.tbl_filter(function(w)
    return type(w) ~= 'string'
  end, cmd) == 0)) then
    errs[#errs + 1] = 'server.cmd: expected a string or a list of strings'
  end
  if #errs > 0 then
    return nil, errs
  end
  return cfg, errs
end

---@param cfg hunkgate.Config
function M.set(cfg)
  current = cfg
end

---@return hunkgate.Config
function M.get()
  return current
end

--- The git repository around `dir`.
---@param dir string
---@return string?
function M.repo_root(dir)
  local root = vim.fs.root(dir, '.git')
  return root and (vim.uv.fs_realpath(root) or root)
end

--- The state dir the hub uses by default for `root`: a readable name plus a hash of the
--- canonical path, so two checkouts with the same name never share a hub.
---@param root string
---@param env? {XDG_STATE_HOME?: string, HOME?: string}
---@return string
function M.default_state_dir(root, env)
  env = env or { XDG_STATE_HOME = vim.env.XDG_STATE_HOME, HOME = vim.env.HOME }
  local real = vim.uv.fs_realpath(root) or root
  local base = env.XDG_STATE_HOME
  if not base or base == '' then
    base = (env.HOME or vim.uv.os_homedir() or '') .. '/.local/state'
  end
  local name = vim.fs.basename(real)
  if name == '' then
    name = 'root'
  end
  return ('%s/hunkgate/%s-%s'):format(base, name, vim.fn.sha256(real):sub(1, 12))
end

return M

--- `:Hunkgate {subcommand}` and its completion.
local M = {}

--- The code a :Hunkgate run was given a range for: the visual selection when the range came
--- from one (charwise selections keep their columns), otherwise whole lines.
---@param opts table nvim_create_user_command callback opts
---@return hunkgate.Selection?
local function selection(opts)
  if opts.range == 0 then
    return nil
  end
  local buf = vim.api.nvim_get_current_buf()
  local lines
  local vs, ve = vim.fn.getpos("'<"), vim.fn.getpos("'>")
  local mode = vim.fn.visualmode()
  if opts.range == 2 and vs[2] == opts.line1 and ve[2] == opts.line2 and mode ~= '' and mode ~= 'V' then
    lines = vim.fn.getregion(vs, ve, { type = mode })
  else
    lines = vim.api.nvim_buf_get_lines(buf, opts.line1 - 1, opts.line2, false)
  end
  local root = require('hunkgate.hub').root()
  local name = vim.api.nvim_buf_get_name(buf)
  local path = name == '' and '[No Name]' or require('hunkgate.prompt').relative(vim.uv.fs_realpath(name) or name, root)
  return {
    path = path,
    first = opts.line1,
    last = opts.line2,
    filetype = vim.bo[buf].filetype,
    lines = lines,
  }
end

local function api()
  return require('hunkgate')
end

---@type table<string, fun(args: string, opts: table)>
M.subcommands = {
  connect = function()
    api().connect()
  end,
  disconnect = function()
    api().disconnect()
  end,
  review = function(args)
    api().review(args ~= '' and args or nil)
  end,
  list = function()
    api().list()
  end,
  run = function(args, opts)
    api().run(args, selection(opts))
  end,
  accept = function()
    api().accept_hunk()
  end,
  reject = function()
    api().reject_hunk()
  end,
  modify = function()
    api().modify_hunk()
  end,
  accept_all = function()
    api().accept_all()
  end,
  reject_all = function()
    api().reject_all()
  end,
  complete = function()
    api().complete()
  end,
  discard = function()
    api().discard()
  end,
  undo = function()
    api().undo()
  end,
  status = function()
    api().status()
  end,
  answer = function(args)
    api().answer(args ~= '' and args or nil)
  end,
  skip = function()
    api().skip()
  end,
}

---@param opts table
function M.dispatch(opts)
  local sub, rest = opts.args:match('^%s*(%S*)%s*(.-)%s*$')
  local fn = M.subcommands[sub]
  if not fn then
    vim.notify(
      ('hunkgate: unknown subcommand %q; expected one of %s'):format(sub, table.concat(M.names(), ', ')),
      vim.log.levels.ERROR
    )
    return
  end
  fn(rest, opts)
end

---@return string[]
function M.names()
  local names = vim.tbl_keys(M.subcommands)
  table.sort(names)
  return names
end

function M.complete(arglead, cmdline)
  local words = vim.split(cmdline:gsub('^%S+%s*', ''), '%s+')
  if #words <= 1 then
    return vim.tbl_filter(function(n)
      return vim.startswith(n, arglead)
    end, M.names())
  end
  if words[1] == 'review' and #words == 2 then
    local out = {}
    for _, s in ipairs(require('hunkgate.hub').store:list()) do
      if vim.startswith(s.id, arglead) then
        out[#out + 1] = s.id
      end
    end
    return out
  end
  return {}
end

return M

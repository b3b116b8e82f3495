--- `:Hunkgate {subcommand}` and its completion: one subcommand per action of hunkgate.actions.
local actions = require('hunkgate.actions')

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

---@param opts table
function M.dispatch(opts)
  local sub, rest = opts.args:match('^%s*(%S*)%s*(.-)%s*$')
  local a = actions.by_name[sub]
  if not a then
    require('hunkgate.notify').send(
      ('hunkgate: unknown subcommand %q; expected one of %s'):format(sub, table.concat(M.names(), ', ')),
      vim.log.levels.ERROR
    )
    return
  end
  actions.run_subcommand(a, rest, opts, selection)
end

---@return string[]
function M.names()
  local names = vim.tbl_map(function(a)
    return a.name
  end, actions.list)
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
  local a = actions.by_name[words[1]]
  if a and a.complete and #words == 2 then
    return a.complete(arglead)
  end
  return {}
end

return M

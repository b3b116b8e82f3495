-- :help hunkgate stays complete: it builds into tags without errors, and every subcommand,
-- option, <Plug> mapping and public function is in it.
local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2)))
local root = vim.fs.dirname(vim.fs.dirname(here))
local doc_path = root .. '/doc/hunkgate.txt'
local doc = table.concat(vim.fn.readfile(doc_path), '\n')

test('helptags builds and has the entry points', function()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, 'p')
  vim.fn.writefile(vim.fn.readfile(doc_path), dir .. '/hunkgate.txt')
  vim.cmd.helptags(vim.fn.fnameescape(dir))
  local tags = {}
  for _, line in ipairs(vim.fn.readfile(dir .. '/tags')) do
    tags[line:match('^[^\t]+')] = true
  end
  vim.fn.delete(dir, 'rf')
  for _, want in ipairs({ 'hunkgate', 'hunkgate-config', ':Hunkgate', 'hunkgate.setup()', 'hunkgate-health', 'HunkgateUpdate' }) do
    truthy(tags[want], 'missing tag ' .. want)
  end
  for _, sub in ipairs(require('hunkgate.commands').names()) do
    truthy(tags[':Hunkgate-' .. sub], 'undocumented subcommand ' .. sub)
  end
  for name, v in pairs(require('hunkgate')) do
    if type(v) == 'function' then
      truthy(tags['hunkgate.' .. name .. '()'], 'undocumented function hunkgate.' .. name .. '()')
    end
  end
end)

test('the shipped doc/tags is what :helptags makes of doc/hunkgate.txt', function()
  -- Shipped so that :help hunkgate works on a plain 'runtimepath' install; regenerate with
  -- `nvim --headless -u NONE -c 'helptags nvim/doc' -c q` after changing a *tag*.
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, 'p')
  vim.fn.writefile(vim.fn.readfile(doc_path), dir .. '/hunkgate.txt')
  vim.cmd.helptags(vim.fn.fnameescape(dir))
  local fresh = vim.fn.readfile(dir .. '/tags')
  vim.fn.delete(dir, 'rf')
  truthy(#fresh > 10, 'positive control: helptags made tags')
  eq(fresh, vim.fn.readfile(root .. '/doc/tags'), 'nvim/doc/tags is out of date')
end)

test('every option is documented with its default', function()
  local function walk(t, prefix)
    for k, v in pairs(t) do
      if type(v) == 'table' then
        walk(v, prefix .. k .. '.')
      else
        local value = type(v) == 'string' and ("'" .. v .. "'") or tostring(v)
        truthy(doc:find(('%s = %s'):format(k, value), 1, true), ('option %s%s = %s not in the doc'):format(prefix, k, value))
      end
    end
  end
  walk(require('hunkgate.config').defaults, '')
end)

test('every <Plug> mapping and highlight group is documented', function()
  local actions = require('hunkgate.actions')
  truthy(#actions.list > 0, 'positive control: there are actions')
  for _, a in ipairs(actions.list) do
    local plug = '<Plug>(hunkgate-' .. actions.plug_name(a) .. ')'
    truthy(doc:find(plug, 1, true), 'undocumented ' .. plug)
  end
  for group in pairs(require('hunkgate.highlights').links) do
    truthy(doc:find(group, 1, true), 'undocumented highlight ' .. group)
  end
end)

-- :help hunkwise stays complete: it builds into tags without errors, and every subcommand,
-- option, <Plug> mapping and public function is in it.
local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2)))
local root = vim.fs.dirname(vim.fs.dirname(here))
local doc_path = root .. '/doc/hunkwise.txt'
local doc = table.concat(vim.fn.readfile(doc_path), '\n')

test('helptags builds and has the entry points', function()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, 'p')
  vim.fn.writefile(vim.fn.readfile(doc_path), dir .. '/hunkwise.txt')
  vim.cmd.helptags(vim.fn.fnameescape(dir))
  local tags = {}
  for _, line in ipairs(vim.fn.readfile(dir .. '/tags')) do
    tags[line:match('^[^\t]+')] = true
  end
  vim.fn.delete(dir, 'rf')
  for _, want in ipairs({ 'hunkwise', 'hunkwise-config', ':Hunkwise', 'hunkwise.setup()', 'hunkwise-health', 'HunkwiseUpdate' }) do
    truthy(tags[want], 'missing tag ' .. want)
  end
  for _, sub in ipairs(require('hunkwise.commands').names()) do
    truthy(tags[':Hunkwise-' .. sub], 'undocumented subcommand ' .. sub)
  end
  for name, v in pairs(require('hunkwise')) do
    if type(v) == 'function' then
      truthy(tags['hunkwise.' .. name .. '()'], 'undocumented function hunkwise.' .. name .. '()')
    end
  end
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
  walk(require('hunkwise.config').defaults, '')
end)

test('every <Plug> mapping and highlight group is documented', function()
  local plugin = table.concat(vim.fn.readfile(root .. '/plugin/hunkwise.lua'), '\n')
  for name in plugin:gmatch("plug%('([%w-]+)'") do
    truthy(doc:find('<Plug>(hunkwise-' .. name .. ')', 1, true), 'undocumented <Plug>(hunkwise-' .. name .. ')')
  end
  for group in pairs(require('hunkwise.highlights').links) do
    truthy(doc:find(group, 1, true), 'undocumented highlight ' .. group)
  end
end)

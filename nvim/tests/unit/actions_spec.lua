-- One action table (hunkgate.actions) makes the <Plug> mappings, the :Hunkgate subcommands,
-- the Lua API and the review window's keys: each action is in all of them, reaches the same
-- function with the same arguments, and :help hunkgate documents it.
local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2)))
local root = vim.fs.dirname(vim.fs.dirname(here))
vim.g.loaded_hunkgate = nil
vim.cmd.source(vim.fn.fnameescape(root .. '/plugin/hunkgate.lua'))

local actions = require('hunkgate.actions')
local commands = require('hunkgate.commands')
local api = require('hunkgate')

local doc_path = root .. '/doc/hunkgate.txt'
local doc = table.concat(vim.fn.readfile(doc_path), '\n')
local tags = {}
do
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, 'p')
  vim.fn.writefile(vim.fn.readfile(doc_path), dir .. '/hunkgate.txt')
  vim.cmd.helptags(vim.fn.fnameescape(dir))
  for _, line in ipairs(vim.fn.readfile(dir .. '/tags')) do
    tags[line:match('^[^\t]+')] = true
  end
  vim.fn.delete(dir, 'rf')
end

-- The actions the plugin had before the table (names, <Plug> names and API names must not
-- change): a positive control that the generated sets are not empty or renamed.
local before = {
  { 'review', 'review', 'review' },
  { 'list', 'list', 'list' },
  { 'connect', 'connect', 'connect' },
  { 'disconnect', 'disconnect', 'disconnect' },
  { 'status', 'status', 'status' },
  { 'accept', 'accept', 'accept_hunk' },
  { 'reject', 'reject', 'reject_hunk' },
  { 'modify', 'modify', 'modify_hunk' },
  { 'preview', 'preview', 'preview_hunk' },
  { 'next', 'next', 'nav_hunk' },
  { 'prev', 'prev', 'nav_hunk' },
  { 'accept_all', 'accept-all', 'accept_all' },
  { 'reject_all', 'reject-all', 'reject_all' },
  { 'complete', 'complete', 'complete' },
  { 'discard', 'discard', 'discard' },
  { 'undo', 'undo', 'undo' },
  { 'close', 'close', 'close' },
  { 'run', 'run', 'run' },
  { 'cancel', 'cancel', 'cancel' },
  { 'answer', 'answer', 'answer' },
  { 'skip', 'skip', 'skip' },
  -- Added with the review tied to the code (#55).
  { 'jump', 'jump', 'jump_to_hunk' },
  { 'help', 'help', 'review_help' },
  { 'serve', 'serve', 'serve' },
}

test('every action is a <Plug> map, a subcommand and an API function, and is documented', function()
  eq(#before, #actions.list, 'one action per entry point')
  for _, want in ipairs(before) do
    local a = actions.by_name[want[1]]
    truthy(a, 'missing action ' .. want[1])
    eq(want[2], actions.plug_name(a))
    eq(want[3], a.api)
  end
  local subs = commands.names()
  for _, a in ipairs(actions.list) do
    local plug = '<Plug>(hunkgate-' .. actions.plug_name(a) .. ')'
    local map = vim.fn.maparg(plug, 'n', false, true)
    truthy(map.callback, 'no Normal-mode ' .. plug)
    eq('hunkgate: ' .. a.desc, map.desc, plug .. ' description')
    truthy(vim.tbl_contains(subs, a.name), 'no subcommand ' .. a.name)
    eq(a.fn, api[a.api], 'require("hunkgate").' .. a.api)
    truthy(tags[':Hunkgate-' .. a.name], 'undocumented :Hunkgate ' .. a.name)
    truthy(tags['hunkgate.' .. a.api .. '()'], 'undocumented hunkgate.' .. a.api .. '()')
    truthy(doc:find(plug, 1, true), 'undocumented ' .. plug)
  end
  -- Visual mode: run only, through the subcommand so the selection goes along.
  eq(':Hunkgate run<CR>', vim.fn.maparg('<Plug>(hunkgate-run)', 'x'))
  eq('', vim.fn.maparg('<Plug>(hunkgate-accept)', 'x'))
end)

test('a map, a subcommand and an API call reach the same function with the same arguments', function()
  local calls = {}
  local saved = {}
  for _, a in ipairs(actions.list) do
    saved[a] = a.fn
    a.fn = function(...)
      calls[#calls + 1] = { a.name, { ... } }
    end
  end
  local ok, err = pcall(function()
    for _, a in ipairs(actions.list) do
      calls = {}
      vim.api.nvim_feedkeys(vim.keycode('<Plug>(hunkgate-' .. actions.plug_name(a) .. ')'), 'mx', false)
      vim.cmd('Hunkgate ' .. a.name)
      local bound = a.bind or {}
      eq({ { a.name, bound }, { a.name, a.bind and bound or {} } }, calls, a.name)
    end
    calls = {}
    vim.cmd('Hunkgate review  abc ')
    vim.cmd('Hunkgate answer tabs, always')
    vim.cmd('Hunkgate prev ignored')
    eq({ { 'review', { 'abc' } }, { 'answer', { 'tabs, always' } }, { 'prev', { 'prev' } } }, calls)
  end)
  for a, fn in pairs(saved) do
    a.fn = fn
  end
  assert(ok, err)
end)

test('the review window keys come from the table, in the footer order, with the configured keys', function()
  local config = require('hunkgate.config')
  local km = config.defaults.keymaps
  local maps = actions.review_maps(km)
  eq({ 'accept', 'reject', 'modify', 'next_hunk', 'prev_hunk', 'accept_all', 'reject_all', 'complete', 'close', 'discard', 'undo', 'jump', 'help' },
    vim.tbl_map(function(m)
      return m[4]
    end, maps))
  eq({ 'a', 'r', 'm', 'n', 'p', 'A', 'X', '<CR>', '<Esc>', 'd', 'u', 'o', '?' }, vim.tbl_map(function(m)
    return m[1]
  end, maps))
  eq('<leader>sa', actions.review_maps(km.inline)[1][1])
  -- Every keyed action has a keymaps option and an inline one (a key without an option could
  -- not be changed or turned off).
  for _, a in ipairs(actions.list) do
    if a.key then
      truthy(km[a.key] ~= nil and km.inline[a.key] ~= nil, 'no keymaps.' .. a.key)
      truthy(doc:find(a.key .. ' = ', 1, true), 'keymaps.' .. a.key .. ' not in the doc')
    end
  end
end)

test('completion: subcommands, then the argument of the ones that complete', function()
  local hub = require('hunkgate.hub')
  local saved = hub.store
  hub.store = require('hunkgate.store').new()
  hub.store:put({ id = 'abc123', description = 'x', hunks = {} })
  hub.store:put({ id = 'abd456', description = 'y', hunks = {} })
  eq({ 'prev', 'preview' }, vim.fn.getcompletion('Hunkgate pre', 'cmdline'))
  eq({ 'abc123' }, vim.fn.getcompletion('Hunkgate review abc', 'cmdline'))
  eq({}, vim.fn.getcompletion('Hunkgate accept abc', 'cmdline'), 'accept takes no argument')
  hub.store = saved
end)

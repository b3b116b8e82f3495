-- Runs every *_spec.lua next to this file (or the ones named as arguments):
--   nvim --headless -u NONE -l nvim/tests/unit/run.lua [spec ...]
-- A spec is plain Lua using `test(name, fn)`, `eq(want, got, msg?)` and `truthy(v, msg?)`.
-- Absolute: a spec may :cd.
local here = vim.fs.dirname(vim.fs.normalize(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p')))
local root = vim.fs.dirname(vim.fs.dirname(here))
package.path = ('%s/lua/?.lua;%s/lua/?/init.lua;'):format(root, root) .. package.path

local failures, passed = {}, 0
local current_file

function _G.eq(want, got, msg)
  if not vim.deep_equal(want, got) then
    error(('%sexpected %s, got %s'):format(msg and (msg .. ': ') or '', vim.inspect(want), vim.inspect(got)), 2)
  end
end

function _G.truthy(v, msg)
  if not v then
    error(msg or 'expected a truthy value', 2)
  end
end

function _G.test(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if ok then
    passed = passed + 1
  else
    failures[#failures + 1] = ('%s: %s\n%s'):format(current_file, name, err)
  end
end

local specs = {}
if #_G.arg > 0 then
  for _, a in ipairs(_G.arg) do
    specs[#specs + 1] = a
  end
else
  for name, type in vim.fs.dir(here) do
    if type == 'file' and name:match('_spec%.lua$') then
      specs[#specs + 1] = here .. '/' .. name
    end
  end
  table.sort(specs)
end

for _, spec in ipairs(specs) do
  current_file = vim.fs.basename(spec)
  local chunk, err = loadfile(spec)
  if not chunk then
    failures[#failures + 1] = ('%s: cannot load: %s'):format(current_file, err)
  else
    local ok, lerr = xpcall(chunk, debug.traceback)
    if not ok then
      failures[#failures + 1] = ('%s: error outside a test: %s'):format(current_file, lerr)
    end
  end
end

for _, f in ipairs(failures) do
  io.stdout:write('FAIL ', f, '\n\n')
end
io.stdout:write(('%d passed, %d failed (%d spec files)\n'):format(passed, #failures, #specs))
io.stdout:flush()
os.exit(#failures == 0 and 0 or 1)

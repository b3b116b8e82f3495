-- Starting the hub from Neovim with a stand-in for the hunkgate binary (a shell script): the
-- command line, waiting until discovery finds it, and the hub's own words when it fails.
local serve = require('hunkgate.serve')
local config = require('hunkgate.config')

--- A fake `hunkgate` running `body` (sh), with `server.cmd` pointing at it.
local function with_fake(body, fn)
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir .. '/repo', 'p')
  local script = dir .. '/hunkgate'
  vim.fn.writefile({ '#!/bin/sh', 'echo "$@" > ' .. vim.fn.shellescape(dir .. '/argv'), body }, script)
  vim.fn.setfperm(script, 'rwx------')
  local saved = config.get()
  config.set(assert(config.resolve({ server = { cmd = { script }, auto_connect = false } })))
  -- The hub's log in the test's directory, not in this user's stdpath('log').
  local log_path = serve.log_path
  serve.log_path = function()
    return dir .. '/serve.log'
  end
  local ok, err = xpcall(fn, debug.traceback, { dir = dir, repo = assert(vim.uv.fs_realpath(dir .. '/repo')) })
  serve.log_path = log_path
  config.set(saved)
  vim.fn.delete(dir, 'rf')
  assert(ok, err)
end

local function wait_result(box)
  vim.wait(10000, function()
    return box.done
  end, 10)
  truthy(box.done, 'start gave an answer')
end

test('serve: the command line', function()
  eq({ 'hunkgate', 'serve', '--repo', '/r' }, serve.argv('hunkgate', '/r'))
  eq({ '/opt/hg', '--quiet', 'serve', '--repo', '/r' }, serve.argv({ '/opt/hg', '--quiet' }, '/r'))
  local _, errs = config.resolve({ server = { cmd = { 1 } } })
  truthy(errs[1]:find('server.cmd'), vim.inspect(errs))
end)

test('serve: a hub that exits says why (the end of its output)', function()
  with_fake('echo "starting"; echo "the sandbox user does not exist: run \\`sudo hunkgate setup\\`" >&2; exit 3', function(w)
    local box = {}
    serve.start(w.repo, {
      resolve = function(_, done)
        done(nil)
      end,
    }, function(err)
      box.done, box.err = true, err
    end)
    wait_result(box)
    truthy(box.err and box.err:find('exited %(status 3%)'), box.err)
    truthy(box.err:find('run `sudo hunkgate setup`', 1, true), box.err)
    eq('serve --repo ' .. w.repo, vim.trim(vim.fn.readfile(w.dir .. '/argv')[1]))
  end)
end)

test('serve: waits until discovery finds the hub, then answers; tied hubs stop with Neovim', function()
  with_fake('exec sleep 30', function(w)
    local box, polls = {}, 0
    serve.start(w.repo, {
      detach = false,
      resolve = function(root, done)
        polls = polls + 1
        eq(w.repo, root)
        -- Found on the third look, as a hub that needs a moment to open its state.
        done(polls >= 3 and { pid = serve.tied[root] and serve.tied[root].pid } or nil)
      end,
    }, function(err, pid)
      box.done, box.err, box.pid = true, err, pid
    end)
    wait_result(box)
    eq(nil, box.err)
    eq(3, polls)
    local tied = serve.tied[w.repo]
    truthy(tied and tied.pid == box.pid, 'the started process is tied to Neovim')
    truthy(require('hunkgate.discovery').start_identity(box.pid), 'it runs')
    eq(1, #vim.api.nvim_get_autocmds({ group = 'hunkgate_serve', event = 'VimLeavePre' }))
    vim.api.nvim_exec_autocmds('VimLeavePre', { group = 'hunkgate_serve' })
    truthy(
      vim.wait(5000, function()
        return serve.tied[w.repo] == nil
      end, 10),
      'stopped on VimLeavePre'
    )
    vim.api.nvim_del_augroup_by_name('hunkgate_serve')
  end)
end)

test('serve: a hub that never answers times out with its output', function()
  with_fake('echo "listening nowhere" >&2; exec sleep 30', function(w)
    local box = {}
    serve.start(w.repo, {
      detach = false,
      timeout = 300,
      resolve = function(_, done)
        done(nil)
      end,
    }, function(err)
      box.done, box.err = true, err
    end)
    wait_result(box)
    truthy(box.err and box.err:find('did not answer within 300 ms'), box.err)
    truthy(box.err:find('listening nowhere', 1, true), box.err)
    vim.api.nvim_exec_autocmds('VimLeavePre', { group = 'hunkgate_serve' })
    vim.api.nvim_del_augroup_by_name('hunkgate_serve')
  end)
end)

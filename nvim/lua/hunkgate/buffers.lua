--- The user's buffers for files the hub writes: find them, refuse to write under unsaved
--- changes, reload them after a hunk lands.
local M = {}

local function canonical(path)
  return vim.uv.fs_realpath(path) or vim.fs.normalize(path)
end

--- Loaded buffers editing `path`.
---@param path string absolute
---@return integer[]
function M.for_path(path)
  local want = canonical(path)
  local out = {}
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == '' then
      local name = vim.api.nvim_buf_get_name(buf)
      if name ~= '' and (name == path or canonical(name) == want) then
        out[#out + 1] = buf
      end
    end
  end
  return out
end

--- A buffer for `path` with unsaved changes, if any.
---@param path string
---@return integer?
function M.dirty(path)
  for _, buf in ipairs(M.for_path(path)) do
    if vim.bo[buf].modified then
      return buf
    end
  end
end

--- Re-read `path` into every unmodified buffer showing it, keeping each window's view.
--- Buffers with unsaved changes are left alone and returned, so the caller can tell the user.
---@param path string
---@return integer[] reloaded
---@return integer[] skipped buffers with unsaved changes
function M.reload(path)
  local reloaded, skipped = {}, {}
  local exists = vim.uv.fs_stat(path) ~= nil
  for _, buf in ipairs(M.for_path(path)) do
    if vim.bo[buf].modified then
      skipped[#skipped + 1] = buf
    elseif exists then
      local views = {}
      for _, win in ipairs(vim.fn.win_findbuf(buf)) do
        views[win] = vim.api.nvim_win_call(win, vim.fn.winsaveview)
      end
      -- :edit (no bang) refuses to drop changes, should the buffer change under us.
      local ok, err = pcall(vim.api.nvim_buf_call, buf, function()
        vim.cmd('silent keepalt keepjumps edit')
      end)
      if ok then
        reloaded[#reloaded + 1] = buf
      else
        require('hunkgate.notify').send(('hunkgate: could not reload %s: %s'):format(path, err), vim.log.levels.WARN)
      end
      for win, view in pairs(views) do
        if vim.api.nvim_win_is_valid(win) then
          vim.api.nvim_win_call(win, function()
            vim.fn.winrestview(view)
          end)
        end
      end
    end
  end
  return reloaded, skipped
end

return M

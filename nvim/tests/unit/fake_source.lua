-- A fake hunk source for the unit tests (hunkgate.source's interface over a real store.lua),
-- used by review_spec.lua and controls_spec.lua. Not a spec itself.
local store_mod = require('hunkgate.store')

local M = {}

local STATE = { accept = 'accepted', reject = 'rejected', modify = 'modified', undo = 'pending' }

---@param n integer hunks per file
function M.suggestion(n, files)
  local hunks = {}
  for _, file in ipairs(files or { 'a.txt' }) do
    for i = 0, n - 1 do
      hunks[#hunks + 1] = {
        id = ('s1:%s:%d'):format(file, i),
        file = file,
        kind = 'modify',
        state = 'pending',
        index = i,
        diff = ('@@ -%d,1 +%d,1 @@\n-old %d\n+new %d\n'):format(i + 1, i + 1, i, i),
        header = { old_start = i + 1, old_lines = 1, new_start = i + 1, new_lines = 1 },
      }
    end
  end
  return { id = 's1-0123456789', description = 'rename things', files = files or { 'a.txt' }, hunks = hunks }
end

--- A source that decides like the hub: the answer first (merged before the callback), then
--- the broadcast. `hold` keeps answers back until `flush()`; `conflicts[hunk_id]` refuses.
function M.new(s, root)
  local f = { store = store_mod.new(), sent = {}, listeners = {}, held = {}, hold = false, conflicts = {} }
  f.store:put(s)
  function f:get(sid)
    return self.store:get(sid)
  end
  function f:find(prefix)
    return self.store:find(prefix)
  end
  function f:list()
    return self.store:list()
  end
  function f:root()
    return root
  end
  function f:connected()
    return true
  end
  function f:subscribe(fn)
    table.insert(self.listeners, fn)
  end
  function f:emit(change)
    for _, fn in ipairs(self.listeners) do
      fn(change)
    end
  end
  --- Another client (or the hub) changes a hunk.
  function f:change(hid, fields)
    local sid = self.store:list()[1].id
    self:emit(self.store:update_hunk(sid, vim.tbl_extend('force', { id = hid }, fields)))
  end
  function f:later(fn)
    if self.hold then
      table.insert(self.held, fn)
    else
      fn()
    end
  end
  function f:flush()
    self.hold = false
    while #self.held > 0 do
      table.remove(self.held, 1)()
    end
  end
  function f:decide(sid, hid, fields, cb)
    self.sent[#self.sent + 1] = vim.tbl_extend('force', { hunk = hid }, fields)
    self:later(function()
      if self.conflicts[hid] then
        local change = self.store:update_hunk(sid, { id = hid, state = 'conflict', conflict = self.conflicts[hid] })
        cb({ success = false, code = 'conflict', error = self.conflicts[hid] })
        return self:emit(change)
      end
      local view = { id = hid, state = STATE[fields.action] }
      if fields.action == 'modify' then
        view.applied_diff = fields.modifiedDiff
      end
      local change = self.store:update_hunk(sid, view)
      cb({ success = true, data = { hunk = view } })
      self:emit(change)
    end)
  end
  function f:decide_all(sid, action, file, cb)
    self.sent[#self.sent + 1] = { all = action, file = file }
    self:later(function()
      local decided = {}
      for _, h in ipairs(self.store:get(sid).hunks) do
        if (h.state == 'pending' or h.state == 'conflict') and (file == nil or h.file == file) then
          self.store:update_hunk(sid, { id = h.id, state = STATE[action] })
          decided[#decided + 1] = { hunk_id = h.id }
        end
      end
      cb({ success = true, data = { decided = decided, failed = {} } })
      self:emit({ kind = 'hunk', suggestion_id = sid })
    end)
  end
  function f:finish(sid, action, cb)
    self.sent[#self.sent + 1] = { finish = action }
    self:later(function()
      local s = self.store:get(sid)
      local applied = 0
      for _, h in ipairs(s.hunks) do
        applied = applied + ((h.state == 'accepted' or h.state == 'modified') and 1 or 0)
      end
      self:emit(self.store:apply({ type = 'suggestion.completed', suggestion_id = sid }))
      cb({ success = true, data = { applied_hunks = applied, hunk_count = #s.hunks } })
    end)
  end
  return f
end

return M
